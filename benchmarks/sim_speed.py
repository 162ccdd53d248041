"""How long does simulate() take as the number of requests grows? (Sliders must feel live.)

Workload: the notebook-05 playground's -- prompts uniform in 16-64 tokens, outputs uniform in 8-64
tokens, all arriving at step 0 -- over a paged pool of 2,048 blocks x 16 slots (event log off, as
``paged()`` builds it), continuous batching with 256 windows. Prints the median over several runs
of wall time and of CPU time (the CPU figure is steadier on a busy machine), the cost per
generated token, and how the cost grows from one size to the next (10x more requests should be
about 10x the time: the work is linear in the tokens).

    .venv/bin/python benchmarks/sim_speed.py            # 100, 1,000 and 10,000 requests
    .venv/bin/python benchmarks/sim_speed.py --quick    # fewer repeats
    .venv/bin/python benchmarks/sim_speed.py --rate 2   # Poisson arrivals, 2 requests per step
    .venv/bin/python benchmarks/sim_speed.py --before /tmp/before   # this checkout against another

``--before CHECKOUT`` runs 1,000 requests over the other checkout's package (``before_checkout.py``) and this
one's, alternating run by run in one process, in CPU time, so other load on a shared machine hits both alike;
it also checks that both give the same summary.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import time
from pathlib import Path

from before_checkout import import_before  # benchmarks/, beside this script

from paged_lab.memory import BlockManager, ContiguousAllocator
from paged_lab.sim import paged, simulate, workloads

SIZES = (100, 1_000, 10_000)


def measure(n: int, repeats: int, make_allocator, rate: float | None = None) -> tuple[float, float, int, int]:
    wl = workloads.uniform(n, prompt_len=(16, 64), output_len=(8, 64), requests_per_step=rate, seed=0)
    walls, cpus = [], []
    for _ in range(repeats):
        alloc = make_allocator()
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(wl, alloc, {"max_num_seqs": 256})
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    assert res.summary["num_finished"] == n
    return statistics.median(walls), statistics.median(cpus), res.summary["output_tokens"], res.makespan


def compare(checkout: Path, n: int = 1_000, rounds: int = 15) -> None:
    """After/before CPU-time ratio of ``simulate()`` over ``n`` requests, paged, event log off and on."""
    import_before(checkout, "memory", copy_c=False)
    before = importlib.import_module("paged_lab_before.sim")
    before_bm = importlib.import_module("paged_lab_before.memory").BlockManager
    sides = {"no event log": ((simulate, workloads, lambda: paged(2048, 16)),
                              (before.simulate, before.workloads, lambda: before.paged(2048, 16))),
             "event log on": ((simulate, workloads, lambda: BlockManager(2048, 16)),
                              (before.simulate, before.workloads, lambda: before_bm(2048, 16)))}
    for label, (after_side, before_side) in sides.items():
        times = {"after": [], "before": []}
        for _ in range(rounds):
            summaries = []
            for name, (sim, wls, make) in (("after", after_side), ("before", before_side)):
                wl = wls.uniform(n, prompt_len=(16, 64), output_len=(8, 64), seed=0)
                alloc = make()
                gc.collect()
                c0 = time.process_time()
                summaries.append(sim(wl, alloc, {"max_num_seqs": 256}).summary)
                times[name].append(time.process_time() - c0)
            assert summaries[0] == summaries[1], "the two checkouts simulate different runs"
        a, b = (1e3 * statistics.median(times[k]) for k in ("after", "before"))
        print(f"{n:,} requests, paged ({label}): before {b:.1f} ms  after {a:.1f} ms  after/before "
              f"{a / b:.3f}x (CPU, median of {rounds} alternating runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--rate", type=float, default=None,
                    help="Poisson arrivals, requests per step (default: all at step 0)")
    ap.add_argument("--before", type=Path, default=None, help="another checkout to compare against")
    args = ap.parse_args()
    if args.before is not None:
        return compare(args.before)
    variants = {
        "paged (BlockManager, no event log)": lambda: paged(2048, 16),
        "paged (BlockManager, event log on)": lambda: BlockManager(2048, 16),
        "contiguous (max_seq_len 128)": lambda: ContiguousAllocator(2048 * 16, 128),
    }
    for label, make in variants.items():
        print(f"\n{label}")
        print(f"{'requests':>9} {'tokens':>9} {'steps':>6} {'wall ms':>9} {'cpu ms':>9} "
              f"{'us/token':>9} {'growth':>7}")
        prev = None
        for n in SIZES:
            repeats = (3 if args.quick else 7) if n < 10_000 else (1 if args.quick else 3)
            wall, cpu, tokens, steps = measure(n, repeats, make, args.rate)
            growth = f"{cpu / prev:5.1f}x" if prev else "      -"
            print(f"{n:>9,} {tokens:>9,} {steps:>6} {1e3 * wall:>9.1f} {1e3 * cpu:>9.1f} "
                  f"{1e6 * cpu / tokens:>9.2f} {growth:>7}")
            prev = cpu


if __name__ == "__main__":
    main()
