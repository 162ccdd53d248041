"""simulate()'s one Scheduler makes exactly the decisions recorded before it replaced two schedulers.

Until commit dc56eb7, simulate() ran ``FastScheduler`` (the textbook Scheduler with its per-token loops
inlined) and a test compared it with the textbook Scheduler timeline by timeline. Now there is one
Scheduler; ``tests/data/sched_timelines.json`` keeps what both made on 36 small workloads (paged with and
without the event log, contiguous; static and continuous; recompute and swap; token budgets; prefix
caching), and every timeline row, request row, window span, rejection, allocator event and counter must
come out the same. ``scripts/record_sched_timelines.py`` says how the file was made (its docstring).
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scriptkit import ROOT, load_script
from test_sched_properties import config  # the same scheduler settings the property tests draw

from paged_lab.memory import BlockManager, ContiguousAllocator
from paged_lab.sim import paged, simulate
from paged_lab.sim import workloads as W

record = load_script("scripts/record_sched_timelines.py")
RECORDED = json.loads((ROOT / "tests/data/sched_timelines.json").read_text())
CASES = {case["index"]: case for case in RECORDED["cases"]}
MEMORY = {"BlockManager": BlockManager, "ContiguousAllocator": ContiguousAllocator}


def run(case: dict) -> dict:
    """``case`` through simulate() as a caller runs it: an allocator and a dict of Scheduler settings."""
    wl = [W.Request(name, tuple(prompt), max_tokens, arrival) for name, prompt, max_tokens, arrival
          in case["requests"]]
    allocator = record.make_allocator(case, MEMORY)
    return record.record(case, simulate(wl, allocator, case["scheduler"]), allocator)


@pytest.mark.parametrize("index", sorted(CASES))
def test_the_scheduler_reproduces_the_recorded_run(index):
    case = CASES[index]
    got, want = run(case), case["expected"]
    for key in want:  # one key at a time, so a failure says which part differs
        assert got[key] == want[key], f"case {index} ({case['allocator']}, {case['scheduler']}): {key}"
    assert got.keys() == want.keys()


def test_the_recording_was_made_by_both_old_schedulers_and_covers_the_hard_cases():
    assert RECORDED["recorded_with"] == ["Scheduler", "FastScheduler"]
    assert [record.draw_case(i) for i in sorted(CASES)] == [{k: c[k] for k in c if k != "expected"}
                                                            for _, c in sorted(CASES.items())]
    runs = [c["expected"] for c in CASES.values()]
    assert sum(1 for r in runs if any(r["timeline"]["preempted"])) >= 5
    assert sum(1 for r in runs if any(r["timeline"]["swapped"])) >= 1
    assert sum(1 for r in runs if r.get("stats", {}).get("prefix_cache_hits")) >= 5
    assert sum(1 for r in runs if r.get("stats", {}).get("num_evictions")) >= 5
    assert sum(1 for r in runs if r["rejected"]) >= 3
    assert sum(1 for c in CASES.values() if c["scheduler"]["max_num_batched_tokens"]) >= 5
    assert sum(1 for r in runs if r.get("events")) >= 5


def test_a_changed_decision_is_caught():
    """The comparison can fail: one request asking for one token more changes the recorded run."""
    case = next(c for c in CASES.values() if c["allocator"] == "paged_events" and c["expected"]["events"])
    changed = {**case, "requests": [list(r) for r in case["requests"]]}
    changed["requests"][0][2] += 1
    assert run(changed) != case["expected"]
    assert run(case) == case["expected"]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 10**6), block_size=st.sampled_from([1, 2, 4, 16]),
       num_blocks=st.integers(1, 40), caching=st.booleans(), cfg=config)
def test_the_event_log_changes_no_decision(n, seed, block_size, num_blocks, caching, cfg):
    # simulate()'s default pool (paged()) records no events; BlockManager does by default.
    wl = W.shared_prefix(n, prefix_len=8, suffix_len=(1, 12), output_len=(1, 30), seed=seed)
    logged, silent = BlockManager(num_blocks, block_size, caching), paged(num_blocks, block_size, caching)
    a, b = simulate(wl, logged, cfg), simulate(wl, silent, cfg)
    assert not silent.record_events and silent.events == []
    assert a.timeline == b.timeline and a.requests == b.requests and a.spans == b.spans
    assert logged.stats == silent.stats and logged.usage == silent.usage
    silent.check_invariants()

