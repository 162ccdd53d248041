"""How big the KV pool is, by vLLM's steps, and the line vLLM logs about it.

On a CPU, vLLM's ``CPUWorker.determine_available_memory`` (``vllm/v1/worker/cpu_worker.py``, vllm 0.32.0)
sizes the cache in three steps:

1. warm the model up with a dummy batch (``warming_up_model``), so that the process holds what it will
   hold while it serves;
2. take the process's resident memory (RSS) as what everything but the KV cache uses;
3. give the cache the requested memory (``gpu_memory_utilization`` x the NUMA node's memory,
   ``CPUWorker.__init__``) minus that, or ``kv_cache_memory_bytes`` when it is set
   (``VLLM_CPU_KVCACHE_SPACE``); nothing left is an error.

On a CUDA GPU ``Worker.determine_available_memory`` (``vllm/v1/worker/gpu_worker.py``) profiles instead: a
dummy batch's forward pass under ``memory_profiling`` measures the weights, the peak of torch's
activations and the memory outside torch (NCCL, cuBLAS workspaces), and, where CUDA graphs are captured,
their memory; the cache gets the GPU's memory x ``gpu_memory_utilization`` minus all of those
(``kv_cache_memory_bytes`` skips the subtraction). Either way ``get_kv_cache_config_from_groups``
(``vllm/v1/core/kv_cache_utils.py``) floor-divides it into blocks, and ``update_kv_cache_capacity`` logs
how many tokens and how many requests of ``max_model_len`` tokens fit (``kv_cache_size_log``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from paged_lab._checks import check_int, check_positive
from paged_lab.kv_math import cdiv


def process_memory() -> int:
    """This process's resident memory in bytes (RSS), as vLLM's CPU worker reads it with psutil."""
    try:
        import psutil
    except ImportError:  # Linux without psutil: /proc/self/statm counts resident pages second
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return psutil.Process(os.getpid()).memory_info().rss


def total_memory() -> int:
    """The machine's memory in bytes (vLLM reads its NUMA node's, ``get_memory_node_info``)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def warm_up(llm, num_tokens: int | None = None) -> int:
    """Step 1: one dummy prompt of ``num_tokens`` token ids through ``llm`` (default: one step's worth,
    as much as ``max_num_batched_tokens``, the pool and ``max_model_len`` allow), one token sampled.
    Returns the tokens it ran."""
    from paged_lab.engine.params import SamplingParams

    limits = [llm.num_blocks * llm.block_size - 1, llm.max_model_len - 1]
    if llm.scheduler.max_num_batched_tokens is not None:
        limits.append(llm.scheduler.max_num_batched_tokens)
    n = min(limits) if num_tokens is None else check_int("num_tokens", num_tokens, minimum=1)
    llm.generate({"prompt_token_ids": [0] * n}, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    return n


@dataclass(frozen=True)
class PoolSize:
    """What ``cpu_pool_size`` decided: ``kv_cache_memory`` bytes for the cache, ``num_blocks`` blocks."""

    requested_memory: int | None  # bytes the whole process may use (None: kv_cache_memory_bytes was set)
    consumed_memory: int | None  # what everything but the KV cache uses (RSS after the warm-up)
    kv_cache_memory: int
    bytes_per_block: int
    num_blocks: int


def cpu_pool_size(bytes_per_block: int, requested_memory: int | None = None,
                  consumed_memory: int | None = None, kv_cache_memory_bytes: int | None = None) -> PoolSize:
    """The pool vLLM's CPU worker would build: ``kv_cache_memory_bytes`` when given, else
    ``requested_memory - consumed_memory`` (``consumed_memory``: None reads this process's RSS now, so warm
    the engine up first), floor-divided into blocks of ``bytes_per_block`` bytes (every layer's page)."""
    check_int("bytes_per_block", bytes_per_block, minimum=1)
    if kv_cache_memory_bytes is not None:
        check_int("kv_cache_memory_bytes", kv_cache_memory_bytes, minimum=1)
        memory = kv_cache_memory_bytes
    else:
        if requested_memory is None:
            raise ValueError("requested_memory: give the bytes the process may use, or kv_cache_memory_bytes")
        check_positive("requested_memory", requested_memory)
        consumed_memory = process_memory() if consumed_memory is None else consumed_memory
        memory = int(requested_memory - consumed_memory)
        if memory <= 0:
            raise ValueError(f"requested_memory={requested_memory} bytes leaves nothing for the KV cache: "
                             f"everything else already uses consumed_memory={consumed_memory}")
    num_blocks = memory // bytes_per_block
    if num_blocks < 1:
        raise ValueError(f"{memory} bytes for the KV cache hold no block of {bytes_per_block} bytes")
    return PoolSize(None if kv_cache_memory_bytes is not None else int(requested_memory), consumed_memory,
                    memory, bytes_per_block, num_blocks)


def max_concurrency(num_blocks: int, blocks_per_request: int) -> float:
    """Requests of ``max_model_len`` tokens the pool holds at once, as a fraction: ``num_blocks`` /
    the blocks one such request takes (``get_max_concurrency_for_kv_cache_config``: summed over every
    layer group's table)."""
    check_int("num_blocks", num_blocks, minimum=1)
    check_int("blocks_per_request", blocks_per_request, minimum=1)
    return num_blocks / blocks_per_request


def kv_cache_size_log(num_blocks: int, block_size: int, max_model_len: int, num_groups: int = 1,
                      device: str = "CPU") -> str:
    """vLLM's line about the pool (``update_kv_cache_capacity`` in ``vllm/v1/core/kv_cache_utils.py``):
    ``"CPU KV cache size: N tokens, Maximum concurrency for X tokens per request: Y.YYx"``, with
    N = int(Y x X) and Y = ``max_concurrency`` of a request of ``max_model_len`` tokens that takes
    cdiv(X, block_size) blocks in each of ``num_groups`` full-attention groups."""
    check_int("block_size", block_size, minimum=1)
    check_int("max_model_len", max_model_len, minimum=1)
    check_int("num_groups", num_groups, minimum=1)
    concurrency = max_concurrency(num_blocks, num_groups * cdiv(max_model_len, block_size))
    num_tokens = int(concurrency * max_model_len)
    return (f"{device} KV cache size: {num_tokens:,} tokens, Maximum concurrency for {max_model_len:,} "
            f"tokens per request: {concurrency:.2f}x")


def requested_cpu_memory(total_memory: int, memory_utilization: float = 0.92) -> int:
    """What vLLM's CPU worker requests: ceil(the node's memory x ``gpu_memory_utilization``), 0.92 by
    default (``CPUWorker.__init__``; ``CacheConfig.gpu_memory_utilization`` in ``vllm/config/cache.py``)."""
    check_positive("total_memory", total_memory)
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization!r}")
    return math.ceil(total_memory * memory_utilization)
