"""Notebook 09's exercises: one token's KV bytes on one GPU under tensor parallelism (MLA included), the
blocks a CPU-tier hit loads (after the GPU prefix hit, up to the first block the tier lacks), and which KV
heads a rank holds (split, or copied once the ranks outnumber them)."""

from __future__ import annotations

from paged_lab import kv_math
from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.classroom.exercises.nb08 import _shown, _st_spec
from paged_lab.engine.dist import tp as tp_mod
from paged_lab.memory.offload.connector import blocks_to_load

_DTYPES = sorted(kv_math.DTYPE_BYTES)


def _st_bytes_per_gpu():
    from hypothesis import strategies as st

    return st.tuples(_st_spec(), st.sampled_from(_DTYPES), st.sampled_from([1, 2, 4, 8, 16]))


def _st_heads():
    """(num_heads, num_kv_heads, tp, rank) that vLLM accepts: tp divides the query heads, and the KV heads
    divide tp or tp divides them."""
    from hypothesis import strategies as st

    @st.composite
    def heads(draw):
        tp = draw(st.sampled_from([1, 2, 4, 8, 16]))
        kv = draw(st.sampled_from([k for k in (1, 2, 4, 8, 16, 32) if k % tp == 0 or tp % k == 0]))
        group = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16) if (kv * g) % tp == 0]))
        return kv * group, kv, tp, draw(st.integers(0, tp - 1))
    return heads()


def _st_tier_hit():
    """(num_tokens, block_size, gpu_hit_blocks, in_tier): a request, its GPU prefix hit (whole blocks, at
    most every full block), and which of its full blocks the tier holds."""
    from hypothesis import strategies as st

    @st.composite
    def case(draw):
        block_size = draw(st.sampled_from([1, 2, 4, 16]))
        num_tokens = draw(st.integers(1, 200))
        full = num_tokens // block_size
        gpu = draw(st.integers(0, full))
        in_tier = draw(st.lists(st.booleans(), min_size=full, max_size=full))
        return num_tokens, block_size, gpu, in_tier
    return case()


def _expect_bytes(spec, dtype, tensor_parallel_size):
    return spec.kv_bytes_per_token(dtype, tensor_parallel_size)


def _expect_heads(num_heads, num_kv_heads, tensor_parallel_size, rank):
    return list(tp_mod.head_ranges(num_heads, num_kv_heads, tensor_parallel_size, rank)[1])


_MLA = kv_math.get_spec("deepseek-v3")
_GQA = kv_math.get_spec("llama-3.1-70b")

KV_BYTES_PER_TOKEN_PER_GPU = Exercise(
    "kv_bytes_per_token_per_gpu", ("spec", "dtype", "tensor_parallel_size"), _expect_bytes,
    cases=((_GQA, "bfloat16", 8), (_GQA, "bfloat16", 16), (_MLA, "bfloat16", 8)), strategy=_st_bytes_per_gpu,
    hint="each GPU keeps max(1, num_kv_heads // tensor_parallel_size) KV heads, never a part of one; an MLA "
         "model (kv_lora_rank > 0) keeps its whole latent, kv_lora_rank + qk_rope_head_dim numbers per "
         "layer, on every GPU, with no factor 2.",
    real="paged_lab.kv_math:ModelSpec.kv_bytes_per_layer_token", fmt=_shown)

KV_HEADS_OF_RANK = Exercise(
    "kv_heads_of_rank", ("num_heads", "num_kv_heads", "tensor_parallel_size", "rank"), _expect_heads,
    cases=((9, 3, 3, 1), (64, 8, 8, 5), (8, 2, 4, 3)), strategy=_st_heads,
    hint="with fewer KV heads than ranks, tensor_parallel_size // num_kv_heads neighbouring ranks share one "
         "KV head: rank r holds head r // that; otherwise rank r holds its own consecutive run of "
         "num_kv_heads // tensor_parallel_size heads.",
    real="paged_lab.engine.dist.tp:head_ranges")

TIER_BLOCKS_LOADED = Exercise(
    "tier_blocks_loaded", ("num_tokens", "block_size", "gpu_hit_blocks", "in_tier"), blocks_to_load,
    cases=((30, 4, 2, [True, True, True, True, False, True, True]), (16, 4, 0, [True] * 4),
           (12, 4, 3, [True] * 3), (7, 4, 0, [False])),
    strategy=_st_tier_hit,
    hint="start at the first block the GPU prefix cache did not have (index gpu_hit_blocks); take block "
         "after block while in_tier says the tier holds it, and stop at the first it lacks: a hit is a "
         "prefix, a block after a gap is useless. Only full blocks have a hash: num_tokens // block_size.",
    real="paged_lab.memory.offload.connector:blocks_to_load")

EXERCISES = (KV_BYTES_PER_TOKEN_PER_GPU, TIER_BLOCKS_LOADED, KV_HEADS_OF_RANK)
