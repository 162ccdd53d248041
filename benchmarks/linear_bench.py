"""The engine's matmuls: oneDNN with prepacked weights (``engine.linear.Linear``) against ``F.linear``.

One decoder layer's projections of SmolLM2-135M (q/k/v stacked, o, gate/up stacked, down), 30 copies
so the weights stream from memory as they do in a real step, and the 49152 x 576 head; fp32, for the
row counts of a decode step (1-8 sequences) and of a prefill chunk (64 tokens). Prints the median time
of each and the ratio F.linear / prepacked (above 1: prepacked is faster), measured in the same run.

    .venv/bin/python benchmarks/linear_bench.py [--threads 1] [--repeats 15]
"""

from __future__ import annotations

import argparse
import platform

import torch

from paged_lab.engine.linear import Linear, can_prepack
from paged_lab.engine.llama import PREPACK_BATCH_HINT
from paged_lab.tools.kernel_bench import median_ms

HIDDEN, INTER, Q, KV, VOCAB, LAYERS = 576, 1536, 576, 192, 49152, 30
ROWS = (1, 4, 8, 64)


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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not can_prepack(torch.zeros(1)):
        print("this torch has no oneDNN (mkldnn) CPU support: nothing to compare")
        return 1
    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # noqa: E731
    layers = [dict(qkv=[rand(Q, HIDDEN), rand(KV, HIDDEN), rand(KV, HIDDEN)], o=[rand(HIDDEN, Q)],
                   gate_up=[rand(INTER, HIDDEN), rand(INTER, HIDDEN)], down=[rand(HIDDEN, INTER)])
              for _ in range(LAYERS)]
    head = [rand(VOCAB, HIDDEN)]
    groups = {"30 layers (q/k/v, o, gate/up, down)": layers, "head 49152 x 576": [dict(head=head)]}
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, "
          f"torch threads {args.threads}, fp32, batch hint {PREPACK_BATCH_HINT}, median of {args.repeats}")
    print(f"{'what':<38}{'rows':>5}{'F.linear ms':>13}{'prepacked ms':>14}{'ratio':>8}")
    with torch.inference_mode():
        for name, group in groups.items():
            plain = [{k: Linear(ws) for k, ws in layer.items()} for layer in group]
            packed = [{k: Linear(ws, prepack=True, batch_hint=PREPACK_BATCH_HINT) for k, ws in layer.items()}
                      for layer in group]
            for rows in ROWS:
                x = {HIDDEN: rand(rows, HIDDEN), INTER: rand(rows, INTER)}  # [rows, in_features]
                a, b = _median_ms(plain, x, args.repeats), _median_ms(packed, x, args.repeats)
                print(f"{name:<38}{rows:>5}{a:>13.2f}{b:>14.2f}{a / b:>7.2f}x")
    # the two paths agree (fp32, summation order only)
    x = rand(8, HIDDEN)
    diff = (Linear(head).parts(x)[0] - Linear(head, prepack=True).parts(x)[0]).abs().max().item()
    assert diff < 1e-5, diff
    print(f"max |difference| of the head's logits, F.linear vs prepacked: {diff:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
