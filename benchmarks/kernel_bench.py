"""Paged decode (Triton) against SDPA on a contiguous cache, and FlashInfer when installed. Needs a CUDA GPU.

For every (context length, batch, block size) it times one decode step of a Llama-8B-shaped layer
(32 query heads, 8 KV heads, head_dim 128, bf16 by default), checks the paged output against the
contiguous baseline, and reports the median time, the achieved K+V bandwidth (bytes read / time)
as a share of the GPU's datasheet peak, and the ratio to SDPA. Writes ``decode.csv`` and
``decode.html`` (plotly) under ``--out`` (``cpu_smoke.*`` for the smoke run) and prints the table and the
targets: >= 70% of peak at 4,096-token contexts with batch >= 32, and decode time <= 1.25x SDPA.

  .venv/bin/python benchmarks/kernel_bench.py --out bench_out            # full sweep (CUDA)
  .venv/bin/python benchmarks/kernel_bench.py --quick --out bench_out    # smaller grids (explicit ones kept)
  .venv/bin/python benchmarks/kernel_bench.py --cpu-smoke --out /tmp/kb  # no GPU: checks the script only

Without CUDA the script exits with a message (status 2): it never prints CPU numbers as if they were
GPU figures. ``--cpu-smoke`` runs one tiny configuration under Triton's interpreter to exercise
the code path; its times measure the interpreter, not a kernel, and are labelled so.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import paged_lab.kernels  # noqa: F401  (sets TRITON_INTERPRET on CPU-only machines before triton loads)

COLUMNS = ("device", "dtype", "batch", "context_len", "block_size", "num_heads", "num_kv_heads", "head_dim",
           "backend", "paged_ms", "sdpa_ms", "flashinfer_ms", "gbs", "peak_gbs", "pct_peak", "vs_sdpa",
           "max_abs_err", "kv_bytes")  # fmt: skip
TOL = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}


FULL = dict(context_lens=[512, 1024, 2048, 4096], batches=[1, 8, 32, 64], block_sizes=[16, 32, 128])
QUICK = dict(context_lens=[1024, 4096], batches=[1, 32], block_sizes=[16])


def _ints(text: str) -> list[int]:
    """A comma-separated list of positive ints ("16,32")."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    """The command line, checked: block sizes the Triton kernels take, iterations >= 1; ``--quick``
    only fills in the grids that were not given explicitly."""
    from paged_lab.kernels.triton_paged import TRITON_BLOCK_SIZES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench_out"),
                    help="directory for decode.csv and decode.html")
    ap.add_argument("--context-lens", type=_ints, default=None, help=f"default {FULL['context_lens']}")
    ap.add_argument("--batches", type=_ints, default=None, help=f"default {FULL['batches']}")
    ap.add_argument("--block-sizes", type=_ints, default=None,
                    help=f"default {FULL['block_sizes']}; each one of {TRITON_BLOCK_SIZES}")  # fmt: skip
    ap.add_argument("--dtype", choices=sorted(TOL), default="bfloat16")
    ap.add_argument("--heads", type=_positive_int, default=32, help="query heads")
    ap.add_argument("--kv-heads", type=_positive_int, default=8)
    ap.add_argument("--head-dim", type=int, choices=[64, 128], default=128)
    ap.add_argument("--iters", type=_positive_int, default=50)
    ap.add_argument("--peak-gbs", type=float, default=None,
                    help="datasheet bandwidth if the GPU is not listed")
    ap.add_argument("--quick", action="store_true", help=f"smaller grids for those not given: {QUICK}")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="no GPU: one tiny interpreter run to check the script")
    args = ap.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, list(value))
    bad = sorted(set(args.block_sizes) - set(TRITON_BLOCK_SIZES))
    if bad:
        ap.error(f"--block-sizes {bad} not supported by the Triton kernels; choose from {TRITON_BLOCK_SIZES}")
    if args.heads % args.kv_heads:
        ap.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    if args.peak_gbs is not None and not args.peak_gbs > 0:
        ap.error(f"--peak-gbs must be > 0, got {args.peak_gbs}")
    return args


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(rows) -> None:
    print(f"{'ctx':>6} {'batch':>5} {'block':>5} {'paged ms':>9} {'sdpa ms':>9} {'flashinf':>9} "
          f"{'GB/s':>8} {'% peak':>7} {'paged/sdpa':>10} {'max err':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['context_len']:>6} {r['batch']:>5} {r['block_size']:>5} {r['paged_ms']:>9.4f} "
              f"{r['sdpa_ms']:>9.4f} {_fmt(r['flashinfer_ms'], '9.4f'):>9} {r['gbs']:>8.1f} "
              f"{_fmt(r['pct_peak'], '7.1f'):>7} {r['vs_sdpa']:>10.2f} {r['max_abs_err']:>9.2e}")  # fmt: skip


def print_targets(rows) -> None:
    big = [r for r in rows if r["context_len"] == 4096 and r["batch"] >= 32]
    if not big:
        print("\nTargets: no configuration with context 4096 and batch >= 32 was measured.")
        return
    best = max(big, key=lambda r: r["gbs"])
    pct = best["pct_peak"]
    verdict = "n/a (GPU not in PEAK_GBS; pass --peak-gbs)" if pct is None else ("met" if pct >= 70
                                                                                else "NOT met")
    print(f"\nTarget 1, >= 70% of peak at ctx 4096, batch >= 32: best {_fmt(pct, '.1f')}% "
          f"(batch {best['batch']}, block {best['block_size']}) -> {verdict}")
    worst = max(rows, key=lambda r: r["vs_sdpa"])
    print(f"Target 2, paged <= 1.25x SDPA: worst ratio {worst['vs_sdpa']:.2f} (ctx {worst['context_len']}, "
          f"batch {worst['batch']}, block {worst['block_size']}) -> "
          f"{'met' if worst['vs_sdpa'] <= 1.25 else 'NOT met'}")


def write_outputs(rows, out: Path, stem: str = "decode", metric: str = "pct_peak"
                  ) -> tuple[Path, Path | None]:
    """The CSV always; the plotly page where plotly is installed (a bare GPU machine may lack it)."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path, html_path = out / f"{stem}.csv", out / f"{stem}.html"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if metric == "pct_peak" and any(r["pct_peak"] is None for r in rows):
        metric = "gbs"
    try:
        from paged_lab.viz.kernels import fig_kernel_bench
    except ImportError as e:
        print(f"no {html_path.name}: {e} (the CSV holds every figure)")
        return csv_path, None
    fig_kernel_bench(rows, metric=metric).write_html(html_path, include_plotlyjs="cdn")
    return csv_path, html_path


def main(argv=None) -> int:
    args = parse_args(argv)

    import torch

    from paged_lab.tools import kernel_bench as bench

    dtype = getattr(torch, args.dtype)
    if args.cpu_smoke:
        print("CPU smoke test: Triton interpreter, tiny shapes. These times measure the interpreter, "
              "not a GPU kernel; they are not benchmark results.")  # fmt: skip
        rows = [bench.bench_decode(2, 40, 16, num_heads=4, num_kv_heads=2, head_dim=64, dtype=torch.float32,
                                   device="cpu", backend="triton", iters=2)]  # fmt: skip
    elif not torch.cuda.is_available():
        print("kernel_bench.py needs a CUDA GPU: none is visible here, so nothing was measured. "
              "(Use --cpu-smoke to check the script itself under Triton's interpreter.)",
              file=sys.stderr)  # fmt: skip
        return 2
    else:
        if args.peak_gbs:
            bench.PEAK_GBS[bench.gpu_model(torch.cuda.get_device_name())] = args.peak_gbs
        print(f"GPU: {torch.cuda.get_device_name()} (datasheet peak {bench.peak_gbs('cuda')} GB/s); "
              f"{args.heads} q heads, {args.kv_heads} KV heads, head_dim {args.head_dim}, {args.dtype}")
        rows = bench.sweep(args.context_lens, args.batches, args.block_sizes, num_heads=args.heads,
                           num_kv_heads=args.kv_heads, head_dim=args.head_dim, dtype=dtype, device="cuda",
                           iters=args.iters)  # fmt: skip
    print_table(rows)
    bad = [r for r in rows if r["max_abs_err"] > TOL[r["dtype"]]]
    if bad:
        print(f"\nWARNING: {len(bad)} configuration(s) differ from SDPA by more than {TOL[bad[0]['dtype']]}")
    if not args.cpu_smoke:
        print_targets(rows)
    csv_path, html_path = write_outputs(rows, args.out, stem="cpu_smoke" if args.cpu_smoke else "decode")
    print(f"\nwrote {csv_path}" + (f" and {html_path}" if html_path else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
