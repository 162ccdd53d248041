"""Step-level behaviour of the Scheduler over the real BlockManager (what the engine relies on)."""

import pytest

from paged_lab.memory import BlockManager, ContiguousAllocator
from paged_lab.sched import RequestTooLargeError, Scheduler, Sequence, SequenceStatus


def step(sched, tokens=None):
    """schedule() + update() with token 7 (or the given ids) for every sampling entry."""
    out = sched.schedule()
    n = len(out.sampling)
    finished = sched.update(out, tokens if tokens is not None else [7] * n)
    return out, finished


def test_prefill_then_decode_ranges():
    bm = BlockManager(8, 4)
    sched = Scheduler(bm, max_num_seqs=2)
    s = Sequence("a", [1, 2, 3, 4, 5], max_tokens=3)
    sched.add_request(s)
    out = sched.schedule()
    [e] = out.scheduled
    assert (e.seq, e.start, e.end, e.is_prefill, e.samples) == (s, 0, 5, True, True)
    assert len(bm.slot_mapping("a", e.start, e.end)) == 5  # slots exist for every token computed
    assert sched.update(out, [11]) == []
    assert s.token_ids[-1] == 11 and s.num_computed_tokens == 5 and s.first_token_step == 0
    out = sched.schedule()
    [e] = out.scheduled
    assert (e.start, e.end, e.is_prefill) == (5, 6, False)
    assert bm.num_tokens("a") == 6  # the token sampled last step got its slot in schedule()
    sched.update(out, [12])
    out, finished = step(sched, [13])
    assert finished == [s] and s.finish_reason == "length" and s.output_token_ids == [11, 12, 13]
    assert s.status is SequenceStatus.FINISHED and not bm.seq_ids and not sched.has_unfinished()
    assert s.finish_step == 2 and s.latency_steps == 3


def test_update_checks_its_inputs():
    sched = Scheduler(BlockManager(8, 4), max_num_seqs=2)
    sched.add_request(Sequence("a", [1, 2], 3))
    out = sched.schedule()
    with pytest.raises(ValueError, match="sampled_token_ids"):
        sched.update(out, [1, 2])
    sched.update(out, [1])  # the failed call changed nothing
    with pytest.raises(ValueError, match="out"):
        sched.update(out, [1])  # the same output twice


def test_eos_stops_unless_ignored():
    sched = Scheduler(BlockManager(8, 4), max_num_seqs=2)
    a, b = Sequence("a", [1], 5, eos_token_id=0), Sequence("b", [1], 2, eos_token_id=0, ignore_eos=True)
    sched.add_request(a)
    sched.add_request(b)
    _, fin = step(sched, [0, 0])
    assert fin == [a] and a.finish_reason == "stop" and b.status is SequenceStatus.RUNNING
    _, fin = step(sched, [0])
    assert fin == [b] and b.finish_reason == "length" and b.output_token_ids == [0, 0]


def test_admission_waits_until_the_whole_prompt_fits():
    bm = BlockManager(4, 4)  # 16 slots
    sched = Scheduler(bm, max_num_seqs=4)
    a, b, c = Sequence("a", [1] * 10, 3), Sequence("b", [2] * 8, 2), Sequence("c", [3] * 2, 2)
    for s in (a, b, c):
        sched.add_request(s)
    out, _ = step(sched)
    # a takes 3 blocks; b needs 2 and waits; c would fit but never overtakes b (first come, first served)
    assert [e.seq for e in out.scheduled] == [a] and list(sched.waiting) == [b, c]
    while sched.has_unfinished():
        step(sched)
    assert all(s.num_output_tokens == s.max_tokens for s in (a, b, c))


def test_max_num_seqs_caps_the_running_set():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=2)
    for i in range(5):
        sched.add_request(Sequence(i, [1, 2], 3))
    out, _ = step(sched)
    assert len(out.scheduled) == 2 and len(sched.waiting) == 3


def test_static_waits_for_the_whole_batch_continuous_refills():
    for mode, admitted_at_step_1 in (("static", 0), ("continuous", 1)):
        sched = Scheduler(BlockManager(64, 4), max_num_seqs=2, mode=mode)
        for i, n in enumerate((1, 3, 1)):
            sched.add_request(Sequence(i, [1, 2], n))
        step(sched)  # seq 0 finishes after its prefill
        out, _ = step(sched)
        assert sum(e.is_prefill for e in out.scheduled) == admitted_at_step_1, mode


def test_recompute_preemption_frees_and_requeues_the_newest():
    bm = BlockManager(3, 2)  # 6 slots
    sched = Scheduler(bm, max_num_seqs=2)
    a, b = Sequence("a", [1, 2], 4), Sequence("b", [3, 4], 4)
    sched.add_request(a)
    sched.add_request(b)
    step(sched)  # both prefilled: 2 blocks used, 1 free
    out, _ = step(sched)  # a takes the last block for its 3rd token; b needs one too
    assert out.preempted == [b] and [e.seq for e in out.scheduled] == [a]
    assert b.status is SequenceStatus.WAITING and sched.waiting[0] is b and "b" not in bm
    assert b.num_computed_tokens == 0 and b.num_output_tokens == 1 and b.num_preemptions == 1
    while b.status is SequenceStatus.WAITING:
        out, _ = step(sched)
    [e] = [e for e in out.scheduled if e.seq is b]
    assert (e.start, e.end, e.is_prefill) == (0, 3, True)  # prompt and its earlier output are prefilled again
    while sched.has_unfinished():
        step(sched)
    assert a.num_output_tokens == b.num_output_tokens == 4 and sched.num_preemptions == 1


def test_swap_preemption_moves_blocks_to_cpu_and_back():
    bm = BlockManager(3, 2)
    sched = Scheduler(bm, max_num_seqs=2, preemption="swap")
    a, b = Sequence("a", [1, 2], 4), Sequence("b", [3, 4], 3)
    sched.add_request(a)
    sched.add_request(b)
    step(sched)
    b_blocks = bm.block_table("b")
    out, _ = step(sched)
    assert out.preempted == [b] and b.status is SequenceStatus.SWAPPED
    assert [gpu for gpu, _ in out.swap_out] == b_blocks
    cpu_blocks = [cpu for _, cpu in out.swap_out]
    assert b.num_computed_tokens == 2  # swapped KV is kept: no recompute
    while b.status is SequenceStatus.SWAPPED:
        out, _ = step(sched)
    assert [cpu for cpu, _ in out.swap_in] == cpu_blocks
    assert [gpu for _, gpu in out.swap_in] == bm.block_table("b")[:len(cpu_blocks)]
    [e] = [e for e in out.scheduled if e.seq is b]
    assert (e.start, e.end, e.is_prefill) == (2, 3, False)  # straight back to decoding
    while sched.has_unfinished():
        step(sched)
    assert (a.num_output_tokens, b.num_output_tokens) == (4, 3)


def test_swap_falls_back_to_recompute_without_cpu_space():
    bm = BlockManager(3, 2)
    sched = Scheduler(bm, max_num_seqs=2, preemption="swap", num_cpu_blocks=0)
    a, b = Sequence("a", [1, 2], 4), Sequence("b", [3, 4], 3)
    sched.add_request(a)
    sched.add_request(b)
    step(sched)
    out, _ = step(sched)
    assert out.preempted == [b] and not out.swap_out and b.status is SequenceStatus.WAITING


def test_chunked_prefill_respects_the_token_budget():
    sched = Scheduler(BlockManager(16, 4), max_num_seqs=2, max_num_batched_tokens=4)
    s = Sequence("a", list(range(10)), 2)
    sched.add_request(s)
    ranges = []
    while s.num_output_tokens == 0:
        out, _ = step(sched)
        ranges += [(e.start, e.end, e.samples) for e in out.scheduled]
        assert out.num_batched_tokens <= 4
    assert ranges == [(0, 4, False), (4, 8, False), (8, 10, True)]


def test_request_too_large_is_rejected_and_others_go_on():
    sched = Scheduler(BlockManager(4, 4), max_num_seqs=2)  # 16 slots
    with pytest.raises(RequestTooLargeError, match="prompt_token_ids.*17 prompt tokens.*16 slots"):
        sched.add_request(Sequence("big", [1] * 17, 1))
    with pytest.raises(ValueError, match="max_tokens"):  # fits now, but could never finish
        sched.add_request(Sequence("long", [1] * 10, 8))
    ok = Sequence("ok", [1] * 10, 7)  # 10 + 7 - 1 = 16 slots: exactly the pool
    sched.add_request(ok)
    while sched.has_unfinished():
        step(sched)
    assert ok.num_output_tokens == 7


def test_contiguous_allocator_plugs_into_the_same_scheduler():
    old = ContiguousAllocator(60, 12)
    sched = Scheduler(old, max_num_seqs=6)
    seqs = [Sequence(n, [1, 2, 3], 4) for n in "ABCDEF"]
    for s in seqs:
        sched.add_request(s)
    out, _ = step(sched)
    assert len(out.scheduled) == 5 and list(sched.waiting) == [seqs[5]]
    with pytest.raises(RequestTooLargeError, match="max_seq_len"):
        sched.add_request(Sequence("G", [1] * 13, 1))
    while sched.has_unfinished():
        step(sched)
    assert all(s.num_output_tokens == 4 for s in seqs)


def test_finish_from_the_engine_frees_blocks():
    bm = BlockManager(8, 4)
    sched = Scheduler(bm, max_num_seqs=2)
    a, b = Sequence("a", [1, 2], 10), Sequence("b", [1, 2], 10)
    sched.add_request(a)
    sched.add_request(b)
    sched.update(sched.schedule(), [5, 5])
    sched.finish(a, "stop")
    assert a.finish_reason == "stop" and "a" not in bm and sched.running == [b]
    with pytest.raises(ValueError, match="already finished"):
        sched.finish(a)
    w = Sequence("w", [1], 2)
    sched.add_request(w)
    sched.finish(w, "abort")  # a waiting request can be aborted too
    assert not sched.waiting


def test_fork_shares_blocks_and_copies_on_write():
    bm = BlockManager(8, 4)
    sched = Scheduler(bm, max_num_seqs=4)
    parent = Sequence("p", [1, 2, 3, 4, 5, 6], 3)
    sched.add_request(parent)
    sched.update(sched.schedule(), [100])
    child = Sequence("c", [1, 2, 3, 4, 5, 6], 3)
    sched.fork(parent, child, last_token_id=200)
    assert bm.block_table("c") == bm.block_table("p")
    assert child.token_ids[-1] == 200 and parent.token_ids[-1] == 100
    out = sched.schedule()
    assert len(out.cow_copies) == 1  # the shared, half-full last block is copied before writing
    src, dst = out.cow_copies[0]
    # the first to write (the parent) gets the copy; the child keeps the original block
    assert (bm.block_table("p")[-1], bm.block_table("c")[-1]) == (dst, src)
    sched.update(out, [101, 201])
    while sched.has_unfinished():
        step(sched)
    assert parent.output_token_ids[:2] == [100, 101] and child.output_token_ids[:2] == [200, 201]
    with pytest.raises(ValueError, match="parent"):
        sched.fork(parent, Sequence("d", [1], 1))


@pytest.mark.parametrize("kwargs, arg", [
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(max_num_seqs=-2), "max_num_seqs"),
    (dict(max_num_seqs=2, mode="greedy"), "mode"),
    (dict(max_num_seqs=2, preemption="drop"), "preemption"),
    (dict(max_num_seqs=2, max_num_batched_tokens=0), "max_num_batched_tokens"),
    (dict(max_num_seqs=2, num_cpu_blocks=-1), "num_cpu_blocks"),
])
def test_bad_config_names_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        Scheduler(BlockManager(4, 4), **kwargs)


def test_empty_pool_and_duplicate_requests():
    with pytest.raises(ValueError, match="num_blocks"):
        BlockManager(0, 16)
    with pytest.raises(ValueError, match="allocator"):
        Scheduler(None, max_num_seqs=1)
    sched = Scheduler(BlockManager(4, 4), max_num_seqs=1)
    sched.add_request(Sequence("a", [1], 1))
    with pytest.raises(ValueError, match="seq_id='a'"):
        sched.add_request(Sequence("a", [1], 1))


def test_the_most_recently_admitted_is_preempted_first():
    bm = BlockManager(5, 2)  # 10 slots: four 2-token prompts fill 4 blocks
    sched = Scheduler(bm, max_num_seqs=4)
    a, b, c, d = (Sequence(n, [1, 2], 3) for n in "abcd")
    for s in (a, b, c, d):
        sched.add_request(s)
    step(sched)
    out, _ = step(sched)
    # a takes the last free block; b needs one, so d (the newest) goes; c then finds none and goes itself
    assert out.preempted == [d, c] and [e.seq for e in out.scheduled] == [a, b]
    assert list(sched.waiting) == [c, d]  # back at the front, in their original order


def test_eos_and_length_stops():
    sched = Scheduler(BlockManager(8, 4), max_num_seqs=3)
    a, b = Sequence("a", [1, 2], 5, eos_token_id=0), Sequence("b", [3], 2, eos_token_id=0, ignore_eos=True)
    sched.add_request(a)
    sched.add_request(b)
    out = sched.schedule()
    assert sched.update(out, [9, 0]) == []  # b ignores its EOS
    out = sched.schedule()
    assert sched.update(out, [0, 0]) == [a, b]
    assert (a.finish_reason, b.finish_reason) == ("stop", "length")
    assert a.output_token_ids == [9, 0] and b.output_token_ids == [0, 0] and a.first_token_step == 0
