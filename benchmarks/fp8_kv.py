"""What an fp8 KV cache changes in SmolLM2's output: ``tools.kv_dtypes.compare_kv_cache_dtypes`` on a bigger
prompt set than notebook 08's, printed as a table (per prompt: the first generated token where fp8's
greedy text differs from the model-dtype cache's, the share of equal tokens, and the teacher-forced
next-token logit error, which does not compound), with the two pools' bytes.

    .venv/bin/python benchmarks/fp8_kv.py                      # 24 prompts x 64 tokens, fp32, ~2 min
    .venv/bin/python benchmarks/fp8_kv.py --dtype bfloat16     # against a bf16 cache
    .venv/bin/python benchmarks/fp8_kv.py --max-tokens 32 --prompts 8   # notebook 08's set

Not a speed benchmark: the fp8 pool runs the torch backend (the C kernels read float caches only), so
its steps are not compared with the fp32 pool's.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from paged_lab.tools.kv_dtypes import DEFAULT_PROMPTS, compare_kv_cache_dtypes

MORE_PROMPTS = (
    "Who wrote 'Pride and Prejudice'?",
    "Convert 100 degrees Fahrenheit to Celsius.",
    "Write a haiku about autumn rain.",
    "What does HTTP stand for, and what is it used for?",
    "Give me three tips for a job interview.",
    "Write a SQL query that counts the rows of a table named orders.",
    "Why is the sky blue? Answer in two sentences.",
    "Summarise the plot of Romeo and Juliet in one sentence.",
    "What is the difference between a list and a tuple in Python?",
    "Name the planets of the solar system in order from the sun.",
    "Write a short email asking a colleague to move a meeting to Friday.",
    "What is 2 to the power of 10?",
    "Describe a cat to someone who has never seen one.",
    "What are the three states of matter?",
    "Suggest a name for a bakery that sells only bread.",
    "Explain recursion to a ten-year-old.",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32", help="the model's dtype (and the reference cache's)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=len(DEFAULT_PROMPTS) + len(MORE_PROMPTS),
                    help="how many prompts: notebook 08's default set first, then more")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = (DEFAULT_PROMPTS + MORE_PROMPTS)[: args.prompts]
    report = compare_kv_cache_dtypes(args.model, prompts=prompts, max_tokens=args.max_tokens,
                                     dtype=args.dtype)
    print(report.summary())
    diverged = [d for d in report.first_divergence if d is not None]
    print(f"identical greedy outputs: {len(prompts) - len(diverged)} of {len(prompts)}; first divergence "
          f"median {statistics.median(diverged) if diverged else '-'}; tokens equal "
          f"{statistics.mean(report.tokens_equal_fraction):.2f} on average; teacher-forced argmax agreement "
          f"{statistics.mean(report.teacher_forced_agreement):.3f}; |dlogit| max "
          f"{max(report.max_logit_error):.2f}, mean {statistics.mean(report.mean_logit_error):.3f}")


if __name__ == "__main__":
    main()
