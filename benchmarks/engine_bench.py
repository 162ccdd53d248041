"""Engine benchmark: paged_lab vs transformers static batching vs transformers generate_batch.

    .venv/bin/python benchmarks/engine_bench.py --repeats 3

Same workload, same model, same process, same torch threads; prints per-run tokens/s, medians and
the ratios. The workload and the three runners live in ``paged_lab.tools.bench`` (``python -m paged_lab
bench`` runs the same thing). Results are recorded in docs/benchmarks.md.
"""

import platform
import sys

import torch

from paged_lab.tools.cli import main

if __name__ == "__main__":
    print(f"python {platform.python_version()}, torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}")
    raise SystemExit(main(["bench", *sys.argv[1:]]))
