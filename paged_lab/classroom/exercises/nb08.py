"""Notebook 08's exercises: one token's KV bytes in any attention design (MLA included), and the blocks a
sliding-window layer still holds."""

from __future__ import annotations

from paged_lab import kv_math
from paged_lab.classroom.exercises.exercise import Exercise, shown_value

_DTYPES = sorted(kv_math.DTYPE_BYTES)


def _st_spec():
    """A model's shape: GQA/MQA/MHA heads, or MLA (a latent of kv_lora_rank + qk_rope_head_dim)."""
    from hypothesis import strategies as st

    @st.composite
    def spec(draw):
        kv = draw(st.integers(1, 8))
        mla = draw(st.booleans())
        return kv_math.ModelSpec(
            name="generated", num_layers=draw(st.integers(1, 64)), num_heads=kv * draw(st.integers(1, 8)),
            num_kv_heads=kv, head_dim=draw(st.sampled_from([16, 64, 128])), hidden_size=64, vocab_size=100,
            num_params=1, kv_lora_rank=draw(st.sampled_from([128, 256, 512])) if mla else 0,
            qk_rope_head_dim=draw(st.sampled_from([32, 64])) if mla else 0)
    return spec()


def _st_bytes():
    from hypothesis import strategies as st

    return st.tuples(_st_spec(), st.sampled_from(_DTYPES))


def _st_sliding():
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 5000), st.sampled_from([1, 2, 4, 16, 32]), st.integers(1, 600))


def _shown(value) -> str:
    """A spec by the fields the answer depends on (MLA's latent included); anything else as usual."""
    if isinstance(value, kv_math.ModelSpec):
        return (f"ModelSpec(num_layers={value.num_layers}, num_kv_heads={value.num_kv_heads}, "
                f"head_dim={value.head_dim}, kv_lora_rank={value.kv_lora_rank}, "
                f"qk_rope_head_dim={value.qk_rope_head_dim})")
    return shown_value(value)


def _expect_bytes(spec, dtype):
    return spec.kv_bytes_per_token(dtype)


_MLA = kv_math.get_spec("deepseek-v3")
_GQA = kv_math.get_spec("llama-3.1-8b")

CACHE_BYTES_PER_TOKEN = Exercise(
    "cache_bytes_per_token", ("spec", "dtype"), _expect_bytes,
    cases=((_GQA, "bfloat16"), (_MLA, "bfloat16"), (_MLA, "fp8")), strategy=_st_bytes,
    hint="an MLA model (kv_lora_rank > 0) caches one latent per layer: kv_lora_rank + qk_rope_head_dim "
         "numbers, with no factor 2 and no heads; every other model a K and a V per KV head per layer.",
    real="paged_lab.kv_math:ModelSpec.kv_bytes_per_token", fmt=_shown)

SLIDING_BLOCKS_HELD = Exercise(
    "sliding_blocks_held", ("num_tokens", "block_size", "sliding_window"), kv_math.window_blocks_held,
    cases=((1000, 16, 128), (20, 4, 8), (5, 4, 8)), strategy=_st_sliding,
    hint="the first num_tokens - sliding_window + 1 tokens (never fewer than 0) are out of the sliding "
         "window; only the whole blocks among them are freed, so count the request's blocks and take "
         "those away.",
    real="paged_lab.kv_math:window_blocks_held")

EXERCISES = (CACHE_BYTES_PER_TOKEN, SLIDING_BLOCKS_HELD)
