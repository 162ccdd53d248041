"""Time to first token of a returning conversation, with and without a second KV tier in CPU memory
(``LLM(kv_offloading_size=GiB)``, ``paged_lab/memory/offload/``), on SmolLM2-135M-Instruct (fp32, block 16).

One trial, on a fresh engine with a small GPU pool (``--blocks``, default 48 blocks = 768 tokens):
1. a conversation: a ``--history``-token prompt (default 512 random token ids), 4 tokens out;
2. three one-off prompts of 400 tokens, one call each: they push the conversation's blocks out of the pool
   (the GPU prefix cache loses them);
3. the conversation returns: its history + 16 new tokens, 4 tokens out. Its TTFT (``metrics.ttft``) is
   timed; with the tier its history is loaded from CPU memory instead of recomputed.
Prints the median over ``--trials`` of each configuration, their ratio, the tier's hits, and whether the
returning request's tokens are the same with the tier on and off (greedy).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/offload_ttft.py            # 5 trials each
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/offload_ttft.py --trials 3 --history 1024 --blocks 96
"""

from __future__ import annotations

import argparse
import os
import random
import statistics


def trial(llm, history: list[int], seed: int):
    from paged_lab.engine import SamplingParams

    sp = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    rng = random.Random(seed)
    llm.generate([{"prompt_token_ids": history}], sp, use_tqdm=False)
    for _ in range(3):
        one_off = [rng.randrange(100, 40000) for _ in range(400)]
        llm.generate([{"prompt_token_ids": one_off}], sp, use_tqdm=False)
    turn = [rng.randrange(100, 40000) for _ in range(16)]
    out = llm.generate([{"prompt_token_ids": history + turn}], sp, use_tqdm=False)[0]
    return out.metrics.ttft, out.outputs[0].token_ids, out.num_cached_tokens


def run(tier_gib, args, model):
    from paged_lab.engine import LLM

    ttfts, toks, stats = [], None, None
    for t in range(args.trials):
        llm = LLM(model[0], tokenizer=model[1], block_size=16, num_kv_blocks=args.blocks,
                  kv_offloading_size=tier_gib)
        history = [random.Random(t).randrange(100, 40000) for _ in range(args.history)]
        ttft, toks, cached = trial(llm, history, seed=t)
        ttfts.append(ttft)
        print(f"  {'tier' if tier_gib else 'no tier'} trial {t}: TTFT {1e3 * ttft:.0f} ms, "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        stats = {k: v for k, v in llm.stats().items() if "external" in k and ":" not in k}
        stats["returning_num_cached_tokens"] = cached
    return statistics.median(ttfts), ttfts, toks, stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--history", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=48)
    ap.add_argument("--tier-gib", type=float, default=1.0)
    args = ap.parse_args()
    from paged_lab.models import load_model

    model = load_model()
    print(f"load average {os.getloadavg()[0]:.1f} (the machine is shared), OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS')}, {args.trials} trials, history {args.history} tokens")
    off = run(None, args, model)
    on = run(args.tier_gib, args, model)
    for name, (med, all_, _, st) in (("no tier", off), (f"tier {args.tier_gib} GiB", on)):
        print(f"{name:>14}: TTFT median {1e3 * med:7.1f} ms  (trials: "
              f"{', '.join(f'{1e3 * x:.0f}' for x in all_)})  {st}")
    print(f"ratio no tier / tier: {off[0] / on[0]:.2f}x; same tokens: {off[2] == on[2]}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
