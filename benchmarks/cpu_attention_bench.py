"""Paged attention on CPU: the C kernels (kernels.cpu.attention) against the torch path (gather + SDPA).

SmolLM2-135M's attention shapes (9 query heads, 3 KV heads, head_dim 64, block size 16), fp32, one
call per layer for 30 layers whose caches are distinct (so K/V come from memory, as in a real step):
decode batches of 1, 4 and 8 sequences at 120 tokens of context, and one 58-token prompt prefilled.
The torch path is what a user of torch would otherwise run: the blocks gathered into a padded tensor,
then ``scaled_dot_product_attention`` with a mask (the dispatch's ``backend="torch"``; C is ``"cpu"``).
Prints the median ms per 30 layers of each and torch / C (above 1: C is faster), same run, and checks
that the two agree.

    .venv/bin/python benchmarks/cpu_attention_bench.py [--threads 2] [--repeats 20]
"""

from __future__ import annotations

import argparse
import platform

import torch

from paged_lab.kernels import paged_attention_decode, paged_attention_prefill, torch_paged
from paged_lab.kernels.cpu import attention as cpu_attention
from paged_lab.tools.kernel_bench import median_ms

LAYERS, BLOCKS, BS, KVH, H, D = 30, 256, 16, 3, 9, 64


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not cpu_attention.available():
        print(f"the C kernels are not available here: {cpu_attention.why_unavailable()}")
        return 1
    g = torch.Generator().manual_seed(0)
    caches = [(torch.randn(BLOCKS, BS, KVH, D, generator=g), torch.randn(BLOCKS, BS, KVH, D, generator=g))
              for _ in range(LAYERS)]
    cases = []
    for S in (1, 4, 8):  # decode: S sequences of 120 tokens
        tables = torch.stack([torch.randperm(BLOCKS, generator=g)[:8] for _ in range(S)]).int()
        lens = torch.full((S,), 120, dtype=torch.int32)
        q = torch.randn(S, H, D, generator=g)
        plan = torch_paged.plan_gather(tables, lens, BS)  # built once per step by the engine

        def decode(backend, q=q, tables=tables, lens=lens, plan=plan):
            return [paged_attention_decode(q, k, v, tables, lens, 0.125, backend=backend, validate=False,
                                           plan=plan)
                    for k, v in caches]

        cases.append((f"decode, {S} x 120 tokens", decode))
    tables = torch.randperm(BLOCKS, generator=g)[:4][None].int()
    lens, qsl = torch.tensor([58], dtype=torch.int32), torch.tensor([0, 58], dtype=torch.int32)
    q = torch.randn(58, H, D, generator=g)
    plan = torch_paged.plan_gather(tables, lens, BS, query_start_loc=qsl)

    def prefill(backend):
        return [paged_attention_prefill(q, k, v, tables, lens, qsl, 0.125, backend=backend, validate=False,
                                        plan=plan)
                for k, v in caches]

    cases.append(("prefill, 58 tokens", prefill))
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, torch "
          f"threads {args.threads}, fp32, {LAYERS} layers, median of {args.repeats}")
    print(f"{'what':<26}{'torch ms':>10}{'C ms':>8}{'torch / C':>11}{'max |diff|':>12}")
    for name, fn in cases:
        a, want = median_ms(lambda fn=fn: fn("torch"), device="cpu", warmup=1,
                            iters=args.repeats), fn("torch")
        b, got = median_ms(lambda fn=fn: fn("cpu"), device="cpu", warmup=1, iters=args.repeats), fn("cpu")
        diff = max((x - y).abs().max().item() for x, y in zip(got, want))
        assert diff < 1e-4, (name, diff)
        print(f"{name:<26}{a:>10.2f}{b:>8.2f}{a / b:>10.2f}x{diff:>12.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
