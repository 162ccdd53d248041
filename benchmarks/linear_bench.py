"""The engine's matmuls: ``F.linear``, oneDNN with prepacked weights, and the C panel matmul
(``kernels.cpu.gemm``, what ``kernels.cpu.linear.PackedLinear`` runs for up to ``MAX_ROWS`` rows where
it can).

One decoder layer's projections of SmolLM2-135M (q/k/v stacked, o, gate/up stacked, down), 30 copies
so the weights stream from memory as they do in a real step, and the 49152 x 576 head; fp32 (or
``--dtype bfloat16``), for the row counts of decode steps (1-32 sequences) and of a prefill chunk (64
tokens). Prints the median time of each and the ratios F.linear / oneDNN and oneDNN / C (above 1: the
latter is faster), measured in the same run.

    .venv/bin/python benchmarks/linear_bench.py [--threads 1] [--repeats 15] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import platform

import torch

from paged_lab.engine.llama import Linear
from paged_lab.kernels.cpu import gemm
from paged_lab.kernels.cpu.linear import BATCH_HINT, PackedLinear, can_prepack
from paged_lab.tools.kernel_bench import median_ms

HIDDEN, INTER, Q, KV, VOCAB, LAYERS = 576, 1536, 576, 192, 49152, 30
ROWS = (1, 4, 8, 16, 32, 64, 256)


def _median_ms(lins, x: dict, repeats: int) -> float:
    """Median time of one pass of x through every Linear of ``lins`` (a list of {name: Linear})."""

    def run():
        for layer in lins:
            for lin in layer.values():
                lin.parts(x[lin.weights[0].shape[1]])  # the input of matching width

    return median_ms(run, device="cpu", warmup=3, iters=repeats)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if not can_prepack(torch.zeros(1, dtype=dtype)):
        print(f"this torch has no oneDNN (mkldnn) {args.dtype} CPU support: nothing to compare")
        return 1
    why_no_c = gemm.why_unusable(torch.zeros(16, 1, dtype=dtype))
    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: (torch.randn(*shape, generator=g) * 0.02).to(dtype)  # noqa: E731
    layers = [dict(qkv=[rand(Q, HIDDEN), rand(KV, HIDDEN), rand(KV, HIDDEN)], o=[rand(HIDDEN, Q)],
                   gate_up=[rand(INTER, HIDDEN), rand(INTER, HIDDEN)], down=[rand(HIDDEN, INTER)])
              for _ in range(LAYERS)]
    head = [rand(VOCAB, HIDDEN)]
    groups = {"30 layers (q/k/v, o, gate/up, down)": layers, "head 49152 x 576": [dict(head=head)]}
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, torch "
          f"threads {args.threads}, {args.dtype}, batch hint {BATCH_HINT}, median of {args.repeats}"
          + (f"; no C matmul: {why_no_c}" if why_no_c else ""))
    print(f"{'what':<38}{'rows':>5}{'F.linear ms':>13}{'oneDNN ms':>11}"
          f"{'C ms':>8}{'F/oneDNN':>10}{'oneDNN/C':>10}")
    with torch.inference_mode():
        for name, group in groups.items():
            plain = [{k: Linear(ws, [None] * len(ws)) for k, ws in layer.items()} for layer in group]
            onednn = [{k: _onednn_only(ws) for k, ws in layer.items()} for layer in group]
            panels = None if why_no_c else [{k: PackedLinear(ws) for k, ws in layer.items()}
                                            for layer in group]
            for rows in ROWS:
                x = {HIDDEN: rand(rows, HIDDEN), INTER: rand(rows, INTER)}  # [rows, in_features]
                a, b = _median_ms(plain, x, args.repeats), _median_ms(onednn, x, args.repeats)
                c = _median_ms(panels, x, args.repeats) if panels else float("nan")
                print(f"{name:<38}{rows:>5}{a:>13.2f}{b:>11.2f}{c:>8.2f}{a / b:>9.2f}x{b / c:>9.2f}x")
    # the paths agree (fp32: summation order only)
    x = rand(8, HIDDEN)
    want = Linear(head, [None]).parts(x)[0].float()
    for label, lin in (("oneDNN", _onednn_only(head)), ("C",
                                                        None if why_no_c else PackedLinear(head))):
        if lin is not None:
            diff = (lin.parts(x)[0].float() - want).abs().max().item()
            assert diff < (1e-5 if dtype == torch.float32 else 0.1), diff
            print(f"max |difference| of the head's logits, F.linear vs {label}: {diff:.1e}")
    return 0


def _onednn_only(ws) -> PackedLinear:
    """A PackedLinear that multiplies with its oneDNN copy at every row count (the C matmul's panels
    dropped)."""
    lin = PackedLinear(ws)
    lin.panels = None
    lin.packed = torch.ops.mkldnn._reorder_linear_weight(ws[0] if len(ws) == 1 else torch.cat(ws), BATCH_HINT)
    return lin


if __name__ == "__main__":
    raise SystemExit(main())
