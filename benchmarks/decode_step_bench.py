"""One engine decode step, eager against compiled (``LLM(enforce_eager=False)``), at several batch sizes.

Both engines run the same SmolLM2-135M (fp32; the eager one with packed weights, ``cpu_prepack=True``) over
the same prompts; for each batch size n, n requests are prefilled and decoded together, and the engine's
per-step timeline gives the time of each of the ``--steps`` decode steps after 3 warm-up steps. Prints the
median ms per step and eager / compiled (above 1: compiled is faster), measured in the same run, and checks
that both engines produced the same tokens. Compiling takes about a minute per size (start-up, not timed).

    .venv/bin/python benchmarks/decode_step_bench.py [--threads 1] [--sizes 1,4,8] [--steps 15]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from paged_lab.engine import LLM, SamplingParams
from paged_lab.models import load_model
from paged_lab.tools.bench import bench_workload


def _decode_ms(llm: LLM, prompts: list[list[int]], steps: int) -> tuple[float, list[list[int]]]:
    """Median ms of one decode step with len(prompts) sequences running (from ``llm.timeline``, the
    engine's own per-step record; the first 3 decode steps are warm-up), and the tokens they made."""
    llm.reset_prefix_cache()
    llm.timeline.clear()
    params = SamplingParams(temperature=0, max_tokens=steps + 4, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    decode = [t["seconds"] for t in llm.timeline if not t["num_prefill"] and t["num_decode"] == len(prompts)]
    return statistics.median(decode[3:]) * 1e3, [o.outputs[0].token_ids for o in outs]


def load_cpu_model():
    """SmolLM2 on the CPU, also on a machine with a GPU: ``LLM(enforce_eager=False)`` compiles CPU
    decode steps only, and ``load_model`` would otherwise put the weights on CUDA there."""
    return load_model("smollm2-135m", dtype="float32", device="cpu", progress=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", default="1,4,8", help="decode batch sizes to time (each is also compiled)")
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    model, tok, _ = load_cpu_model()
    work = bench_workload(tok, num_requests=max(sizes))
    blocks = 2 * max(sizes) * 8
    eager = LLM(model, tokenizer=tok, max_num_seqs=max(sizes), num_kv_blocks=blocks, cpu_prepack=True)
    t = time.perf_counter()
    compiled = LLM(model, tokenizer=tok, max_num_seqs=max(sizes), num_kv_blocks=blocks, enforce_eager=False,
                   compile_sizes=tuple(sizes))
    start = time.perf_counter() - t
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, torch "
          f"threads {args.threads}, fp32, SmolLM2-135M; compiling {len(sizes)} sizes took {start:.0f} s")
    print(f"{'batch':>5}{'eager ms':>10}{'compiled ms':>13}{'ratio':>8}")
    for n in sizes:
        prompts = [r.prompt_token_ids for r in work[:n]]
        a, tokens_a = _decode_ms(eager, prompts, args.steps)
        b, tokens_b = _decode_ms(compiled, prompts, args.steps)
        assert tokens_a == tokens_b, f"batch {n}: the compiled steps changed the tokens"
        print(f"{n:>5}{a:>10.1f}{b:>13.1f}{a / b:>7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
