"""Notebook 06's exercises: attention through a block table, and one Triton tile loop's scores."""

from __future__ import annotations

from paged_lab.classroom.exercises.exercise import Exercise, close, shown_value


def _tensor_case(seed, block_size, num_kv_heads, group, head_dim, ctx_blocks, context_len):
    """A query, a paged K/V cache with a few spare blocks, a shuffled table: one decode's arguments."""
    import torch

    g = torch.Generator().manual_seed(seed)
    num_blocks = ctx_blocks + 3
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g)
    table = torch.randperm(num_blocks, generator=g)[:ctx_blocks].to(torch.int32)
    q = torch.randn(num_kv_heads * group, head_dim, generator=g)
    return q, k_cache, v_cache, table, context_len, head_dim ** -0.5


def _st_decode():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size, ctx_blocks = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        context_len = draw(st.integers(1, block_size * ctx_blocks))
        return _tensor_case(draw(st.integers(0, 2**16)), block_size, draw(st.integers(1, 2)),
                            draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), ctx_blocks, context_len)
    return args()


def _expect_decode(q, k_cache, v_cache, block_table, context_len, scale):
    import torch

    from paged_lab.kernels import reference

    return reference.paged_attention_decode(q[None], k_cache, v_cache, block_table[None],
                                            torch.tensor([context_len]), scale)[0]


def _scores_case(q, k_cache, v_cache, table, context_len, scale):
    """One head of a decode's arguments: q [HEAD_DIM], k_cache [num_blocks, BLOCK_SIZE, HEAD_DIM]."""
    return q[0], k_cache[:, :, 0], table, context_len


def _st_scores():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size, ctx_blocks = draw(st.sampled_from([2, 4])), draw(st.integers(1, 3))
        case = _tensor_case(draw(st.integers(0, 2**16)), block_size, 1, 1, draw(st.sampled_from([2, 4])),
                            ctx_blocks, draw(st.integers(1, block_size * ctx_blocks)))
        return _scores_case(*case)
    return args()


def _expect_scores(q, k_cache, block_table, context_len):
    from paged_lab.kernels import reference

    k, _ = reference.gather_kv(k_cache[:, :, None], k_cache[:, :, None], block_table, context_len)
    return k[:, 0] @ q


DECODE_ATTENTION = Exercise(
    "decode_attention", ("q", "k_cache", "v_cache", "block_table", "context_len", "scale"), _expect_decode,
    cases=(_tensor_case(0, 2, 1, 1, 2, 2, 3), _tensor_case(1, 4, 2, 2, 4, 3, 9)), strategy=_st_decode,
    hint="gather the first context_len rows through the table (k_cache[block_table[:n]]), repeat "
         "each KV head for its group of query heads, then softmax(q k^T x scale) v.",
    real="paged_lab.kernels.reference:paged_attention_decode", same=close, fmt=shown_value)

# The shown solution walks the table as the hint says: one block per iteration, its id looked up, its
# filled rows loaded as one tile, scored against q (the torch twin of one Triton decode program).
DECODE_SCORES = Exercise(
    "decode_scores", ("q", "k_cache", "block_table", "context_len"), _expect_scores,
    cases=(_scores_case(*_tensor_case(0, 2, 1, 1, 4, 2, 3)),), strategy=_st_scores,
    hint="one loop iteration per block of the table: load the block id, then a [BLOCK_SIZE, HEAD_DIM] "
         "tile; mask rows at or past context_len when you load AND when you store.",
    real="paged_lab.kernels.stepwise:decode_program", same=close, fmt=shown_value)

EXERCISES = (DECODE_ATTENTION, DECODE_SCORES)
