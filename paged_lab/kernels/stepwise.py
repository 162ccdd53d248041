"""The Triton decode program, written in torch one step at a time (notebook 06 builds up to it).

:func:`online_softmax_step` is the loop body every attention kernel here shares: fold one block's
scores into a running max and a running sum. :func:`decode_program` does what one program of
``_decode_kernel`` does: one sequence, one KV head and the whole GQA group of query heads that share
it, a loop over (a range of) the block table with that online softmax, the last block masked.
:func:`merge_splits` is the flash-decoding merge of partial results by log-sum-exp, weighted by
:func:`merge_weights`. Slow on purpose: it exists to be read and checked, not run.

Notebook 06's pictures of those steps draw numbers from here (``viz.kernels`` draws, it does not
compute): :func:`online_softmax_trace` (the running values after each block), :func:`partition_lse`
(each split's log-sum-exp) and :func:`split_weights` (its weight in the merge).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from paged_lab.kv_math import cdiv


def online_softmax_step(m, l_sum, s):
    """Fold one block's scores ``s [..., rows]`` into the running max ``m [...]`` and the running sum
    ``l_sum [...]`` of exp(score - m). Returns ``(m_new, alpha, p, l_sum_new)``: ``alpha = exp(m - m_new)``
    rescales what was summed under the old max (1 when the block did not raise it, 0 on the first block,
    whose old max is -inf), ``p = exp(s - m_new)`` weighs this block's values."""
    m_new = torch.maximum(m, s.max(dim=-1).values)
    alpha = torch.exp(m - m_new)
    p = torch.exp(s - m_new[..., None])
    return m_new, alpha, p, l_sum * alpha + p.sum(dim=-1)


def decode_program(q_group, k_cache, v_cache, block_table, context_len: int, kv_head: int, scale: float,
                   blocks: range | None = None):  # fmt: skip
    """Attention of ``q_group [group, head_dim]`` over one sequence's KV head ``kv_head``.

    Walks ``blocks`` (default: all ``ceil(context_len / block_size)`` table entries) keeping a running
    max ``m``, a running sum ``l`` and a running weighted sum ``acc``. Returns ``(out [group, head_dim],
    lse [group])`` in float32, with ``lse = m + log(l)`` (natural log); an empty range gives
    ``out = 0`` and ``lse = -inf``, i.e. weight zero in :func:`merge_splits`.
    """
    block_size = k_cache.shape[1]
    blocks = range(cdiv(context_len, block_size)) if blocks is None else blocks
    q = q_group.float()
    m = torch.full((q.shape[0],), float("-inf"), device=q.device)  # running max of the scores
    l_sum = torch.zeros(q.shape[0], device=q.device)  # running sum of exp(score - m)
    acc = torch.zeros_like(q)  # running sum of exp(score - m) * v
    for j in blocks:
        block = int(block_table[j])  # look the physical block up in the table
        rows = min(block_size, context_len - j * block_size)  # the last block may be partly filled
        k = k_cache[block, :rows, kv_head].float()  # [rows, head_dim]: load only filled slots
        v = v_cache[block, :rows, kv_head].float()
        s = q @ k.T * scale  # [group, rows]
        m, alpha, p, l_sum = online_softmax_step(m, l_sum, s)
        acc = acc * alpha[:, None] + p @ v  # rescale what was summed under the old max, add this block
    if not l_sum.gt(0).all():
        return torch.zeros_like(q), torch.full_like(m, float("-inf"))
    return acc / l_sum[:, None], m + torch.log(l_sum)


def merge_weights(lse: torch.Tensor) -> torch.Tensor:
    """Each part's share of the softmax denominator, ``exp(lse_i - logsumexp(lse))`` over dim 0: its
    weight in the merge. An empty part (lse = -inf) weighs 0."""
    return torch.softmax(lse, dim=0)


def merge_splits(outs, lses):
    """Merge partial results of disjoint parts of the context: ``sum_i exp(lse_i - lse) * out_i``.

    outs: list of ``[group, head_dim]``; lses: list of ``[group]``. ``lse = logsumexp_i(lse_i)`` is
    the log of the softmax denominator over the whole context, so each part is re-weighted by its
    share of it.
    """
    w = merge_weights(torch.stack(lses))  # [splits, group]
    return (w[:, :, None] * torch.stack(outs)).sum(dim=0)


# -- the numbers of notebook 06's pictures: one query head's scores, block by block (lists of floats) ----
def _running(block_scores: Sequence[Sequence[float]], blocks: Sequence[int]):
    """Yield (block, m, alpha, l_sum) after each of ``blocks``, the scores in float64."""
    m, l_sum = torch.tensor(-math.inf, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    for j in blocks:
        if not len(block_scores[j]):
            raise ValueError(f"block_scores[{j}] is empty: every block read holds at least one token")
        m, alpha, _, l_sum = online_softmax_step(m, l_sum, torch.tensor(block_scores[j], dtype=torch.float64))
        yield j, m, alpha, l_sum


def online_softmax_trace(block_scores: Sequence[Sequence[float]]) -> list[dict]:
    """The online softmax's running values after each block of scores (one query head):
    ``max`` (m), ``sum`` (l = sum of exp(score - m) over every score so far) and ``rescale``, the
    factor exp(m_old - m_new) the old sum was multiplied by (1.0 when the block did not raise the max,
    and for the first block, which had no old sum)."""
    return [dict(block=j, max=float(m), sum=float(l_sum), rescale=float(alpha) if j else 1.0)
            for j, m, alpha, l_sum in _running(block_scores, range(len(block_scores)))]


def partition_lse(block_scores: Sequence[Sequence[float]], partitions: Sequence[range]) -> list[float]:
    """log Σ exp(score) over the blocks of each partition (split-KV), ``m + log(l)`` as
    :func:`decode_program` returns it; an empty partition gives -inf."""
    out = []
    for part in partitions:
        steps = list(_running(block_scores, part))
        if not steps:
            out.append(-math.inf)
            continue
        _, m, _, l_sum = steps[-1]  # after the partition's last block
        out.append(float(m + torch.log(l_sum)))
    return out


def split_weights(lse: Sequence[float]) -> list[float]:
    """:func:`merge_weights` of a list of partition lse (the picture's bars). At least one must be finite."""
    if all(x == -math.inf for x in lse):
        raise ValueError("lse holds no finite value: at least one partition must hold tokens")
    return merge_weights(torch.tensor(lse, dtype=torch.float64)).tolist()
