"""Engine step times of this checkout against another one, in one process, runs alternating.

Like ``benchmarks/sim_before_after.py`` (which times the scheduler alone), the other checkout's whole
``paged_lab`` (C kernel source included) is copied into a temporary folder as ``paged_lab_before``, so
both engines run over the same loaded transformers model, and their runs alternate so that the load of
this shared machine hits both alike. Each engine runs the engine benchmark's workload
(``paged_lab.tools.bench.bench_workload``: 32 requests, greedy, EOS ignored) in two settings, eager, with
chunked prefill at 4,096 tokens a step and prefix caching on (LLM's defaults; ``--prefix-caching off``):

- ``max_num_seqs=32``: every request admitted in the first step (one big prefill), then decode steps of
  32 sequences down to the long requests' tail of 4;
- ``max_num_seqs=8``: a finished request's window goes to a waiting one, so most steps are *mixed*:
  one new prompt beside the running decodes.

Prints, per setting and step kind (``prefill``, ``mixed``, ``decode N``), the median ms per step of each
engine (pooled over the runs) and after/before, the whole runs' medians, and checks that both made the
same tokens. ``--profile`` also prints cProfile's top functions of one run of each engine (Python time
per step: where per-layer work hides).

    git worktree add --detach /tmp/f0264ca f0264ca
    .venv/bin/python benchmarks/step_before_after.py /tmp/f0264ca [--threads 2] [--repeats 5] [--profile] \
        [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import os
import pstats
import statistics
import time
from pathlib import Path

import torch
from before_checkout import import_before  # benchmarks/, beside this script

import paged_lab
import paged_lab.engine
from paged_lab.models import load_model
from paged_lab.tools.bench import bench_workload


def load_before(checkout: Path):
    """The other checkout's ``paged_lab`` package, imported as ``paged_lab_before`` (C sources included)."""
    pkg = import_before(checkout, needs="engine")
    importlib.import_module("paged_lab_before.engine")
    return pkg


def step_kind(step: dict) -> str:
    if step["num_prefill"]:
        return "mixed" if step["num_decode"] else "prefill"
    return f"decode {step['num_decode']}"


def cpu_clocked(llm) -> list[float]:
    """Time every ``llm.step()`` in this thread's CPU seconds too (``--clock cpu``): with one torch thread
    all the work runs in this thread, and CPU time hardly moves when other jobs load the machine, where
    wall time does. Returns the list the step times go to, one per timeline row."""
    times: list[float] = []
    step = llm.step

    def timed_step():
        t = time.thread_time()
        try:
            return step()
        finally:
            times.append(time.thread_time() - t)

    llm.step = timed_step
    return times


def run_once(pkg, llm, workload, cpu_times=None) -> tuple[float, dict[str, list[float]], list[list[int]]]:
    """One whole run of the workload: seconds, step seconds by kind (wall, or CPU when ``cpu_times``
    is the list ``cpu_clocked`` fills), each request's tokens."""
    params = [pkg.engine.SamplingParams(temperature=0, max_tokens=r.max_tokens, ignore_eos=True)
              for r in workload]
    llm.reset_prefix_cache()  # every run starts cold (hits between its own prompts still count)
    first = len(llm.timeline)
    if cpu_times is not None:
        cpu_times.clear()
    clock = time.perf_counter if cpu_times is None else time.thread_time
    t = clock()
    outs = llm.generate([{"prompt_token_ids": r.prompt_token_ids} for r in workload], params, use_tqdm=False)
    seconds = clock() - t
    kinds: dict[str, list[float]] = {}
    for i, step in enumerate(llm.timeline[first:]):
        kinds.setdefault(step_kind(step), []).append(step["seconds"] if cpu_times is None else cpu_times[i])
    return seconds, kinds, [list(o.outputs[0].token_ids) for o in outs]


def profile_once(name: str, pkg, llm, workload, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    _, kinds, _ = run_once(pkg, llm, workload)
    prof.disable()
    steps = sum(map(len, kinds.values()))
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(f"--- cProfile, {name}, one run ({steps} steps), top {top} by own time")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


def _sort_key(kind: str):
    return (kind != "prefill", kind != "mixed", -int(kind.split()[1]) if kind.startswith("decode") else 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="root of the 'before' checkout (e.g. a git worktree)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--dtype", default="float32", help="the model's dtype: float32 or bfloat16")
    ap.add_argument("--settings", default="32,8", help="max_num_seqs values to run (comma-separated)")
    ap.add_argument("--profile", action="store_true", help="also cProfile one run of each engine")
    ap.add_argument("--prefix-caching", choices=["on", "off"], default="on", help="on: LLM's default")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this thread's CPU time per step (needs --threads 1), robust to other load")
    args = ap.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        raise SystemExit("--clock cpu needs --threads 1 (other threads' work would not be counted)")
    torch.set_num_threads(args.threads)
    before = load_before(args.checkout)
    model, tok, _ = load_model("smollm2-135m", dtype=args.dtype, device="cpu", progress=False)
    workload = bench_workload(tok, 32, 4)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.dtype}, block_size {args.block_size}, "
          f"prefix caching {args.prefix_caching}, "
          f"{args.repeats} alternating runs per engine, {args.clock} clock; load average "
          f"{os.getloadavg()[0]:.2f} at the start")
    for max_num_seqs in (int(s) for s in args.settings.split(",")):
        engines, clocks = {}, {}
        for name, pkg in (("before", before), ("after", paged_lab)):
            llm = pkg.engine.LLM(model, tokenizer=tok, dtype=args.dtype, block_size=args.block_size,
                                 max_num_seqs=max_num_seqs,
                                 max_num_batched_tokens=4096,
                                 enable_prefix_caching=args.prefix_caching == "on",
                                 enforce_eager=True, cpu_prepack=True)  # the engine at its fastest
            engines[name] = (pkg, llm)
            clocks[name] = cpu_clocked(llm) if args.clock == "cpu" else None
            run_once(pkg, llm, workload, clocks[name])  # warm-up
        totals = {n: [] for n in engines}
        steps: dict[str, dict[str, list[float]]] = {n: {} for n in engines}
        tokens = {}
        loads = []
        for _ in range(args.repeats):
            for name, (pkg, llm) in engines.items():
                loads.append(os.getloadavg()[0])
                seconds, kinds, tokens[name] = run_once(pkg, llm, workload, clocks[name])
                totals[name].append(seconds)
                for kind, secs in kinds.items():
                    steps[name].setdefault(kind, []).extend(secs)
        same = tokens["before"] == tokens["after"]
        print(f"\nmax_num_seqs={max_num_seqs}: whole run median before "
              f"{statistics.median(totals['before']):.2f} s, after {statistics.median(totals['after']):.2f} "
              "s (after/before "
              f"{statistics.median(totals['after']) / statistics.median(totals['before']):.2f}x); same "
              f"tokens: {same}; load {min(loads):.2f}-{max(loads):.2f}")
        print(f"  {'step kind':<12}{'steps/run':>10}{'before ms':>11}{'after ms':>10}{'after/before':>14}")
        for kind in sorted(steps["after"], key=_sort_key):
            b, a = steps["before"].get(kind), steps["after"][kind]
            if not b:
                continue
            mb, ma = statistics.median(b) * 1e3, statistics.median(a) * 1e3
            print(f"  {kind:<12}{len(a) // args.repeats:>10}{mb:>11.1f}{ma:>10.1f}{ma / mb:>13.2f}x")
        if args.profile:
            for name, (pkg, llm) in engines.items():
                profile_once(f"{name}, max_num_seqs={max_num_seqs}", pkg, llm, workload, 30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
