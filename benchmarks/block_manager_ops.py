"""Does one BlockManager operation cost the same in a pool of 1,000 blocks and of 1,000,000?

The free queue is a linked list threaded through two arrays and every other structure is an array
or a dict keyed by block id or block hash, so allocate / append_token / free should be O(1) in the
pool size. This script times one request cycle -- allocate a 64-token prompt (4 blocks of 16),
append 16 generated tokens (one new block), free -- with prefix caching off and on, in pools where
other sequences hold a quarter of the blocks and a quarter more were freed in between, and prints
the median time per cycle and the ratio large / small (target: <= 1.5x).

    .venv/bin/python benchmarks/block_manager_ops.py            # about a minute
    .venv/bin/python benchmarks/block_manager_ops.py --quick     # fewer repeats
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from paged_lab.memory import BlockManager

BLOCK_SIZE = 16
PROMPT = 64
GENERATE = 16


def make_manager(num_blocks: int, caching: bool) -> BlockManager:
    """Other sequences take half the pool, then every other one finishes: the free queue mixes
    never-used blocks with freed (with caching: still cached) blocks from all over the pool."""
    bm = BlockManager(num_blocks, BLOCK_SIZE, enable_prefix_caching=caching)
    blocks_per_seq = -(-(PROMPT + GENERATE) // BLOCK_SIZE)
    for i in range(num_blocks // 2 // blocks_per_seq):
        bm.allocate(("bg", i), [i] * PROMPT)
    # free every other one, so the queue interleaves old and new ids across the whole pool
    for i in range(0, num_blocks // 2 // blocks_per_seq, 2):
        bm.free(("bg", i))
    bm.events.clear()
    return bm


def time_cycles(bm: BlockManager, cycles: int, start: int) -> float:
    """Seconds per allocate + appends + free cycle (unique prompts: no prefix hits)."""
    t0 = time.perf_counter()
    for c in range(start, start + cycles):
        prompt = [c] * (PROMPT - 1) + [-c]
        bm.allocate(c, prompt)
        for t in range(GENERATE):
            bm.append_token(c, t)
        bm.free(c)
    dt = time.perf_counter() - t0
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    ap.add_argument("--sizes", type=int, nargs=2, default=(1_000, 1_000_000), metavar=("SMALL", "LARGE"))
    args = ap.parse_args(argv)
    repeats, cycles = (6, 200) if args.quick else (30, 500)
    small, large = args.sizes
    ops_per_cycle = 1 + GENERATE + 1
    print(f"one cycle = allocate({PROMPT} tokens) + {GENERATE} x append_token + free, block_size={BLOCK_SIZE}; "
          f"median of {repeats} x {cycles} cycles")
    print(f"{'prefix caching':>15} {'blocks':>10} {'us/cycle':>10} {'us/op':>8}")
    ratios = {}
    for caching in (False, True):
        t = dict(zip((small, large), compare(small, large, caching, repeats, cycles)))
        for n in (small, large):
            print(f"{'on' if caching else 'off':>15} {n:>10,} {t[n] * 1e6:>10.1f} {t[n] * 1e6 / ops_per_cycle:>8.2f}")
        ratios[caching] = t[large] / t[small]
        print(f"{'':>15} ratio {large:,} / {small:,} blocks = {ratios[caching]:.2f}x (target <= 1.5x)")
    return ratios


if __name__ == "__main__":
    main()
