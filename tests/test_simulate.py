"""simulate(): the story presets reproduce the seed's numbers; every request finishes exactly once."""

import pytest

from paged_lab.memory import BlockManager, ContiguousAllocator
from paged_lab.sched import Scheduler
from paged_lab.sim import paged, simulate
from paged_lab.sim import workloads as W
from paged_lab.sim.simulate import TIMELINE_COLUMNS


def run_windows(mode):
    return simulate(W.windows_story(), paged(64, 4), {"max_num_seqs": W.WINDOWS, "mode": mode})


def test_windows_story_static_8_rounds_continuous_6():
    static, cont = run_windows("static"), run_windows("continuous")
    assert (static.makespan, cont.makespan) == (8, 6)
    start = {s.name: s.start for s in cont.spans}
    assert (start["D"], start["E"], start["F"]) == (2, 2, 4)  # refilled as soon as B, C, then D/E leave
    start = {s.name: s.start for s in static.spans}
    assert start["D"] == start["E"] == start["F"] == 6  # idle windows until A is done
    for r in (static, cont):
        assert {s.window for s in r.spans} == {0, 1, 2}
        assert sorted(s.name for s in r.spans if s.outcome == "finished") == list("ABCDEF")


def test_locker_story_old_manager_admits_5_ah_ye_all_6():
    wl = W.locker_story()
    assert wl.total_slots <= W.LOCKER_SLOTS
    old = simulate(wl, ContiguousAllocator(W.LOCKER_SLOTS, W.LOCKER_RESERVATION), {"max_num_seqs": 6})
    new = simulate(wl, paged(W.LOCKER_SLOTS, 1), {"max_num_seqs": 6})
    assert old.timeline["running"][0] == 5 and old.timeline["waiting"][0] == 1
    assert old.summary["peak_running"] == 5
    assert new.timeline["running"][0] == 6 and new.summary["num_preemptions"] == 0
    assert max(new.timeline["waiting"]) == 0
    assert old.summary["utilization"] < new.summary["utilization"] == 1.0  # block_size 1: no slack at all


def test_locker_story_overflow_ah_ye_makes_people_wait_never_drops():
    wl = W.locker_story_overflow()
    assert wl.total_slots > W.LOCKER_SLOTS
    for preemption in ("recompute", "swap"):
        r = simulate(wl, paged(W.LOCKER_SLOTS, 1), {"max_num_seqs": 6, "preemption": preemption})
        waited = r.summary["num_preemptions"] + max(r.timeline["waiting"]) + max(r.timeline["swapped"])
        assert waited > 0
        assert not r.rejected and r.summary["num_finished"] == 6
        assert all(q["output_tokens"] == q["max_tokens"] for q in r.requests)
        assert max(r.timeline["kv_usage"]) <= 1.0


@pytest.mark.parametrize("mode", ["static", "continuous"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("budget", [None, 8])
def test_conservation_under_heavy_preemption(mode, preemption, budget):
    wl = W.uniform(40, prompt_len=(4, 24), output_len=(1, 40), requests_per_step=2.0, seed=5)
    need = max(r.max_num_slots for r in wl)
    r = simulate(wl, paged(-(-need // 4), 4), {"max_num_seqs": 8, "mode": mode, "preemption": preemption,
                                               "max_num_batched_tokens": budget})
    if mode == "continuous":
        assert r.summary["num_preemptions"] > 10  # the pool barely holds the largest request
    names = [q["name"] for q in r.requests]
    assert sorted(names) == sorted(q.name for q in wl) and len(set(names)) == len(wl)  # once each
    want = {q.name: q.max_tokens for q in wl}
    assert all(q["output_tokens"] == want[q["name"]] and q["finish_reason"] == "length" for q in r.requests)
    assert max(r.timeline["kv_usage"]) <= 1.0
    assert all(q["finish_step"] >= q["arrival_step"] for q in r.requests)


def test_too_large_request_is_rejected_others_finish():
    wl = W.Workload("mix", (W.Request("ok", (1, 2, 3), 4), W.Request("huge", tuple(range(100)), 2),
                            W.Request("ok2", (5, 6), 3)))
    r = simulate(wl, paged(8, 4), {"max_num_seqs": 2})
    assert [name for name, _ in r.rejected] == ["huge"]
    assert "prompt_token_ids" in r.rejected[0][1] and "32 slots" in r.rejected[0][1]
    assert r.summary["num_finished"] == 2 and r.summary["num_rejected"] == 1


def test_timeline_and_summary_are_consistent():
    wl = W.uniform(30, seed=2, requests_per_step=1.0)
    r = simulate(wl, paged(128, 16), {"max_num_seqs": 4})
    t = r.timeline
    assert set(t) == set(TIMELINE_COLUMNS) and all(len(v) == r.makespan for v in t.values())
    assert t["step"] == list(range(r.makespan))
    assert sum(t["finished"]) == 30 == r.summary["num_finished"]
    assert sum(t["prefill_tokens"]) == sum(q.prompt_len for q in wl)  # no preemption, no prefix cache
    assert sum(t["decode_tokens"]) == sum(q.max_tokens - 1 for q in wl)  # the first token comes with prefill
    assert r.summary["output_tokens"] == sum(q.max_tokens for q in wl)
    lat = sorted(q["latency_steps"] for q in r.requests)
    assert r.summary["mean_latency"] == pytest.approx(sum(lat) / 30)
    assert lat[0] <= r.summary["p95_latency"] <= lat[-1]
    assert all(u <= r.num_slots for u in t["reserved_slots"])
    assert max(t["running"]) <= 4


def test_contiguous_reservation_wastes_most_paging_only_the_last_block():
    """The PagedAttention paper's regime: ShareGPT-like lengths, 2048-token reservations."""
    wl = W.long_tail(150, prompt_median=161, output_median=338, sigma=1.0, max_seq_len=2048, seed=0)
    old = simulate(wl, ContiguousAllocator(16 * 2048, 2048), {"max_num_seqs": 256})
    new = simulate(wl, paged(2048, 16), {"max_num_seqs": 256})
    assert 0.20 <= old.summary["utilization"] <= 0.40
    assert 1 - new.summary["utilization"] < 0.04
    t = new.timeline
    assert all(w <= n * 15 for w, n in zip(t["internal_frag"], t["running"]))  # < one block per sequence
    assert max(t["external_frag"]) == 0


def test_prefix_caching_skips_shared_prompt_tokens():
    wl = W.shared_prefix(20, prefix_len=64, suffix_len=(4, 8), output_len=(2, 4), seed=0)
    plain = simulate(wl, paged(256, 16), {"max_num_seqs": 4})
    bm = BlockManager(256, 16, enable_prefix_caching=True)
    cached = simulate(wl, bm, {"max_num_seqs": 4})
    assert bm.stats.prefix_cache_hits >= 19 * 64  # everyone after the first reuses the 64-token prefix
    saved = sum(plain.timeline["prefill_tokens"]) - sum(cached.timeline["prefill_tokens"])
    assert saved == bm.stats.prefix_cache_hits
    assert [q["output_tokens"] for q in cached.requests] == [q["output_tokens"] for q in plain.requests]


def test_record_slots_gives_the_lockers():
    r = simulate(W.locker_story(), ContiguousAllocator(60, 12), {"max_num_seqs": 6}, record_slots=True)
    first = r.slot_map_at(0)
    assert len(first) == 60
    assert sum(1 for o, _ in first if o is not None) == 60  # five reservations of 12 fill every locker
    assert sum(full for _, full in first) == r.timeline["used_slots"][0]
    with pytest.raises(ValueError, match="step"):
        r.slot_map_at(999)


def test_simulate_checks_its_arguments():
    wl = W.fixed(2)
    with pytest.raises(ValueError, match="allocator"):
        simulate(wl)
    with pytest.raises(ValueError, match="max_num_seqs"):
        simulate(wl, paged(8, 16), {"max_num_seqs": 0})
    used = paged(8, 16)
    used.allocate("x", [1])
    with pytest.raises(ValueError, match="fresh"):
        simulate(wl, used)
    bm = paged(8, 16)
    with pytest.raises(ValueError, match="allocator"):
        simulate(wl, paged(8, 16), Scheduler(bm, 2))
    with pytest.raises(RuntimeError, match="max_steps=3"):
        simulate(W.fixed(2, output_len=10), paged(8, 16), max_steps=3)
