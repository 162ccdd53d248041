"""Record what simulate() does on a fixed set of small workloads, so a later Scheduler can be held to it.

``tests/test_sched_recorded.py`` runs the same cases through today's Scheduler and asserts that every
timeline row, request row, window span, allocator event and counter is exactly what was recorded here.
The recording in ``tests/data/sched_timelines.json`` was made with commit dc56eb7, the last one that had
two schedulers (the textbook ``Scheduler`` and ``FastScheduler``, which ``tests/test_fastpath.py`` held
equal timeline by timeline); both were run on every case and agreed:

    git worktree add --detach /tmp/before dc56eb7
    PYTHONPATH=/tmp/before .venv/bin/python scripts/record_sched_timelines.py tests/data/sched_timelines.json

Each case is drawn from ``random.Random(case index)``: a shared-prefix or uniform workload (its requests are
stored, so the workload generators may change), an allocator (paged with the event log, paged without it,
or contiguous), block size, pool size, prefix caching and the Scheduler's settings (as the property tests
draw them: windows, static or continuous, recompute or swap, a token budget, CPU blocks). The script runs
against either package layout (simulate in ``paged_lab.sim``, or in ``paged_lab.sched`` before c3293f6).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
from pathlib import Path

NUM_CASES = 36
ALLOCATORS = ("paged_events", "paged", "contiguous")


def draw_case(index: int) -> dict:
    """Case ``index``'s settings and requests: ``{"allocator", "pool", "scheduler", "requests"}``."""
    rng = random.Random(index)
    allocator = ALLOCATORS[index % len(ALLOCATORS)]
    n = rng.randint(1, 12)
    if allocator == "contiguous":
        max_seq_len = rng.randint(2, 40)
        pool = {"num_slots": rng.randint(1, 4) * max_seq_len, "max_seq_len": max_seq_len}
        half = max_seq_len // 2  # most requests fit a reservation; a few do not
        requests = [(f"r{i}", [rng.randint(1, 10**6) for _ in range(rng.randint(1, half + 2))],
                     rng.randint(1, half + 1), i // 2 + rng.randint(0, 2)) for i in range(n)]
    else:
        prefix = [rng.randint(1, 10**6) for _ in range(8)]  # every request starts with it
        requests = [(f"r{i}", prefix + [rng.randint(1, 10**6) for _ in range(rng.randint(1, 12))],
                     rng.randint(1, 16), rng.randint(0, 6)) for i in range(n)]
        block_size = rng.choice([1, 2, 4, 16])
        longest = max(len(prompt) + max_tokens - 1 for _, prompt, max_tokens, _ in requests)
        num_blocks = max(1, math.ceil(longest / block_size) + rng.randint(-1, 6))  # tight: some are preempted
        pool = {"num_blocks": num_blocks, "block_size": block_size,
                "enable_prefix_caching": rng.random() < 0.5}
    scheduler = {"max_num_seqs": rng.randint(1, 6), "mode": rng.choice(["static", "continuous"]),
                 "preemption": rng.choice(["recompute", "swap"]),
                 "max_num_batched_tokens": rng.choice([None, None, rng.randint(1, 32)]),
                 "num_cpu_blocks": rng.choice([None, rng.randint(0, 6)])}
    return {"index": index, "allocator": allocator, "pool": pool, "scheduler": scheduler,
            "requests": [list(r) for r in requests]}


def make_allocator(case: dict, memory):
    """The case's fresh allocator; ``memory`` holds the package's BlockManager and ContiguousAllocator."""
    if case["allocator"] == "contiguous":
        return memory["ContiguousAllocator"](**case["pool"])
    return memory["BlockManager"](**case["pool"], record_events=case["allocator"] == "paged_events")


def record(case: dict, result, allocator) -> dict:
    """What a run did, as plain JSON values (tuples become lists)."""
    out = {"timeline": result.timeline, "requests": result.requests,
           "spans": [dataclasses.astuple(s) for s in result.spans], "rejected": result.rejected}
    if case["allocator"] != "contiguous":
        out["stats"] = dataclasses.asdict(allocator.stats)
        out["usage"] = allocator.usage
        if allocator.record_events:
            out["events"] = [dataclasses.astuple(e) for e in allocator.events]
    return json.loads(json.dumps(out))


def run_case(case: dict, simulate, memory, workloads, scheduler_class) -> dict:
    """Run ``case`` through ``simulate(workload, scheduler=scheduler_class(allocator, **settings))``."""
    wl = [workloads.Request(name, tuple(prompt), max_tokens, arrival) for name, prompt, max_tokens, arrival
          in case["requests"]]
    allocator = make_allocator(case, memory)
    result = simulate(wl, scheduler=scheduler_class(allocator, **case["scheduler"]))
    return record(case, result, allocator)


def _package():
    """(simulate, the allocator classes, workloads, the Scheduler classes to run) of the paged_lab on the
    path, in either layout."""
    from paged_lab.memory import BlockManager
    try:
        from paged_lab.memory import ContiguousAllocator
        from paged_lab.sim import simulate, workloads
    except ImportError:  # before c3293f6: simulate and the contiguous allocator lived in paged_lab.sched
        from paged_lab.sched import ContiguousAllocator, simulate, workloads
    memory = {"BlockManager": BlockManager, "ContiguousAllocator": ContiguousAllocator}
    from paged_lab.sched import Scheduler
    classes = [Scheduler]
    try:
        from paged_lab.sched.fastpath import FastScheduler  # dc56eb7 had a second scheduler
        classes.append(FastScheduler)
    except ImportError:
        pass
    return simulate, memory, workloads, classes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="where to write the recording (JSON)")
    args = ap.parse_args()
    simulate, memory, workloads, classes = _package()
    cases = []
    for index in range(NUM_CASES):
        case = draw_case(index)
        runs = [run_case(case, simulate, memory, workloads, cls) for cls in classes]
        if any(r != runs[0] for r in runs[1:]):
            raise SystemExit(f"case {index}: {[c.__name__ for c in classes]} disagree")
        cases.append({**case, "expected": runs[0]})
    args.out.write_text(json.dumps({"recorded_with": [c.__name__ for c in classes], "cases": cases},
                                   separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases -> {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
