"""The Triton decode program, written in torch one step at a time (notebook 06 builds up to it).

:func:`decode_program` does what one program of ``_decode_kernel`` does: one sequence, one KV head
and the whole GQA group of query heads that share it, a loop over (a range of) the block table with
an online softmax, the last block masked. :func:`merge_splits` is the flash-decoding merge of
partial results by log-sum-exp. Slow on purpose: it exists to be read and checked, not run.
"""

from __future__ import annotations

import torch

from paged_lab.kv_math import cdiv


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
        m_new = torch.maximum(m, s.max(dim=1).values)
        alpha = torch.exp(m - m_new)  # rescale what was summed under the old max
        p = torch.exp(s - m_new[:, None])
        l_sum = l_sum * alpha + p.sum(dim=1)
        acc = acc * alpha[:, None] + p @ v
        m = m_new
    if not l_sum.gt(0).all():
        return torch.zeros_like(q), torch.full_like(m, float("-inf"))
    return acc / l_sum[:, None], m + torch.log(l_sum)


def merge_splits(outs, lses):
    """Merge partial results of disjoint parts of the context: ``sum_i exp(lse_i - lse) * out_i``.

    outs: list of ``[group, head_dim]``; lses: list of ``[group]``. ``lse = logsumexp_i(lse_i)`` is
    the log of the softmax denominator over the whole context, so each part is re-weighted by its
    share of it.
    """
    lse = torch.stack(lses)  # [splits, group]
    w = torch.softmax(lse, dim=0)  # exp(lse_i - logsumexp(lse)); empty parts (-inf) get 0
    return (w[:, :, None] * torch.stack(outs)).sum(dim=0)
