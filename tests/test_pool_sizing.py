"""The KV pool sized by vLLM's CPU worker steps, vLLM's capacity log line, and stats() under vLLM's metric
names (paged_lab.engine.pool_sizing, paged_lab.engine.metrics)."""

from __future__ import annotations

import pytest

from paged_lab import LLM, SamplingParams
from paged_lab.engine.pool_sizing import (
    cpu_pool_size,
    kv_cache_size_log,
    process_memory,
    requested_cpu_memory,
    total_memory,
    warm_up,
)

# vLLM 0.32.0's format string, vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity (logger.info_once)
VLLM_FORMAT = "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"


def test_the_log_line_is_vllms_format_with_its_numbers():
    # 64 blocks of 16 for requests of 8,192 tokens: 512 blocks each, 0.125 of one at once, 1,024 tokens
    assert kv_cache_size_log(64, 16, 8192) == VLLM_FORMAT % ("CPU", "1,024", "8,192", 0.125)
    assert kv_cache_size_log(64, 16, 8192) == ("CPU KV cache size: 1,024 tokens, Maximum concurrency for "
                                               "8,192 tokens per request: 0.12x")
    # a pool of 100,000 blocks, requests of 1,000 tokens (63 blocks; the last one partly used)
    assert kv_cache_size_log(100_000, 16, 1000, device="GPU") == VLLM_FORMAT % (
        "GPU", f"{int(100_000 / 63 * 1000):,}", "1,000", 100_000 / 63)
    # two full-attention groups: a request takes its blocks in each
    assert kv_cache_size_log(64, 16, 256, num_groups=2) == VLLM_FORMAT % ("CPU", "512", "256", 2.0)


def test_cpu_pool_size_takes_the_requested_memory_less_what_the_process_uses():
    auto = cpu_pool_size(1000, requested_memory=10_500, consumed_memory=2_000)
    assert (auto.kv_cache_memory, auto.num_blocks) == (8_500, 8)
    explicit = cpu_pool_size(1000, kv_cache_memory_bytes=64_000, requested_memory=1, consumed_memory=10**9)
    assert (explicit.kv_cache_memory, explicit.num_blocks, explicit.requested_memory) == (64_000, 64, None)
    assert requested_cpu_memory(1000) == 920 and requested_cpu_memory(1001, 0.5) == 501   # ceil, as vLLM
    here = cpu_pool_size(1, requested_memory=process_memory() + 2**30)          # RSS read now
    assert 0 < here.consumed_memory < total_memory() and here.kv_cache_memory > 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(requested_memory=1000, consumed_memory=1000), "requested_memory=1000 .* consumed_memory=1000"),
    (dict(), "requested_memory"),
    (dict(requested_memory=10**6, consumed_memory=0, bytes_per_block=0), "bytes_per_block"),
    (dict(kv_cache_memory_bytes=10), "hold no block"),
    (dict(kv_cache_memory_bytes=0), "kv_cache_memory_bytes"),
    (dict(requested_memory=-5), "requested_memory"),
])
def test_cpu_pool_size_names_the_bad_argument(kwargs, match):
    kwargs = {"bytes_per_block": 100, **kwargs}
    with pytest.raises(ValueError, match=match):
        cpu_pool_size(**kwargs)


def test_an_engine_warmed_up_and_sized_like_vllm_and_its_stats_under_vllms_names(smollm2):
    model, tok, spec = smollm2
    llm = LLM(model, tokenizer=tok, block_size=16, num_kv_blocks=8, max_num_seqs=2, cpu_prepack=False)
    assert warm_up(llm) == 8 * 16 - 1                       # one step's worth: the pool's slots less one
    st = llm.stats()
    assert st["prefix_cache_queries"] == 127 and st["num_steps"] == 1 and st["kv_usage"] == 0
    per_block = llm.kv.bytes // llm.num_blocks
    assert per_block == 16 * spec.kv_bytes_per_token("float32")
    assert cpu_pool_size(per_block, kv_cache_memory_bytes=llm.kv.bytes).num_blocks == llm.num_blocks
    assert LLM(model, tokenizer=tok, kv_cache_memory=llm.kv.bytes, cpu_prepack=False).num_blocks == 8
    # a pool too small for everyone: preemptions, and the same numbers under vLLM's names
    llm.generate(["The sky is"] * 2, SamplingParams(temperature=0, max_tokens=70, ignore_eos=True),
                 use_tqdm=False)
    llm.generate(["The sky is"], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    st = llm.stats()
    assert st["num_preemptions"] > 0 and st["prefix_cache_hits"] > 0
    assert st["vllm:num_preemptions"] == st["num_preemptions"]
    assert st["vllm:prefix_cache_queries"] == st["prefix_cache_queries"]
    assert st["vllm:prefix_cache_hits"] == st["prefix_cache_hits"]
    assert st["vllm:kv_cache_usage_perc"] == st["kv_usage"] == 0
