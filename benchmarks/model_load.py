"""The default model's load as a learner's first notebook meets it: cold (an empty ``PAGED_LAB_CACHE``, so
the GGUF is converted) and warm (the cached copy), each in a fresh Python process.

    OMP_NUM_THREADS=2 python benchmarks/model_load.py                       # this checkout, 3 cold + 3 warm
    OMP_NUM_THREADS=2 python benchmarks/model_load.py --before /path/to/old/checkout --runs 3

With ``--before``, the old checkout's ``paged_lab`` (loaded as ``paged_lab_before``, see
before_checkout.py) runs alternately with this one, so both see the same machine load. Each run prints
``load_model()``'s own time (after ``import paged_lab``, as in a notebook whose setup cell ran; it
imports transformers), its CPU time (user + system: the work done, which other processes on a shared
machine inflate far less than the wall time), and the whole process's time from its start; the summary
gives medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = """
import json, resource, sys, time
sys.path[:0] = [{here!r}, {root!r}]  # this checkout's paged_lab, whatever the venv installed
from before_checkout import import_before
package = import_before({checkout!r}, "engine", copy_c=False) if {checkout!r} else __import__("paged_lab")
import importlib
models = importlib.import_module(package.__name__ + ".models")
def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
cpu_before, started = cpu_seconds(), time.perf_counter()
model, tokenizer, spec = models.load_model(progress=False, device="cpu")
load_s, load_cpu_s = time.perf_counter() - started, cpu_seconds() - cpu_before
ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
token = int(model(ids).logits[0, -1].argmax())
print(json.dumps({{"load_s": load_s, "load_cpu_s": load_cpu_s, "token": token, "cpu_s": cpu_seconds()}}))
"""


def one_run(checkout: str, cache: Path) -> dict:
    """One fresh process loading the default model with ``PAGED_LAB_CACHE=cache``: its times in seconds."""
    env = {**os.environ, "PAGED_LAB_CACHE": str(cache)}
    started = time.perf_counter()
    code = CHILD.format(here=str(HERE), root=str(ROOT), checkout=checkout)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"the load failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def measure(versions: dict[str, str], runs: int) -> dict[str, dict[str, list]]:
    """``{version: {"cold": [run, ...], "warm": [...]}}``, the versions alternating run by run."""
    results = {name: {"cold": [], "warm": []} for name in versions}
    for i in range(runs):
        for name, checkout in versions.items():
            cache = Path(tempfile.mkdtemp(prefix="paged_lab_cache_"))
            try:
                for kind in ("cold", "warm"):
                    run = one_run(checkout, cache)
                    results[name][kind].append(run)
                    print(f"run {i + 1} {name:>6} {kind}: load_model {run['load_s']:5.1f} s (CPU "
                          f"{run['load_cpu_s']:4.1f} s), process {run['process_s']:5.1f} s (CPU "
                          f"{run['cpu_s']:4.1f} s)", flush=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="root of another paged-lab checkout to time alternately")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    versions = {"after": ""} if not args.before else {"before": args.before, "after": ""}
    results = measure(versions, args.runs)
    print(f"\nmedians of {args.runs} runs (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end):")
    for name, kinds in results.items():
        line = ", ".join(f"{kind}: load_model {statistics.median(r['load_s'] for r in rs):.1f} s "
                         f"(CPU {statistics.median(r['load_cpu_s'] for r in rs):.1f} s), process "
                         f"{statistics.median(r['process_s'] for r in rs):.1f} s"
                         for kind, rs in kinds.items())
        print(f"  {name:>6}: {line}")
    tokens = {r["token"] for kinds in results.values() for rs in kinds.values() for r in rs}
    print(f"  next token of 'The capital of France is' in every run: {sorted(tokens)}")


if __name__ == "__main__":
    main()
