"""Hypothesis: over random workloads and pools, no deadlock, no lost request, usage never > 100%,
under static and continuous batching with recompute and swap preemption."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paged_lab.memory import BlockManager, ContiguousAllocator
from paged_lab.sched import RequestTooLargeError, Scheduler, Sequence
from paged_lab.sim import simulate
from paged_lab.sim import workloads as W

requests = st.lists(st.tuples(st.integers(1, 24), st.integers(1, 24), st.integers(0, 8)), min_size=1,
                    max_size=12)
config = st.fixed_dictionaries({
    "max_num_seqs": st.integers(1, 6),
    "mode": st.sampled_from(["static", "continuous"]),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "max_num_batched_tokens": st.one_of(st.none(), st.integers(1, 32)),
    "num_cpu_blocks": st.one_of(st.none(), st.integers(0, 6)),
})


def drive(sched, reqs, bound, fork_every=0):
    """Run schedule/update by hand, checking what the engine relies on at every step. With
    ``fork_every``, every so often a sequence that just sampled its first token forks a child
    (parallel sampling), which shares its blocks until copy-on-write."""
    bm = sched.allocator
    seqs, rejected, done = [], set(), []
    pending = sorted(enumerate(reqs), key=lambda x: x[1][2])
    step = 0
    while pending or sched.has_unfinished():
        assert step < bound, "deadlock: no progress within the bound"
        while pending and pending[0][1][2] <= step:
            i, (p, m, a) = pending.pop(0)
            s = Sequence(i, [1000 * i + k for k in range(p)], m, arrival_step=a)
            try:
                sched.add_request(s)
                seqs.append(s)
            except RequestTooLargeError:
                rejected.add(i)
        out = sched.schedule()
        written = []
        for e in out.scheduled:
            assert e.seq.status.value == "running" and 0 <= e.start < e.end <= len(e.seq.token_ids)
            assert e.samples == (e.end == len(e.seq.token_ids))
            written += bm.slot_mapping(e.seq.seq_id, e.start, e.end)  # slots exist before the forward
        assert len(written) == len(set(written))  # no two tokens of this step write the same slot
        assert all(src != dst for src, dst in out.cow_copies)
        if sched.max_num_batched_tokens:
            assert out.num_batched_tokens <= sched.max_num_batched_tokens
        assert len({e.seq.seq_id for e in out.scheduled}) == len(out.scheduled)
        assert len(sched.running) <= sched.max_num_seqs
        done += sched.update(out, [7 + step] * len(out.sampling))
        if fork_every:
            for parent in list(sched.running):
                if (parent.num_output_tokens == 1 and parent.num_computed_tokens >= parent.num_prefill_tokens
                        and "." not in str(parent.seq_id) and (parent.seq_id + step) % fork_every == 0
                        and len(sched.running) < sched.max_num_seqs):
                    child = Sequence(f"{parent.seq_id}.1", parent.prompt_token_ids, parent.max_tokens)
                    sched.fork(parent, child, last_token_id=-parent.seq_id)
                    seqs.append(child)
        assert 0.0 <= bm.usage <= 1.0
        if hasattr(bm, "check_invariants"):
            bm.check_invariants()
        step += 1
    return seqs, rejected, done


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests, block_size=st.integers(1, 8), extra_blocks=st.integers(-3, 12), cfg=config,
       caching=st.booleans(), fork_every=st.sampled_from([0, 0, 1, 3]))
def test_paged_scheduler_never_deadlocks_or_loses_a_request(reqs, block_size, extra_blocks, cfg, caching,
                                                            fork_every):
    need = max(p + m - 1 for p, m, _ in reqs)
    num_blocks = max(1, -(-need // block_size) + extra_blocks)  # sometimes too small for the largest
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
    sched = Scheduler(bm, **cfg)
    bound = 10 + max(a for _, _, a in reqs) + 2 * sum(p + m for p, m, _ in reqs)
    seqs, rejected, done = drive(sched, reqs, bound * 2, fork_every)
    cap = num_blocks * block_size
    assert rejected == {i for i, (p, m, _) in enumerate(reqs) if p + m - 1 > cap}
    # once each
    assert sorted(map(str, (s.seq_id for s in done))) == sorted(map(str, (s.seq_id for s in seqs)))
    assert all(s.num_output_tokens == s.max_tokens and s.finish_reason == "length" for s in done)
    assert not bm.seq_ids and bm.usage == 0.0
    assert sched.swap_space.num_free_blocks == sched.num_cpu_blocks  # swap space all handed back


@settings(max_examples=30, deadline=None)
@given(reqs=requests, slack=st.integers(0, 40), max_seq_len=st.integers(8, 48), cfg=config)
def test_contiguous_scheduler_never_deadlocks(reqs, slack, max_seq_len, cfg):
    old = ContiguousAllocator(max_seq_len + slack, max_seq_len)
    sched = Scheduler(old, **cfg)
    bound = 10 + max(a for _, _, a in reqs) + 2 * sum(p + m for p, m, _ in reqs)
    seqs, rejected, done = drive(sched, reqs, bound)
    assert rejected == {i for i, (p, m, _) in enumerate(reqs) if p + m - 1 > max_seq_len}
    assert sorted(s.seq_id for s in done) == sorted(s.seq_id for s in seqs)
    assert all(s.num_output_tokens == s.max_tokens for s in done)
    assert sched.num_preemptions == 0  # a reservation always has room to grow
    assert old.reserved_slots == 0


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 10**6), block_size=st.sampled_from([1, 4, 16]),
       num_blocks=st.integers(1, 40), cfg=config)
def test_simulate_terminates_within_its_bound(n, seed, block_size, num_blocks, cfg):
    wl = W.uniform(n, prompt_len=(1, 40), output_len=(1, 40), requests_per_step=1.5, seed=seed)
    r = simulate(wl, BlockManager(num_blocks, block_size), cfg)  # raises RuntimeError past the bound
    cap = num_blocks * block_size
    assert {name for name, _ in r.rejected} == {q.name for q in wl if q.max_num_slots > cap}
    assert r.summary["num_finished"] + r.summary["num_rejected"] == n
    assert all(q["output_tokens"] == q["max_tokens"] for q in r.requests if q["status"] == "finished")
    assert max(r.timeline["kv_usage"]) <= 1.0
    assert all(res <= cap for res in r.timeline["reserved_slots"])
