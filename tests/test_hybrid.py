"""HybridBlockManager: layer groups over one pool; a window group gives back the blocks before its window.

The expected numbers below are worked out by hand in the comments (block size 2, window 4: token p reads
positions p-3..p, so after c computed tokens the next one skips c - 3 of them, (c - 3) // 2 whole blocks).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from paged_lab.kv_math import cdiv, window_blocks_held
from paged_lab.memory import BlockManager, BlockPool, InvalidArgument, InvalidBlockConfig, OutOfBlocks, replay
from paged_lab.memory.block_pool import NULL_BLOCK
from paged_lab.memory.errors import BlockManagerError
from paged_lab.memory.hybrid import HybridBlockManager, blocks_held_over_time
from paged_lab.memory.layer_groups import KVCacheGroup, kv_cache_groups
from paged_lab.memory.prefix_cache import block_hashes
from paged_lab.memory.sliding_window import SlidingWindowManager, window_prefix_hit
from paged_lab.sched import Scheduler, Sequence
from paged_lab.sched.scheduler import RequestTooLargeError
from paged_lab.sim.fit import requests_that_fit
from paged_lab.sim.kv_check import KVContentChecker, StaleKVRead

FULL, SWA = KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=4)


def test_blocks_held_over_time_by_hand():
    # Prompt 5, 6 outputs: after step s the request has 5 + s tokens with slots (the 6th output is never
    # stored). Full: cdiv(5 + s, 2) = 3 3 4 4 5 5. Window: from step 1 on, c = 4 + s computed tokens skip
    # (s + 1) // 2 blocks, so it holds cdiv(5 + s, 2) - (s + 1) // 2 = 3 2 3 2 3 2.
    held = blocks_held_over_time([FULL, SWA], block_size=2, prompt_len=5, max_tokens=6)
    assert held == {"full": [3, 3, 4, 4, 5, 5], "swa": [3, 2, 3, 2, 3, 2]}
    everything_full = blocks_held_over_time([KVCacheGroup("full", 2)], block_size=2, prompt_len=5,
                                            max_tokens=6)
    assert everything_full == {"full": [3, 3, 4, 4, 5, 5]}


def test_requests_that_fit_by_hand():
    # Prompt 4, 9 outputs (12 slotted tokens). In 18 one-layer blocks, [full, swa]: a request ends holding
    # full 6 + window 3 = 9 blocks, so 2 fit. Three do not: in lockstep each holds (full + window) 4, 6, 5,
    # then at step 3 (7 tokens) 4 + 3 = 7, and 21 > 18. Every layer full (2 layers a block, 9 blocks): one
    # request ends at 6 blocks; two reach 5 + 5 = 10 > 9 at step 5. So 1.
    def hybrid():
        return HybridBlockManager(18, 2, [FULL, SWA], record_events=False)

    def every_layer_full():
        return HybridBlockManager(9, 2, [KVCacheGroup("full", 2)], record_events=False)

    assert requests_that_fit(hybrid, prompt_len=4, max_tokens=9, limit=16) == 2
    assert requests_that_fit(every_layer_full, prompt_len=4, max_tokens=9, limit=16) == 1
    assert requests_that_fit(lambda: HybridBlockManager(4, 2, [FULL, SWA]), 4, 9) == 0  # never alone
    assert requests_that_fit(hybrid, prompt_len=4, max_tokens=9, limit=1) == 1  # capped at the limit


def test_the_window_frees_blocks_and_nulls_their_entries():
    hm = HybridBlockManager(16, 2, [FULL, SWA])
    hm.allocate("a", list(range(7)))  # 4 blocks per group
    assert hm.block_tables("a") == {"full": [0, 1, 2, 3], "swa": [4, 5, 6, 7]}
    hm.remove_skipped_blocks("a", 7)  # the 8th token reads 4..7: tokens 0..3 skipped, blocks 0 and 1
    assert hm.block_tables("a") == {"full": [0, 1, 2, 3], "swa": [NULL_BLOCK, NULL_BLOCK, 6, 7]}
    assert hm.blocks_held("a") == {"full": 4, "swa": 2}
    assert list(hm.pool.free_queue)[:2] == [5, 4]  # freed last first, to the front (no hash)
    assert [e.kind for e in hm.events["swa"]] == ["allocate", "skip"]
    assert hm.events["swa"][-1].block_ids == (5, 4)
    hm.remove_skipped_blocks("a", 7)  # again: nothing more to free
    assert hm.blocks_held("a") == {"full": 4, "swa": 2}
    hm.check_invariants()
    assert hm.used_slots == 7 + 3  # full: 7 tokens; window: tokens 4..6 in blocks 6, 7
    hm.free("a")
    assert hm.num_free_blocks == 16 and hm.used_slots == 0
    hm.check_invariants()


def test_full_attention_never_frees():
    bm = BlockManager(8, 2)
    bm.allocate("a", list(range(7)))
    bm.remove_skipped_blocks("a", 7)
    assert bm.block_table("a") == [0, 1, 2, 3]


def test_windows_live_beside_the_full_attention_manager_not_in_it():
    """As vLLM's SlidingWindowManager beside its FullAttentionManager (single_type_kv_cache_manager.py): the
    BlockManager's file holds no window, null-block or skipped-block code and reads in one sitting."""
    import paged_lab.memory.block_manager as full

    source = Path(full.__file__).read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 300
    window_words = ("NULL_BLOCK", "num_skipped_blocks", "free_blocks_before", "blocks_for_hit")
    assert not any(word in source for word in window_words)
    assert not hasattr(BlockManager, "free_blocks_before") and issubclass(SlidingWindowManager, BlockManager)
    with pytest.raises(InvalidBlockConfig, match="group"):
        SlidingWindowManager(8, 2, FULL)  # a window manager needs a window


def test_admission_counts_the_window_at_most_its_peak():
    # W=8, budget 8, block 4: the window group holds at most cdiv(8 - 1 + 8, 4) + 1 = 5 blocks.
    groups = [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=8)]
    hm = HybridBlockManager(16, 4, groups, max_num_batched_tokens=8)
    assert [hm.admission_blocks(g, 40) for g in groups] == [10, 5]
    assert [hm.admission_blocks(g, 12) for g in groups] == [3, 3]
    assert hm.can_allocate(44) and not hm.can_allocate(48)  # 11 + 5 = 16 blocks fit 16; 12 + 5 do not
    uncapped = HybridBlockManager(16, 4, groups)
    assert uncapped.admission_blocks(groups[1], 40) == 10 and not uncapped.can_allocate(40)
    assert uncapped.max_slots_per_seq == 32  # 8 blocks a group
    assert hm.max_slots_per_seq == 44  # 11 + 5 = 16 blocks


def test_allocate_and_append_are_all_or_nothing():
    hm = HybridBlockManager(7, 2, [FULL, SWA])
    with pytest.raises(OutOfBlocks, match="2 layer groups"):
        hm.allocate("big", list(range(8)))  # 4 + 4 > 7
    assert "big" not in hm and hm.num_free_blocks == 7
    hm.allocate("a", [1, 2, 3, 4, 5, 6])  # 3 + 3 blocks, 1 free
    with pytest.raises(OutOfBlocks):  # the 7th token opens a block in both groups: 2 > 1
        hm.append_tokens("a", [7])
    assert hm.block_tables("a") == {"full": [0, 1, 2], "swa": [3, 4, 5]} and hm.num_tokens("a") == 6
    hm.remove_skipped_blocks("a", 6)  # the 7th token reads 3..6: the window's block 3 (tokens 0, 1) is free
    assert hm.append_tokens("a", [7]) is None  # the full group takes block 3 (front of the queue), then 6
    assert hm.block_tables("a") == {"full": [0, 1, 2, 3], "swa": [NULL_BLOCK, 4, 5, 6]}
    hm.check_invariants()


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(InvalidBlockConfig, match="same num_layers"):
        HybridBlockManager(8, 2, [KVCacheGroup("full", 2), SWA])
    with pytest.raises(InvalidBlockConfig, match="names must differ"):
        HybridBlockManager(8, 2, [FULL, KVCacheGroup("full", 1, 4)])
    with pytest.raises(InvalidBlockConfig, match="at least one"):
        HybridBlockManager(8, 2, [])
    with pytest.raises(InvalidBlockConfig, match="sliding_window"):
        KVCacheGroup("swa", 1, sliding_window=0)
    with pytest.raises(InvalidBlockConfig, match="num_layers"):
        KVCacheGroup("swa", 0)
    hm = HybridBlockManager(8, 2, [FULL, SWA])
    hm.allocate("a", [1, 2, 3])
    with pytest.raises(InvalidArgument, match="block_tables"):
        hm.block_table("a")
    with pytest.raises(InvalidArgument, match="fork"):
        hm.fork("a", "b")
    with pytest.raises(InvalidArgument, match="num_computed_tokens"):
        hm.remove_skipped_blocks("a", -1)
    with pytest.raises(InvalidArgument, match="num_lookahead_tokens must be 0"):  # no draft slots here
        hm.append_tokens("a", [4], num_lookahead_tokens=1)
    assert hm.num_tokens("a") == 3
    with pytest.raises(InvalidArgument, match="num_prompt_tokens"):  # more than the tokens given
        hm.allocate("b", [1, 2, 3], num_prompt_tokens=4)
    assert "b" not in hm and hm.num_free_blocks == 4
    with pytest.raises(InvalidArgument, match="num_blocks"):
        hm.managers["swa"].free_blocks_before("a", 3)  # the table has 2 entries
    with pytest.raises(InvalidBlockConfig, match="pool"):
        BlockManager(8, 4, pool=BlockPool(8, 2))


def test_invariants_catch_a_null_entry_out_of_place():
    hm = HybridBlockManager(8, 2, [FULL, SWA])
    hm.allocate("a", [1, 2, 3, 4, 5])
    s = hm.managers["swa"]._seqs["a"]
    hm.pool.free_blocks([s.table[1]])
    s.table[1] = NULL_BLOCK  # a hole in the middle, not counted in num_skipped_blocks
    with pytest.raises(BlockManagerError, match="NULL_BLOCK|twice"):
        hm.check_invariants()


def test_a_shared_block_outlives_the_window_of_one_table():
    bm = SlidingWindowManager(8, 2, SWA)
    bm.allocate("a", [1, 2, 3, 4, 5])
    bm.fork("a", "b")
    assert bm.free_blocks_before("b", 2) == []  # "a" still holds both blocks
    assert bm.block_table("b") == [NULL_BLOCK, NULL_BLOCK, 2] and bm.refcount(0) == 1
    bm.check_invariants()
    assert bm.free_blocks_before("a", 1) == [0]
    bm.check_invariants()
    bm.free("a"), bm.free("b")
    assert bm.num_free_blocks == 8 and bm.used_slots == 0


def test_the_scheduler_preempts_against_both_groups():
    # 12 blocks of 2, [full, swa]: A and B (prompt 4, 8 outputs) are admitted (2 + 2 blocks each); each
    # holds 6, 5, then at 7 tokens 4 + 3 = 7 blocks, 14 > 12: B, the newest, is preempted, both its tables go.
    hm = HybridBlockManager(12, 2, [FULL, SWA])
    sched = Scheduler(hm, max_num_seqs=4)
    seqs = [Sequence(n, [1, 2, 3, 4], max_tokens=8, ignore_eos=True) for n in "AB"]
    for s in seqs:
        sched.add_request(s)
    preempted = []
    while sched.has_unfinished():
        out = sched.schedule()
        preempted += [s.seq_id for s in out.preempted]
        for s in out.preempted:
            assert s.seq_id not in hm
        hm.check_invariants()
        sched.update(out, [7] * len(out.sampling))
    assert preempted and set(preempted) == {"B"}
    assert hm.num_free_blocks == 12 and all(s.num_output_tokens == 8 for s in seqs)


def test_kv_cache_groups_split_like_vllm():
    gpt_oss = kv_cache_groups(["sliding_attention", "full_attention"] * 12, sliding_window=128)
    assert [(g.name, g.num_layers, g.sliding_window) for g in gpt_oss] == [
        ("full_attention", 12, None), ("sliding_attention", 12, 128)]
    # 5:1 (Gemma-3-like): the group size is the full layers' count, the window layers split into 5 groups
    gemma = kv_cache_groups((["sliding_attention"] * 5 + ["full_attention"]) * 2, sliding_window=512)
    assert [g.num_layers for g in gemma] == [2] * 6 and sum(g.sliding_window is None for g in gemma) == 1
    # 12 window + 13 full (< 1.5x): one group each, padded to 13 layers
    assert [g.num_layers for g in kv_cache_groups(["sliding_attention"] * 12 + ["full_attention"] * 13, 8)] \
        == [13, 13]
    assert [g.num_layers for g in kv_cache_groups(["full_attention"] * 30)] == [30]
    with pytest.raises(InvalidBlockConfig, match=r"layer_types\[1\]"):
        kv_cache_groups(["full_attention", "linear_attention"])
    with pytest.raises(InvalidBlockConfig, match="sliding_window"):
        kv_cache_groups(["sliding_attention"])


def test_swap_preemption_is_refused_up_front():
    with pytest.raises(ValueError, match="preemption='swap'"):
        Scheduler(HybridBlockManager(8, 2, [FULL, SWA]), max_num_seqs=2, preemption="swap")


@pytest.mark.parametrize("seed", range(6))
def test_random_runs_keep_the_rules_and_the_window_bound(seed):
    """Three groups (full, W=5, W=9), random requests, a small pool and budget: after every step the
    invariants hold, every live request holds the same tokens in each group, and a window group never
    holds more than cdiv(W - 1 + budget, block_size) + 1 blocks of one request (what admission counts)."""
    rng = random.Random(seed)
    bs, budget = rng.choice([2, 4]), rng.choice([4, 8, 16])
    groups = [FULL, KVCacheGroup("w5", 1, 5), KVCacheGroup("w9", 1, 9)]
    hm = HybridBlockManager(rng.randint(30, 60), bs, groups, max_num_batched_tokens=budget)
    sched = Scheduler(hm, max_num_seqs=rng.randint(1, 4), max_num_batched_tokens=budget)
    seqs = [Sequence(i, [rng.randrange(1, 500) for _ in range(rng.randint(1, 20))],
                     max_tokens=rng.randint(1, 25), ignore_eos=True) for i in range(rng.randint(2, 7))]
    pending = [(rng.randint(0, 10), seq) for seq in seqs]
    step, preempted, rejected = 0, 0, 0
    while pending or sched.has_unfinished():
        for arrival, seq in [p for p in pending if p[0] <= step]:
            pending.remove((arrival, seq))
            try:
                sched.add_request(seq)
            except RequestTooLargeError:  # longer than the pool can ever hold: rejected up front
                rejected += 1
        out = sched.schedule()
        preempted += len(out.preempted)
        hm.check_invariants()
        for sid in hm.seq_ids:
            for g in groups[1:]:
                assert hm.blocks_held(sid)[g.name] <= hm.admission_blocks(g, 10**6), (seed, step, sid)
        sched.update(out, [1] * len(out.sampling))
        step += 1
        assert step < 2000
    assert hm.num_free_blocks == hm.num_blocks and hm.used_slots == 0
    assert rejected < len(seqs), seed  # the run did something


def test_the_event_log_replays_the_windows_frees():
    """A BlockManager that owns its pool, driven as a window group: replaying its log (``skip`` events
    included) rebuilds the live pool, tables with their null entries and the free queue's order."""
    bm = SlidingWindowManager(8, 2, SWA)
    bm.allocate("a", [1, 2, 3, 4, 5])
    bm.allocate("b", [6, 7, 8])
    bm.free_blocks_before("a", 2)
    bm.append_tokens("a", [9, 10])
    bm.free_blocks_before("b", 1)
    bm.free("b")
    want = bm.state()
    got = replay(bm.events, bm.num_blocks)
    assert got.tables == want.tables == {"a": [NULL_BLOCK, NULL_BLOCK, 2, 1]}
    assert got.free_queue == want.free_queue and got.refcounts == want.refcounts
    assert got.fill(2)[2] == 2 and got.owners() == {2: ["a"], 1: ["a"]}


@pytest.mark.parametrize("block_size,window", [(2, 4), (4, 8), (4, 6), (16, 128), (3, 1)])
def test_the_manager_holds_what_kv_math_counts(block_size, window):
    """kv_math.window_blocks_held is a formula; the manager runs. They must agree on every length: a
    request with n computed tokens, its passed blocks given back, holds window_blocks_held(n) blocks."""
    group = KVCacheGroup("swa", 1, sliding_window=window)
    for n in range(1, 8 * block_size + window):
        hm = HybridBlockManager(2 * cdiv(n, block_size), block_size, [KVCacheGroup("full", 1), group])
        hm.allocate("r", range(n))
        hm.remove_skipped_blocks("r", n)
        assert hm.blocks_held("r") == {"full": cdiv(n, block_size),
                                       "swa": window_blocks_held(n, block_size, window)}, n


# -- prefix caching (block size 2, window 4: a hit needs the cdiv(4 - 1, 2) = 2 blocks before it) ----------

def test_window_prefix_hit_by_hand():
    assert window_prefix_hit([False, False, True, True, False, True], 2) == (2, 4)  # block 5 alone is short
    assert window_prefix_hit([True, True, True], 2) == (1, 3)  # the rightmost run wins; block 0 not needed
    assert window_prefix_hit([True, False, True, False], 2) == (0, 1)  # no run of 2: block 0 from the start
    assert window_prefix_hit([False, True], 2) == (0, 0) and window_prefix_hit([], 2) == (0, 0)
    assert SWA.blocks_for_hit(2) == 2 and KVCacheGroup("w", 1, 6).blocks_for_hit(4) == 2
    assert FULL.blocks_for_hit(2) is None


def caching_manager(num_blocks: int) -> HybridBlockManager:
    return HybridBlockManager(num_blocks, 2, [FULL, SWA], enable_prefix_caching=True)


def test_a_window_hit_needs_only_the_last_window():
    hm = caching_manager(20)
    assert hm.allocate("a", list(range(9))) == {"full": [0, 1, 2, 3, 4], "swa": [5, 6, 7, 8, 9]}
    # Full attention caches its 4 full blocks; the window group only blocks #2 and #3 (ids 7, 8): the window
    # before token 8 = 9 - 1, where a resend of this prompt stops. Blocks 5 and 6 get no hash.
    assert sorted(hm.pool.block_hash) == [0, 1, 2, 3, 7, 8]
    hit = hm.find_longest_cache_hit(list(range(9)))
    assert hit.num_tokens == 8 and hit.shared_prefix_boundary == 0
    assert hit.blocks == {"full": [0, 1, 2, 3], "swa": [NULL_BLOCK, NULL_BLOCK, 7, 8]}
    # The same answer from the pure function over the window group's cached state:
    found = [h in hm.pool.cached for h in block_hashes(list(range(9)), 2, "swa")[:4]]
    assert found == [False, False, True, True] and window_prefix_hit(found, 2) == (2, 4)
    assert hm.allocate("b", list(range(9))) == {"full": [0, 1, 2, 3, 10],
                                                "swa": [NULL_BLOCK, NULL_BLOCK, 7, 8, 11]}
    assert hm.num_cached_tokens("b") == 8 and hm.stats.prefix_cache_hits == 8
    assert hm.stats.prefix_cache_queries == 18
    hm.free("a")  # group by group, tail first: full's 4 (no hash), then the window's 9, 6, 5 (no hash): front
    assert list(hm.pool.free_queue)[:4] == [9, 6, 5, 4]
    hm.check_invariants()


def test_a_shared_prefix_the_window_missed_is_cached_next_time():
    hm = caching_manager(30)
    shared = list(range(100, 108))  # 4 blocks
    hm.allocate("a", shared + [1, 2, 3, 4])  # 12 tokens: the window group caches #3, #4 (before token 10)
    assert sorted(hm.pool.block_hash) == [0, 1, 2, 3, 4, 5, 9, 10]
    # b shares 8 tokens: full attention hits 4 blocks, but the window group finds #3 without #2 -> no hit.
    # So 8 becomes b's shared-prefix junction: its window group caches the 2 blocks before token 8 too.
    hit = hm.find_longest_cache_hit(shared + [5, 6, 7])
    assert (hit.num_tokens, hit.shared_prefix_boundary) == (0, 8)
    hm.allocate("b", shared + [5, 6, 7])
    assert hm.managers["swa"].boundaries["b"] == (10, 8)
    assert hm.block_tables("b")["swa"] == [18, 19, 20, 21, 22, 23]
    assert {20, 21, 22} <= set(hm.pool.block_hash) and 18 not in hm.pool.block_hash
    # c, with the same 8 tokens, now hits them: the window's block #2 is b's, #3 a's (registered first).
    hit = hm.find_longest_cache_hit(shared + [9])
    assert hit.num_tokens == 8 and hit.blocks["swa"] == [NULL_BLOCK, NULL_BLOCK, 20, 9]
    hm.check_invariants()


def test_a_recomputed_request_caches_the_window_before_its_prompt_end():
    """After a preemption the Scheduler re-allocates prompt + outputs; the window group still caches the
    window before the *prompt's* end (vLLM's replay boundary num_prompt_tokens - 1), not the outputs'."""
    hm = caching_manager(30)
    hm.allocate("r", list(range(13)), num_prompt_tokens=9)  # 9 prompt + 4 outputs
    assert hm.managers["swa"].boundaries["r"] == (8,)
    swa = hm.block_tables("r")["swa"]
    assert {b for b in swa if b in hm.pool.block_hash} == {swa[2], swa[3]}  # before token 8, not token 12


def test_caching_argument_checks_change_nothing():
    hm = caching_manager(14)
    hm.allocate("a", list(range(9)))  # 5 + 5 blocks: 4 free
    free, cached = list(hm.pool.free_queue), dict(hm.pool.block_hash)
    with pytest.raises(OutOfBlocks):  # 20 tokens hit 8: 10 - 4 new blocks in each group, 12 > 4
        hm.allocate("b", list(range(20)))
    with pytest.raises(InvalidArgument, match="max_new_tokens"):
        hm.allocate("b", list(range(9)), max_new_tokens=0)
    assert "b" not in hm and list(hm.pool.free_queue) == free and hm.pool.block_hash == cached
    # a twin's ids count its hit (1 + 1 new blocks fit in 4); a bare count cannot (5 + 5)
    assert hm.can_allocate(list(range(9))) and not hm.can_allocate(9)
    hm.check_invariants()


@pytest.mark.parametrize("seed", range(6))
def test_random_caching_runs_keep_the_rules(seed):
    """Three groups (full, W=5, W=9: two window kinds, so the hit search iterates to agreement), shared
    prefixes and twins, a small pool: the invariants hold after every step, hits happen, and every hit
    is block-aligned, no longer than the prompt minus one and agreed by every group."""
    rng = random.Random(seed)
    bs, budget = rng.choice([2, 4]), rng.choice([4, 8, 16])
    groups = [FULL, KVCacheGroup("w5", 1, 5), KVCacheGroup("w9", 1, 9)]
    hm = HybridBlockManager(rng.randint(40, 70), bs, groups, enable_prefix_caching=True,
                            max_num_batched_tokens=budget)
    sched = Scheduler(hm, max_num_seqs=rng.randint(1, 4), max_num_batched_tokens=budget)
    prefixes = [[rng.randrange(1, 500) for _ in range(rng.randint(bs, 12))] for _ in range(2)]
    prompts = [rng.choice(prefixes) + [rng.randrange(1, 500) for _ in range(rng.randint(1, 8))]
               for _ in range(4)]
    pending = [(rng.randint(0, 20), Sequence(i, rng.choice(prompts), max_tokens=rng.randint(1, 12),
                                             ignore_eos=True)) for i in range(rng.randint(4, 9))]
    kv = KVContentChecker(sched)  # every read of every group finds its own prefix's KV
    step = 0
    while pending or sched.has_unfinished():
        for arrival, seq in [p for p in pending if p[0] <= step]:
            pending.remove((arrival, seq))
            try:
                sched.add_request(seq)
            except RequestTooLargeError:
                pass
        out = sched.schedule()
        kv.check_step(out)
        for e in out.scheduled:
            n = hm.num_cached_tokens(e.seq.seq_id)
            assert n % bs == 0 and n <= len(e.seq) - 1
            assert {len(t) >= n // bs for t in hm.block_tables(e.seq.seq_id).values()} == {True}
        hm.check_invariants()
        sched.update(out, [1] * len(out.sampling))
        step += 1
        assert step < 2000
    assert hm.num_free_blocks == hm.num_blocks and hm.used_slots == 0
    assert hm.stats.prefix_cache_hits > 0, seed


def test_the_kv_check_catches_a_window_hit_missing_its_last_window():
    """The model-free KV check over a hybrid run: a hit whose window blocks do not hold the window's KV
    is caught (here: the second twin is handed a hit whose window part is the null block only)."""
    hm = caching_manager(30)
    sched = Scheduler(hm, max_num_seqs=4)
    kv = KVContentChecker(sched)
    a, b = (Sequence(n, list(range(9)), max_tokens=2, ignore_eos=True) for n in "ab")
    sched.add_request(a)
    out = sched.schedule()
    kv.check_step(out)
    sched.update(out, [1])
    real = hm.find_longest_cache_hit

    def hit_without_window(token_ids):
        hit = real(token_ids)
        return type(hit)(hit.num_tokens, {**hit.blocks, "swa": [NULL_BLOCK] * len(hit.blocks["swa"])})

    hm.find_longest_cache_hit = hit_without_window
    sched.add_request(b)
    out = sched.schedule()
    with pytest.raises(StaleKVRead, match="'b' attends position 5 .*NULL_BLOCK"):
        kv.check_step(out)


def test_whole_prompt_allocation_rejects_at_once_a_prompt_no_pool_can_hold():
    """allocation="whole_prompt" allocates every group's blocks for the whole prompt at admission, so the
    window group's peak under the token budget must not be what admission counts: a 40-token prompt needs
    10 + 10 blocks of a 19-block pool. It is rejected at once, naming the rule, and the others run (before:
    nothing was ever admitted and simulate() gave up with "did not finish within max_steps")."""
    from paged_lab.sim.simulate import simulate
    from paged_lab.sim.workloads import Request

    groups = [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=4)]
    hm = HybridBlockManager(19, 4, groups, max_num_batched_tokens=8, record_events=False)
    assert hm.max_slots_per_seq >= 40 > hm.max_whole_prompt_slots == 9 * 4  # v1 admits it, whole_prompt never
    reqs = [Request("long", tuple(range(40)), 4), Request("short", tuple(range(100, 108)), 4)]
    run = simulate(reqs, hm, {"allocation": "whole_prompt", "max_num_batched_tokens": 8, "max_num_seqs": 4})
    assert [name for name, _ in run.rejected] == ["long"]
    assert "allocation='whole_prompt'" in run.rejected[0][1] and "at most 36 slots" in run.rejected[0][1]
    assert run.summary["num_finished"] == 1
    v1 = simulate(reqs, HybridBlockManager(19, 4, groups, max_num_batched_tokens=8, record_events=False),
                  {"max_num_batched_tokens": 8, "max_num_seqs": 4})  # v1: blocks as the chunks need them
    assert v1.summary["num_finished"] == 2 and not v1.rejected


def test_reset_prefix_cache_forgets_every_group_and_the_logs_say_so():
    groups = [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=4)]
    hm = HybridBlockManager(40, 2, groups, enable_prefix_caching=True)
    hm.allocate("a", list(range(9)))
    hm.free("a")
    cached = len(hm.pool.block_hash)
    assert cached and hm.find_longest_cache_hit(list(range(9))).num_tokens == 8
    assert hm.reset_prefix_cache() == cached
    assert hm.find_longest_cache_hit(list(range(9))).num_tokens == 0
    hm.check_invariants()
    for name in hm.managers:
        assert not replay(hm.events[name], 40).cached  # each group's log records the evictions


def test_reset_drops_every_table_and_the_log_replays_it():
    groups = [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=4)]
    hm = HybridBlockManager(40, 2, groups, enable_prefix_caching=True)
    hm.allocate("a", list(range(9)))
    hm.allocate("b", list(range(5)))
    hm.reset()
    hm.check_invariants()
    assert hm.num_free_blocks == 40 and not hm.seq_ids and not hm.pool.cached
    for name, m in hm.managers.items():
        assert hm.events[name][-1].kind == "reset"
        assert replay(hm.events[name], 40) == m.state()
    assert hm.allocate("c", list(range(9))) == {"full": [0, 1, 2, 3, 4], "swa": [5, 6, 7, 8, 9]}  # as new
