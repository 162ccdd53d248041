"""Does one BlockManager operation cost the same in a pool of 1,000 blocks and of 1,000,000?

The free queue is a linked list threaded through two arrays and every other structure is an array
or a dict keyed by block id or block hash, so allocate / append_token / free should be O(1) in the
pool size. This script times one request cycle -- allocate a 64-token prompt (4 blocks of 16),
append 16 generated tokens (one new block), free -- with prefix caching off and on, in pools where
other sequences hold a quarter of the blocks and a quarter more were freed in between, and prints
the median time per cycle and the ratio large / small (target: <= 1.5x).

    .venv/bin/python benchmarks/block_manager_ops.py            # about a minute
    .venv/bin/python benchmarks/block_manager_ops.py --quick     # fewer repeats
    .venv/bin/python benchmarks/block_manager_ops.py --before /tmp/before   # this checkout against another

``--before CHECKOUT`` times the same cycle over the other checkout's BlockManager (its ``paged_lab`` copied as
``paged_lab_before``, by ``before_checkout.py``) and this one's, in a pool of 1,000 blocks, alternating
chunk by chunk in one process and in CPU time, so other load on a shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import time
from pathlib import Path

from before_checkout import import_before  # benchmarks/, beside this script

from paged_lab.memory import BlockManager

BLOCK_SIZE = 16
PROMPT = 64
GENERATE = 16


def make_manager(num_blocks: int, caching: bool, manager_class=BlockManager) -> BlockManager:
    """Other sequences take half the pool, then every other one finishes: the free queue mixes
    never-used blocks with freed (with caching: still cached) blocks from all over the pool."""
    bm = manager_class(num_blocks, BLOCK_SIZE, enable_prefix_caching=caching)
    blocks_per_seq = -(-(PROMPT + GENERATE) // BLOCK_SIZE)
    for i in range(num_blocks // 2 // blocks_per_seq):
        bm.allocate(("bg", i), [i] * PROMPT)
    # free every other one, so the queue interleaves old and new ids across the whole pool
    for i in range(0, num_blocks // 2 // blocks_per_seq, 2):
        bm.free(("bg", i))
    bm.events.clear()
    return bm


def time_cycles(bm: BlockManager, cycles: int, start: int, clock=time.perf_counter) -> float:
    """Seconds per allocate + appends + free cycle (unique prompts: no prefix hits)."""
    t0 = clock()
    for c in range(start, start + cycles):
        prompt = [c] * (PROMPT - 1) + [-c]
        bm.allocate(c, prompt)
        for t in range(GENERATE):
            bm.append_token(c, t)
        bm.free(c)
    dt = clock() - t0
    bm.events.clear()  # keep the log from growing across repeats
    return dt / cycles


def compare(small: int, large: int, caching: bool, repeats: int, cycles: int) -> tuple[float, float]:
    """Median seconds per cycle in each pool. The two pools take turns, chunk by chunk, so a
    machine that gets busier or quieter during the run slows both alike."""
    managers = {n: make_manager(n, caching) for n in (small, large)}
    gc.collect()
    times: dict[int, list[float]] = {small: [], large: []}
    for r in range(repeats + 1):
        for n in ((small, large) if r % 2 else (large, small)):
            t = time_cycles(managers[n], cycles, 10**9 + r * cycles)
            if r:  # the first round warms up
                times[n].append(t)
    for bm in managers.values():
        if bm.num_blocks <= 10_000:
            bm.check_invariants()
    return statistics.median(times[small]), statistics.median(times[large])


def compare_checkouts(checkout: Path, caching: bool, repeats: int, cycles: int,
                      num_blocks: int = 1_000) -> tuple[float, float]:
    """Median CPU seconds per cycle of ``checkout``'s BlockManager and of this one's, taking turns."""
    import_before(checkout, needs="memory", copy_c=False)
    before_class = importlib.import_module("paged_lab_before.memory").BlockManager
    managers = {"before": make_manager(num_blocks, caching, before_class),
                "after": make_manager(num_blocks, caching)}
    gc.collect()
    times: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(repeats + 1):
        for name in (("before", "after") if r % 2 else ("after", "before")):
            t = time_cycles(managers[name], cycles, 10**9 + r * cycles, clock=time.process_time)
            if r:  # the first round warms up
                times[name].append(t)
    return statistics.median(times["before"]), statistics.median(times["after"])


def main_before_after(checkout: Path, repeats: int, cycles: int) -> None:
    ops_per_cycle = 1 + GENERATE + 1
    print(f"{checkout} (before) against this checkout (after), 1,000 blocks, CPU time, median of {repeats} x "
          f"{cycles} alternating cycles")
    for caching in (False, True):
        times = compare_checkouts(checkout, caching, repeats, cycles)
        before, after = (1e6 * t / ops_per_cycle for t in times)
        print(f"  prefix caching {'on ' if caching else 'off'}  before {before:5.2f} us/op   "
              f"after {after:5.2f} us/op   after/before {after / before:4.2f}x")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    ap.add_argument("--sizes", type=int, nargs=2, default=(1_000, 1_000_000), metavar=("SMALL", "LARGE"))
    ap.add_argument("--before", type=Path, metavar="CHECKOUT", help="compare with another checkout instead")
    args = ap.parse_args(argv)
    repeats, cycles = (6, 200) if args.quick else (30, 500)
    if args.before:
        return main_before_after(args.before, repeats, cycles)
    small, large = args.sizes
    ops_per_cycle = 1 + GENERATE + 1
    print(f"one cycle = allocate({PROMPT} tokens) + {GENERATE} x append_token + free, "
          f"block_size={BLOCK_SIZE}; median of {repeats} x {cycles} cycles")
    print(f"{'prefix caching':>15} {'blocks':>10} {'us/cycle':>10} {'us/op':>8}")
    ratios = {}
    for caching in (False, True):
        t = dict(zip((small, large), compare(small, large, caching, repeats, cycles)))
        for n in (small, large):
            print(f"{'on' if caching else 'off':>15} {n:>10,} {t[n] * 1e6:>10.1f} "
                  f"{t[n] * 1e6 / ops_per_cycle:>8.2f}")
        ratios[caching] = t[large] / t[small]
        print(f"{'':>15} ratio {large:,} / {small:,} blocks = {ratios[caching]:.2f}x (target <= 1.5x)")
    return ratios


if __name__ == "__main__":
    main()
