"""N-gram speculative decoding on SmolLM2 on this CPU: acceptance by prompt kind, steps saved, wall-clock.

    .venv/bin/python benchmarks/spec_decode.py                       # k = 3, 3 repeats, 48 tokens
    .venv/bin/python benchmarks/spec_decode.py --k 2 4 --repeats 5 --max-tokens 96

Each prompt kind (text that repeats itself, code, free prose) runs one request at a time (the latency case
speculation is for), greedy, with speculation off and with ``num_speculative_tokens = k``
(``prompt_lookup_max`` 3, ``prompt_lookup_min`` 1). Per kind and k: the acceptance rate (accepted / drafted
tokens, vLLM's ``spec_decode_num_accepted_tokens / spec_decode_num_draft_tokens``), the engine steps against
speculation off, and the wall-clock ratio (median of the repeats). The greedy tokens must be the same: the
script stops if they are not. It also reports, from the engine's timeline, the median time of a one-token
decode step and of a step that verifies 1 + k tokens: a CPU decode step of one row is memory-bound (the
weights are read once whatever the rows), so verifying k drafts costs little more than one step.
Results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from paged_lab.engine import LLM, SamplingParams

PROMPTS = {  # raw text to continue (no chat template): the model repeats, writes code, or tells a story
    "repetitive": [
        "apple, banana, cherry, apple, banana, cherry, apple, banana, cherry, apple,",
        "Monday Tuesday Wednesday Monday Tuesday Wednesday Monday Tuesday",
    ],
    "code": [
        "def get_name(self):\n    return self.name\n\ndef get_age(self):\n    return self.age\n\n"
        "def get_email(self):\n",
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
        "class Size:\n    def __init__(self, w, h):\n",
    ],
    "prose": [
        "Once upon a time, in a small village by the sea, there lived",
        "The history of the printing press begins in",
    ],
}


def run(llm: LLM, prompts: list[str], max_tokens: int) -> tuple[list[list[int]], float]:
    """Each prompt alone (one request at a time): (the tokens, the wall seconds of all of them)."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    t0, tokens = time.perf_counter(), []
    for p in prompts:
        tokens.append(llm.generate([p], params, use_tqdm=False)[0].outputs[0].token_ids)
    return tokens, time.perf_counter() - t0


def step_seconds(llm: LLM, num_tokens: int) -> list[float]:
    """Seconds of the timeline's steps that computed exactly ``num_tokens`` tokens of one decode."""
    return [
        r["seconds"]
        for r in llm.timeline
        if r["num_decode"] == 1 and not r["num_prefill"] and r["num_batched_tokens"] == num_tokens
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--k", type=int, nargs="+", default=[3], help="num_speculative_tokens to try")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cpu-prepack", action="store_true", help="the packed-weight CPU path")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} at the start")
    kw = {"enable_prefix_caching": False, "cpu_prepack": args.cpu_prepack}
    engines = {0: LLM(args.model, **kw)}
    for k in args.k:
        spec = {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        }
        engines[k] = LLM(args.model, speculative_config=spec, **kw)
    print(
        f"{'kind':<11}{'k':>3}{'accepted':>10}{'steps':>7}{'steps off':>10}{'wall s':>8}{'wall off':>9}"
        f"{'speedup':>9}"
    )
    for kind, prompts in PROMPTS.items():
        walls = {k: [] for k in engines}
        steps, rates = {}, {}
        for _ in range(args.repeats):
            for k, llm in engines.items():
                before = llm.stats()
                tokens, wall = run(llm, prompts, args.max_tokens)
                after = llm.stats()
                walls[k].append(wall)
                steps[k] = after["num_steps"] - before["num_steps"]
                drafted = after["spec_decode_num_draft_tokens"] - before["spec_decode_num_draft_tokens"]
                accepted = (
                    after["spec_decode_num_accepted_tokens"] - before["spec_decode_num_accepted_tokens"]
                )
                rates[k] = (accepted, drafted)
                if k == 0:
                    want = tokens
                elif tokens != want:
                    raise SystemExit(f"{kind}, k={k}: greedy tokens differ with speculation")
        off = statistics.median(walls[0])
        for k in args.k:
            acc, drafted = rates[k]
            wall = statistics.median(walls[k])
            rate = acc / max(drafted, 1)
            cols = f"{kind:<11}{k:>3}{rate:>10.2f}{steps[k]:>7}{steps[0]:>10}"
            print(f"{cols}{wall:>8.2f}{off:>9.2f}{off / wall:>8.2f}x")
    one = statistics.median(step_seconds(engines[0], 1))
    for k in args.k:
        full = step_seconds(engines[k], 1 + k)
        if full:
            print(
                f"a decode step of 1 token: {one * 1e3:.1f} ms; verifying 1 + {k} tokens: "
                f"{statistics.median(full) * 1e3:.1f} ms (median of {len(full)} steps), "
                f"{statistics.median(full) / one:.2f}x"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
