"""BlockManager: block tables, append, fork and copy-on-write, free, errors, events and replay."""

import pytest

from paged_lab.memory import (
    BlockManager,
    BlockManagerError,
    CowAction,
    DuplicateSequence,
    InvalidArgument,
    InvalidBlockConfig,
    OutOfBlocks,
    UnknownSequence,
    replay,
)


def snapshot(bm):
    """Everything observable, to check that a failed operation changed nothing."""
    return (bm.state(), len(bm.events), vars(bm.stats).copy(), bm.usage, bm.num_free_blocks,
            {s: bm.token_ids(s) for s in bm.seq_ids}, dict(bm.pool.cached))


def pool_in_order(order, num_blocks=8, block_size=4, reuse="v1"):
    """A manager whose free queue hands out ``order`` first: one-block requests take every block,
    then finish in an order that puts ``order`` at the front. vLLM V1 puts each freed (uncached)
    block at the front, so the last one to finish is handed out first; the paper's LRU rule hands
    out the first one to finish first."""
    bm = BlockManager(num_blocks, block_size, reuse=reuse)
    for i in range(num_blocks):
        bm.allocate(f"warm-{i}", [0])
    rest = [b for b in range(num_blocks) if b not in order]
    finish = list(order) + rest
    for b in (finish[::-1] if reuse == "v1" else finish):
        bm.free(f"warm-{b}")
    return bm


@pytest.mark.parametrize("reuse", ["v1", "lru"])
def test_the_finish_order_that_hands_out_7_1_3(reuse):
    bm = pool_in_order([7, 1, 3], reuse=reuse)
    assert bm.pool.peek_free(3) == [7, 1, 3]


@pytest.mark.parametrize("reuse", ["v1", "lru"])
def test_seed_walkthrough_7_1_3(reuse):
    bm = pool_in_order([7, 1, 3], reuse=reuse)
    assert bm.pool.peek_free(3) == [7, 1, 3]
    assert bm.allocate("req", list(range(1, 8))) == [7, 1]  # 7 tokens -> 2 blocks
    free_before = bm.num_free_blocks
    assert bm.append_token("req", 8) is None  # token 8 fills block 1: no allocation
    assert bm.block_table("req") == [7, 1] and bm.num_free_blocks == free_before
    assert bm.append_token("req", 9) is None  # token 9 needs a new block
    assert bm.block_table("req") == [7, 1, 3] and bm.num_free_blocks == free_before - 1
    bm.free("req")
    # tail first: at the front under V1 (reused next), at the back under the paper's LRU rule
    queue = bm.pool.peek_free(8)
    assert bm.num_free_blocks == 8 and (queue[:3] if reuse == "v1" else queue[-3:]) == [3, 1, 7]
    bm.check_invariants()


def test_allocate_takes_ceil_tokens_over_block_size_distinct_blocks():
    bm = BlockManager(16, 4)
    for n, blocks in [(1, 1), (4, 1), (5, 2), (12, 3), (13, 4)]:
        table = bm.allocate(n, list(range(n)))
        assert len(table) == blocks == bm.blocks_for(n)
        assert len(set(table)) == blocks
    assert bm.num_used_blocks == 11 and bm.num_free_blocks == 5
    bm.check_invariants()


def test_append_takes_a_block_only_when_the_last_is_full():
    bm = BlockManager(4, 3)
    bm.allocate("s", [1])
    tables = []
    for t in range(2, 8):
        bm.append_token("s", t)
        tables.append(len(bm.block_table("s")))
    assert tables == [1, 1, 2, 2, 2, 3]
    assert bm.num_tokens("s") == 7 and bm.token_ids("s") == [1, 2, 3, 4, 5, 6, 7]


def test_slot_mapping_is_block_times_size_plus_offset():
    bm = pool_in_order([7, 1, 3])
    bm.allocate("s", list(range(9)))
    assert bm.block_table("s") == [7, 1, 3]
    assert bm.slot_mapping("s") == [28, 29, 30, 31, 4, 5, 6, 7, 12]
    assert bm.slot_mapping("s", start=8) == [12]
    assert bm.slot_mapping("s", 3, 5) == [31, 4]
    with pytest.raises(InvalidArgument, match="num_tokens=9"):
        bm.slot_mapping("s", 0, 10)


def test_usage_counts_slots_that_hold_tokens_and_shared_slots_once():
    bm = BlockManager(4, 4)  # 16 slots
    bm.allocate("a", [1, 2, 3, 4, 5])
    assert bm.usage == 5 / 16
    bm.fork("a", "b")
    assert bm.usage == 5 / 16  # nothing copied yet
    bm.append_token("b", 6)  # copies block 1 (1 token) and writes one more
    assert bm.usage == (5 + 2) / 16
    bm.free("a")
    assert bm.usage == 6 / 16
    bm.free("b")
    assert bm.usage == 0


def test_fork_shares_every_block():
    bm = BlockManager(8, 4)
    table = bm.allocate("p", list(range(6)))
    assert bm.fork("p", "c") == table == bm.block_table("c")
    assert [bm.refcount(b) for b in table] == [2, 2]
    assert bm.num_used_blocks == 2
    assert bm.token_ids("c") == bm.token_ids("p")
    bm.check_invariants()


def test_copy_on_write_first_writer_copies_the_shared_last_block():
    bm = BlockManager(8, 4)
    p_table = bm.allocate("p", list(range(6)))  # block 1 holds 2 tokens
    bm.fork("p", "c")
    action = bm.append_token("c", 100)
    assert isinstance(action, CowAction)
    src, dst = action
    assert src == p_table[1] and dst not in p_table
    assert bm.block_table("c") == [p_table[0], dst]
    assert bm.refcount(src) == 1 and bm.refcount(dst) == 1 and bm.refcount(p_table[0]) == 2
    assert bm.stats.num_cow == 1
    # the parent is now the only holder of src: it writes in place, no copy
    assert bm.append_token("p", 200) is None and bm.block_table("p") == p_table
    bm.check_invariants()


def test_full_shared_blocks_are_never_copied():
    bm = BlockManager(8, 4)
    table = bm.allocate("p", list(range(8)))  # exactly two full blocks
    bm.fork("p", "c")
    assert bm.append_token("c", 1) is None and bm.append_token("p", 2) is None
    assert bm.block_table("c")[:2] == bm.block_table("p")[:2] == table
    assert bm.block_table("c")[2] != bm.block_table("p")[2]
    assert bm.stats.num_cow == 0


def test_parallel_sampling_n_children_copy_once_each_but_the_last():
    bm = BlockManager(16, 4)
    table = bm.allocate("prompt", list(range(5)))
    for i in range(3):
        bm.fork("prompt", f"s{i}")
    assert bm.refcount(table[1]) == 4
    actions = [bm.append_token(f"s{i}", 9) for i in range(3)]
    assert all(isinstance(a, CowAction) and a.src == table[1] for a in actions)
    assert bm.refcount(table[1]) == 1  # only the prompt sequence still holds it
    assert bm.append_token("prompt", 9) is None
    bm.check_invariants()


def test_free_returns_blocks_last_block_first():
    bm = BlockManager(4, 2, reuse="lru")  # a plain FIFO: every freed block joins the back
    table = bm.allocate("s", [1, 2, 3, 4, 5])
    bm.free("s")
    assert bm.pool.peek_free(4) == [3] + table[::-1]
    assert "s" not in bm and bm.seq_ids == []


def test_v1_reuses_freed_uncached_blocks_first_tail_first():
    """vLLM V1 (BlockPool.free_blocks): uncached freed blocks go to the front, in the order freed
    (tail first), so the next request gets the blocks just written, while they are warm."""
    bm = BlockManager(4, 2)
    table = bm.allocate("s", [1, 2, 3, 4, 5])  # [0, 1, 2]
    bm.free("s")
    assert bm.pool.peek_free(4) == table[::-1] + [3]
    assert bm.allocate("t", [7, 8, 9]) == [2, 1]


def test_v1_puts_cached_blocks_at_the_back_and_uncached_ones_at_the_front():
    bm = BlockManager(6, 2, enable_prefix_caching=True)
    table = bm.allocate("s", [1, 2, 3, 4, 5])  # blocks 0, 1 full (cached), block 2 holds one token
    bm.free("s")
    # the partial block 2 (no hash) is reused first; the cached 1 and 0 wait at the back, tail first
    assert bm.pool.peek_free(6) == [2, 3, 4, 5, 1, 0]
    assert table == [0, 1, 2]
    bm.check_invariants()
    assert replay(bm.events, 6).free_queue == [2, 3, 4, 5, 1, 0]


def test_free_keeps_blocks_another_table_still_holds():
    bm = BlockManager(4, 2)
    table = bm.allocate("p", [1, 2, 3])
    bm.fork("p", "c")
    bm.free("p")
    assert bm.num_free_blocks == 2 and [bm.refcount(b) for b in table] == [1, 1]
    bm.free("c")
    assert bm.num_free_blocks == 4


def test_can_allocate_and_can_append():
    bm = BlockManager(3, 4)
    assert bm.can_allocate(12) and not bm.can_allocate(13)
    bm.allocate("a", list(range(8)))
    assert bm.can_allocate(4) and not bm.can_allocate(5)
    assert bm.blocks_needed_to_append("a") == 1 and bm.can_append("a")
    bm.allocate("b", [1])
    assert not bm.can_append("a")  # last block full and no block free
    assert bm.blocks_needed_to_append("b") == 0 and bm.can_append("b")
    bm.free("b")
    bm.allocate("c", [1, 2])
    bm.fork("c", "d")
    assert bm.blocks_needed_to_append("d") == 1  # shared partial block: needs a copy
    assert not bm.can_append("d")


# -- errors: each names the limit, and leaves the state as it was ----------------------------------
def test_invalid_config():
    with pytest.raises(InvalidBlockConfig, match="block_size"):
        BlockManager(8, 0)
    with pytest.raises(InvalidBlockConfig, match="num_blocks"):
        BlockManager(0, 4)


def test_out_of_blocks_on_allocate_names_needed_and_free():
    bm = BlockManager(4, 4)
    bm.allocate("a", list(range(9)))
    before = snapshot(bm)
    with pytest.raises(OutOfBlocks, match=r"needs 2 free block\(s\) but only 1") as err:
        bm.allocate("b", list(range(5)))
    assert (err.value.needed, err.value.free) == (2, 1)
    assert snapshot(bm) == before and "b" not in bm


def test_out_of_blocks_on_append_and_on_copy_on_write_change_nothing():
    bm = BlockManager(2, 2)
    bm.allocate("a", [1, 2])
    bm.allocate("b", [1])
    before = snapshot(bm)
    with pytest.raises(OutOfBlocks, match="append_token"):
        bm.append_token("a", 3)
    assert snapshot(bm) == before
    bm.free("a")
    bm.fork("b", "c")
    bm.allocate("x", [5, 6])
    before = snapshot(bm)
    with pytest.raises(OutOfBlocks, match="copy-on-write"):
        bm.append_token("c", 3)
    assert snapshot(bm) == before
    bm.check_invariants()


@pytest.mark.parametrize("op", [
    lambda bm: bm.append_token("nope", 1),
    lambda bm: bm.free("nope"),
    lambda bm: bm.fork("nope", "child"),
    lambda bm: bm.block_table("nope"),
    lambda bm: bm.slot_mapping("nope"),
    lambda bm: bm.can_append("nope"),
])
def test_unknown_sequence(op):
    bm = BlockManager(4, 4)
    bm.allocate("a", [1])
    before = snapshot(bm)
    with pytest.raises(UnknownSequence, match="seq_id='nope' is not allocated"):
        op(bm)
    assert snapshot(bm) == before


def test_freed_sequence_is_unknown_and_double_free_is_an_error():
    bm = BlockManager(4, 4)
    bm.allocate("a", [1])
    bm.free("a")
    before = snapshot(bm)
    with pytest.raises(UnknownSequence, match="already freed"):
        bm.free("a")
    with pytest.raises(UnknownSequence):
        bm.append_token("a", 2)
    assert snapshot(bm) == before


def test_duplicate_seq_id():
    bm = BlockManager(4, 4)
    bm.allocate("a", [1])
    bm.allocate("b", [1])
    before = snapshot(bm)
    with pytest.raises(DuplicateSequence, match="seq_id='a' is already allocated"):
        bm.allocate("a", [2])
    with pytest.raises(DuplicateSequence, match="'b'"):
        bm.fork("a", "b")
    assert snapshot(bm) == before


def test_empty_prompt_is_rejected():
    bm = BlockManager(4, 4)
    with pytest.raises(InvalidArgument, match="at least 1 token"):
        bm.allocate("a", [])
    assert "a" not in bm


def test_all_errors_share_one_base_class():
    for exc in (OutOfBlocks, UnknownSequence, DuplicateSequence, InvalidBlockConfig, InvalidArgument):
        assert issubclass(exc, BlockManagerError)


# -- events and replay ---------------------------------------------------------------------------
def test_every_operation_is_logged_and_stamped_with_the_clock():
    bm = BlockManager(4, 2)
    bm.allocate("p", [1, 2, 3])
    bm.clock = 5
    bm.fork("p", "c")
    bm.append_token("c", 4)
    bm.append_token("p", 4)
    bm.append_token("p", 5)
    bm.free("c")
    kinds = [(e.kind, e.seq_id, e.block_ids, e.clock) for e in bm.events]
    assert kinds == [
        ("allocate", "p", (0, 1), 0),
        ("fork", "c", (0, 1), 5),
        ("cow", "c", (1, 2), 5),
        ("append", "c", (2,), 5),
        ("append", "p", (1,), 5),
        ("append", "p", (3,), 5),
        ("free", "c", (0, 2), 5),
    ]
    assert [e.index for e in bm.events] == list(range(7))
    assert all(e.describe() for e in bm.events)


def test_the_replay_has_one_handler_for_each_kind_of_event_in_one_table():
    from paged_lab.memory.events import KINDS, _Replayer

    assert set(_Replayer.HANDLERS) == set(KINDS) and all(map(callable, _Replayer.HANDLERS.values()))


def test_used_slots_are_computed_from_the_tables_and_sequences_are_read_only():
    bm = BlockManager(8, 4)
    bm.allocate("p", [1, 2, 3, 4, 5, 6])  # blocks 0 (full) and 1 (2 of 4 slots)
    bm.fork("p", "c")  # shares both: the half-filled block 1 counts once
    assert (bm.reserved_slots, bm.empty_slots, bm.used_slots) == (8, 2, 6)
    bm.append_token("c", 7)  # copy-on-write: c's own block 2 holds 3 tokens, p's block 1 still 2
    assert (bm.reserved_slots, bm.empty_slots, bm.used_slots) == (12, 3, 9)
    with pytest.raises(TypeError):
        bm.sequences["x"] = bm.sequences["p"]  # a read-only view (the invariant checks read the tables)
    bm.free("p"), bm.free("c")
    assert bm.used_slots == bm.empty_slots == 0


def test_replay_matches_the_live_state_after_every_event():
    bm = BlockManager(6, 2, enable_prefix_caching=True)
    states = []

    def step(fn, *args):
        fn(*args)
        states.append((len(bm.events), bm.state()))

    step(bm.allocate, "a", [1, 2, 3, 4, 5])
    step(bm.fork, "a", "b")
    step(bm.append_token, "b", 6)
    step(bm.append_token, "a", 7)
    step(bm.free, "a")
    step(bm.allocate, "c", [1, 2, 3, 4, 9])
    step(bm.allocate, "d", [8, 8, 8])
    step(bm.free, "b")
    step(bm.allocate, "e", [7])
    assert "evict" in {e.kind for e in bm.events} and "hit" in {e.kind for e in bm.events}
    for upto, live in states:
        assert replay(bm.events, 6, upto) == live
    assert replay(bm.events, 6).last == bm.events[-1]


def test_record_events_off_logs_nothing():
    bm = BlockManager(4, 2, record_events=False)
    bm.allocate("a", [1, 2, 3])
    bm.free("a")
    assert bm.events == []


# -- bad arguments: a clear error naming the argument, and nothing changed --------------------------

def _snapshot(bm):
    return bm.state(), len(bm.events), bm.usage, list(bm.pool.free_queue)


@pytest.mark.parametrize("call, match", [
    (lambda bm: bm.pool.touch(-1), r"block_id must be an integer >= 0 and <= 7, got -1"),
    (lambda bm: bm.pool.touch(8), r"block_id must be an integer >= 0 and <= 7, got 8"),
    (lambda bm: bm.pool.release(5), r"release\(block_id=5\): the block is already free"),
    (lambda bm: bm.refcount(-1), r"block_id must be an integer >= 0 and <= 7, got -1"),
    (lambda bm: bm.can_allocate(-5), r"tokens must be an integer >= 0, got -5"),
    (lambda bm: bm.num_blocks_needed(True), r"tokens must be an integer >= 0, got True"),
    (lambda bm: bm.allocate("b", [1, 2, "3"]), r"token_ids\[2\] must be an integer, got '3'"),
    (lambda bm: bm.allocate("b", [1, 2.0]), r"token_ids\[1\] must be an integer, got 2.0"),
    (lambda bm: bm.can_allocate([1, None]), r"tokens\[1\] must be an integer, got None"),
    (lambda bm: bm.append_token("a", 1.5), r"token_id must be an integer, got 1.5"),
    (lambda bm: bm.allocate("b", [1, 2], num_tokens_to_cache=3),
     r"num_tokens_to_cache must be .* <= 2, got 3"),
    (lambda bm: bm.cache_blocks("a", 9), r"num_tokens must be an integer >= 0 and <= 6, got 9"),
    (lambda bm: bm.append_tokens("a", [7], num_lookahead_tokens=-1),
     r"num_lookahead_tokens must be an integer >= 0, got -1"),
    (lambda bm: bm.append_tokens("a", [7], num_lookahead_tokens=None),
     r"num_lookahead_tokens must be an integer >= 0, got None"),
])
def test_bad_arguments_raise_and_change_nothing(call, match):
    from paged_lab.memory import InvalidArgument

    bm = BlockManager(8, 4, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 5, 6])
    before = _snapshot(bm)
    with pytest.raises(InvalidArgument, match=match):
        call(bm)
    assert _snapshot(bm) == before
    bm.check_invariants()
    # touch(-1) used to unlink the last block from the free queue and turn it into a cycle
    assert len(list(bm.pool.free_queue)) == bm.num_free_blocks == 6
