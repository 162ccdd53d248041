"""The sizes of KV beyond one GPU, computed: what a token costs on each GPU under tensor parallelism,
how many requests a node then holds, and how long moving a prompt's KV over a link takes.

Per GPU under tensor parallelism (``tensor_parallel_size`` = tp): a GQA model's KV heads are split,
``max(1, num_kv_heads // tp)`` per GPU (replicated once tp passes them); an MLA latent has no heads to
split, so every GPU holds all of it (vLLM: ``ModelConfig.get_num_kv_heads`` in ``vllm/config/model.py``,
``MLAAttention.get_kv_cache_spec`` in ``vllm/model_executor/layers/attention/mla_attention.py``). Decode
context parallelism (``decode_context_parallel_size`` = dcp, ``vllm/config/parallel.py``) splits each
request's *tokens* over dcp of the tp ranks instead: a block of the scheduler's table then covers
``block_size x dcp`` tokens and each rank keeps 1/dcp of them
(``vllm/v1/core/single_type_kv_cache_manager.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from paged_lab._checks import check_int, check_positive
from paged_lab.kv_math import GB, as_spec, canonical_dtype

GPUS_PER_NODE = 8

# Nominal peak bandwidth of one direction of a link, bytes per second (vendors' figures, not measured):
# PCIe 5.0 x16 about 64 GB/s; NVLink 4 (H100 SXM) 900 GB/s both ways, 450 one way; InfiniBand/RoCE
# NICs of 100 and 400 Gb/s are 12.5 and 50 GB/s.
LINKS_GBPS = {"PCIe 5.0 x16": 64.0, "NVLink 4": 450.0, "RDMA 100 Gb/s": 12.5, "RDMA 400 Gb/s": 50.0}

# Parameters a token runs through (mixture-of-experts models activate a few experts), from the model
# cards: DeepSeek-V3 37 B of 671 B (arXiv:2412.19437), gpt-oss-20b 3.6 B of 21 B (OpenAI's model card).
# The dense models run all of theirs.
ACTIVE_PARAMS = {"deepseek-v3": 37_000_000_000, "gpt-oss-20b": 3_600_000_000}


def kv_bytes_per_token_per_gpu(model, dtype: Any = "bfloat16", tensor_parallel_size: int = 1,
                               decode_context_parallel_size: int = 1) -> float:
    """KV bytes one token costs on one GPU: the model's per-rank bytes (``kv_math``), over dcp ranks."""
    check_int("decode_context_parallel_size", decode_context_parallel_size, minimum=1)
    if tensor_parallel_size % decode_context_parallel_size:
        raise ValueError(f"decode_context_parallel_size={decode_context_parallel_size} must divide "
                         f"tensor_parallel_size={tensor_parallel_size} (it reuses the TP ranks)")
    spec = as_spec(model)
    return spec.kv_bytes_per_token(dtype, tensor_parallel_size) / decode_context_parallel_size


def tp_table(models: Sequence[str], tp_sizes: Sequence[int] = (1, 2, 4, 8), gpu_gb: float = 80,
             context: int = 4096, dtype: Any = "bfloat16", weight_dtype: Any = "bfloat16",
             gpu_memory_utilization: float = 0.92, dcp: int = 1) -> list[dict]:
    """One row per (model, tp): KV heads and bytes per token on each GPU, the weights each GPU holds
    (a 1/tp share), the KV memory left, and the requests of ``context`` tokens that one tp-GPU instance
    holds (every GPU holds a slice of every request, so the instance holds what one GPU's pool holds) and a
    node of GPUS_PER_NODE GPUs (GPUS_PER_NODE // tp instances). 0 where the weights do not fit."""
    check_positive("gpu_gb", gpu_gb)
    check_int("context", context, minimum=1)
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    rows = []
    for name in models:
        spec = as_spec(name)
        for tp in tp_sizes:
            check_int("tp_sizes[...]", tp, minimum=1)
            per_token = kv_bytes_per_token_per_gpu(spec, dtype, tp, min(dcp, tp))
            weights = spec.weight_bytes(weight_dtype) / tp
            budget = max(0.0, gpu_gb * GB * gpu_memory_utilization - weights)
            per_instance = int(budget // (per_token * context))
            rows.append({"model": spec.name, "attention_kind": spec.attention_kind, "tp": tp,
                         "kv_heads_per_gpu": 1 if spec.is_mla else max(1, spec.num_kv_heads // tp),
                         "kv_bytes_per_token_per_gpu": per_token, "weight_bytes_per_gpu": weights,
                         "kv_budget_bytes_per_gpu": budget, "requests_per_instance": per_instance,
                         "requests_per_node": per_instance * (GPUS_PER_NODE // tp) if tp <= GPUS_PER_NODE
                         else 0, "gpu_gb": gpu_gb, "context": context, "dtype": canonical_dtype(dtype),
                         "dcp": min(dcp, tp)})
    return rows


def handoff_table(models: Sequence[str], prompt_len: int = 4096, dtype: Any = "bfloat16",
                  links: dict[str, float] | None = None, gpu_tflops: float = 989.0,
                  mfu: float = 0.5) -> list[dict]:
    """One row per model: the KV bytes a prefill worker sends a decode worker for one prompt of
    ``prompt_len`` tokens (every layer, every head: the whole request), the seconds that takes on each
    link (``LINKS_GBPS``), and the prefill compute it saves the decode worker: ``2 x active parameters x
    tokens`` FLOPs (attention's own quadratic term left out) at ``mfu`` of ``gpu_tflops`` (989: an H100
    SXM's dense bf16 peak, NVIDIA's figure)."""
    check_int("prompt_len", prompt_len, minimum=1)
    check_positive("gpu_tflops", gpu_tflops)
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    links = LINKS_GBPS if links is None else links
    rows = []
    for name in models:
        spec = as_spec(name)
        moved = spec.kv_bytes_for_context(prompt_len, dtype)
        active = ACTIVE_PARAMS.get(spec.name, spec.num_params)
        prefill_s = 2 * active * prompt_len / (gpu_tflops * 1e12 * mfu)
        row = {"model": spec.name, "prompt_len": prompt_len, "kv_bytes": moved, "prefill_s": prefill_s}
        row.update({f"{link} s": moved / (gbps * GB) for link, gbps in links.items()})
        rows.append(row)
    return rows
