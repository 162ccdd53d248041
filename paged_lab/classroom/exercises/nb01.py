"""Notebook 01's exercises: the KV cache's bytes per token, and how many sequences fit on a GPU."""

from __future__ import annotations

from paged_lab import kv_math
from paged_lab.classroom.exercises.exercise import Exercise, shown_value

_DTYPES = sorted(kv_math.DTYPE_BYTES)


def _st_spec():
    """A model's shape: any layer count, KV heads dividing the query heads, a usual head_dim."""
    from hypothesis import strategies as st

    @st.composite
    def spec(draw):
        kv = draw(st.integers(1, 8))
        return kv_math.ModelSpec(
            name="generated", num_layers=draw(st.integers(1, 40)), num_heads=kv * draw(st.integers(1, 8)),
            num_kv_heads=kv, head_dim=draw(st.sampled_from([16, 64, 80, 128])), hidden_size=64,
            vocab_size=100, num_params=draw(st.integers(1, 10**10)))
    return spec()


def _st_kv_bytes():
    from hypothesis import strategies as st

    return st.tuples(_st_spec(), st.sampled_from(_DTYPES))


def _st_max_batch():
    from hypothesis import strategies as st

    gpu_memory_bytes, seq_len = st.integers(1, 200 * 2**30), st.integers(1, 32_768)
    return st.tuples(_st_spec(), gpu_memory_bytes, seq_len, st.sampled_from(_DTYPES))


def _expect_max_batch(spec, gpu_memory_bytes, seq_len, dtype):
    return kv_math.plan_capacity(spec, gpu_memory_bytes, seq_len, dtype).max_seqs


_SPEC = kv_math.get_spec(kv_math.list_specs()[0])  # the catalogue's first model: the fixed cases

KV_BYTES_PER_TOKEN = Exercise(
    "kv_bytes_per_token", ("spec", "dtype"), kv_math.kv_bytes_per_token,
    cases=((_SPEC, "bfloat16"), (_SPEC, "float32")), strategy=_st_kv_bytes,
    hint="every layer stores a K and a V vector per KV head (not per query head), each head_dim "
         "numbers of DTYPE_BYTES[dtype] bytes.",
    real="paged_lab.kv_math:ModelSpec.kv_bytes_per_token", fmt=shown_value)

MAX_BATCH = Exercise(
    "max_batch", ("spec", "gpu_memory_bytes", "seq_len", "dtype"), _expect_max_batch,
    cases=((_SPEC, 24 * 10**9, 2048, "bfloat16"), (_SPEC, 10**6, 100, "float32")), strategy=_st_max_batch,
    hint="the weights (num_params x bytes) come off first; when they do not fit the answer is 0. "
         "Round down twice: whole tokens, then whole sequences.",
    real="paged_lab.kv_math:plan_capacity", fmt=shown_value)

EXERCISES = (KV_BYTES_PER_TOKEN, MAX_BATCH)
