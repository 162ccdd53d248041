"""simulate() of this checkout against another one, in one process, runs alternating.

A refactor must report its speed before and after. Run one after the other, two checkouts see
different machine load (this project's machines are small and shared); alternating the runs inside
one process lets the load hit both alike. The other checkout's ``paged_lab`` is copied into a
temporary folder under the name ``paged_lab_before`` (its imports renamed), so both can be loaded.
Both must have ``simulate`` in ``paged_lab.sim`` (since c3293f6).

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python benchmarks/sim_before_after.py /tmp/before            # 1,000 requests
    .venv/bin/python benchmarks/sim_before_after.py /tmp/before -n 10000 --repeats 5

Workload as ``benchmarks/sim_speed.py``: prompts 16-64 tokens, outputs 8-64, all at step 0,
``max_num_seqs=256``, a pool of 2,048 blocks x 16 slots. Prints CPU time per generated token
(median) and after/before, of the medians and of the best runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from before_checkout import import_before  # benchmarks/, beside this script


def simulation_api(package: str) -> SimpleNamespace:
    """``simulate``, ``paged``, ``workloads``, ``BlockManager`` and ``ContiguousAllocator`` of ``package``."""
    memory, sim = (importlib.import_module(f"{package}.{room}") for room in ("memory", "sim"))
    return SimpleNamespace(simulate=sim.simulate, paged=sim.paged, workloads=sim.workloads,
                           BlockManager=memory.BlockManager, ContiguousAllocator=memory.ContiguousAllocator)


def load_before(checkout: Path) -> SimpleNamespace:
    """The other checkout's ``paged_lab``, imported as ``paged_lab_before``: its simulation API."""
    import_before(checkout, needs="memory", copy_c=False)
    return simulation_api("paged_lab_before")


def cpu_seconds(api: SimpleNamespace, make_allocator, workload) -> float:
    allocator = make_allocator(api)
    gc.collect()
    t0 = time.process_time()
    api.simulate(workload, allocator, {"max_num_seqs": 256})
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="root of the 'before' checkout (e.g. a git worktree)")
    ap.add_argument("-n", "--requests", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    before, after = load_before(args.checkout), simulation_api("paged_lab")
    variants = {
        "paged, no event log": lambda m: m.paged(2048, 16),
        "paged, event log on": lambda m: m.BlockManager(2048, 16),
        "contiguous (max_seq_len 128)": lambda m: m.ContiguousAllocator(2048 * 16, 128),
    }
    print(f"{args.requests:,} requests, median of {args.repeats} alternating runs (CPU time)")
    for label, make in variants.items():
        workloads = [m.workloads.uniform(args.requests, prompt_len=(16, 64), output_len=(8, 64), seed=0)
                     for m in (before, after)]
        times_before, times_after = [], []
        for _ in range(args.repeats):
            times_before.append(cpu_seconds(before, make, workloads[0]))
            times_after.append(cpu_seconds(after, make, workloads[1]))
        tokens = sum(r.max_tokens for r in workloads[1])
        t_before, t_after = statistics.median(times_before), statistics.median(times_after)
        best = min(times_after) / min(times_before)  # other load only adds time: the best runs agree more
        print(f"  {label:30s} before {1e6 * t_before / tokens:6.2f} us/token   after "
              f"{1e6 * t_after / tokens:6.2f}   after/before {t_after / t_before:5.2f}x (best "
              f"runs {best:4.2f}x)")


if __name__ == "__main__":
    main()
