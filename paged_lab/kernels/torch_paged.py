"""Vectorized torch paged attention: the fast CPU path (``backend="torch"``).

Same math as :mod:`paged_lab.kernels.reference`, but batched instead of looping over sequences:
one index op gathers every sequence's pages into a padded ``[num_seqs, max_ctx, kv_heads, d]``
tensor, then one ``scaled_dot_product_attention`` call with a mask does the rest. The engine's
CPU path runs this for every layer of every step, so it must not loop in Python.

GQA without copying K/V: the ``group`` query heads that share a KV head are laid out as extra
query rows of that KV head (``[num_seqs, kv_heads, group * num_q, d]``), so SDPA sees plain MHA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paged_lab.kernels.reference import store_kv  # noqa: F401  (already one vectorized index_put)


def gather_padded(k_cache, v_cache, block_tables, context_lens, max_ctx: int):
    """Gather all sequences' K/V through their tables into ``[num_seqs, kv_heads, T, d]`` (float32).

    ``T = ceil(max_ctx / block_size) * block_size``. Slots at or past a sequence's context length are
    zeroed (not just masked later) so NaN or garbage in unused slots can never reach the softmax:
    a masked score is dropped, but ``0 * NaN`` in ``probs @ V`` would still be NaN.
    Also returns ``valid``: bool ``[num_seqs, T]``.
    """
    block_size = k_cache.shape[1]
    nb = max(1, -(-max_ctx // block_size))
    lens = context_lens.to(device=k_cache.device, dtype=torch.long)
    first_pos = torch.arange(nb, device=k_cache.device) * block_size  # [nb]
    table = block_tables[:, :nb].to(device=k_cache.device, dtype=torch.long)  # [S, nb]
    table = torch.where(first_pos[None, :] < lens[:, None], table, 0)  # padding entries may hold anything
    pos = torch.arange(nb * block_size, device=k_cache.device)  # [T]
    valid = pos[None, :] < lens[:, None]  # [S, T]
    k = k_cache[table].flatten(1, 2).float()  # [S, T, kv_heads, d]; a fresh copy, so zeroing in place is safe
    v = v_cache[table].flatten(1, 2).float()
    unused = (~valid).flatten().nonzero().squeeze(1)  # rows past each context (few: partial last blocks, padding)
    k.view(-1, *k.shape[2:]).index_fill_(0, unused, 0.0)
    v.view(-1, *v.shape[2:]).index_fill_(0, unused, 0.0)
    return k.transpose(1, 2), v.transpose(1, 2), valid  # [S, kv_heads, T, d]


def _attend(q, k, v, mask, scale: float):
    """q: [S, num_q, H, d] (float32); k, v: [S, kv_heads, T, d]; mask: bool [S, num_q, T] (True = attend)."""
    S, num_q, H, d = q.shape
    kvh = k.shape[1]
    group = H // kvh
    # [S, num_q, kvh, group, d] -> [S, kvh, group * num_q, d]; row r is (g = r // num_q, query r % num_q)
    qg = q.view(S, num_q, kvh, group, d).permute(0, 2, 3, 1, 4).reshape(S, kvh, group * num_q, d)
    m = mask[:, None].expand(S, group, num_q, mask.shape[-1]).reshape(S, 1, group * num_q, -1)
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=m, scale=scale)  # [S, kvh, group * num_q, d]
    return o.view(S, kvh, group, num_q, d).permute(0, 3, 1, 2, 4).reshape(S, num_q, H, d)


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale: float, max_context_len=None):
    """Batched decode; same contract as :func:`paged_lab.kernels.reference.paged_attention_decode`."""
    if q.shape[0] == 0:
        return torch.empty_like(q)
    max_ctx = int(context_lens.max()) if max_context_len is None else int(max_context_len)
    k, v, valid = gather_padded(k_cache, v_cache, block_tables, context_lens, max_ctx)
    out = _attend(q.float()[:, None], k, v, valid[:, None, :], scale)  # [S, 1, H, d]
    return out[:, 0].to(q.dtype)


def paged_attention_prefill(
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale: float, max_context_len=None
):
    """Batched (chunked) prefill; same contract as :func:`paged_lab.kernels.reference.paged_attention_prefill`."""
    num_tokens = q.shape[0]
    if num_tokens == 0:
        return torch.empty_like(q)
    dev = q.device
    qsl = query_start_loc.to(device=dev, dtype=torch.long)
    lens = context_lens.to(device=dev, dtype=torch.long)
    q_lens = qsl[1:] - qsl[:-1]  # [S]
    S = q_lens.shape[0]
    max_q = int(q_lens.max())
    max_ctx = int(lens.max()) if max_context_len is None else int(max_context_len)
    seq_of = torch.repeat_interleave(torch.arange(S, device=dev), q_lens)  # [num_tokens] owning sequence
    row = torch.arange(num_tokens, device=dev) - qsl[seq_of]  # [num_tokens] index within its sequence's query
    qp = q.new_zeros((S, max_q) + tuple(q.shape[1:]), dtype=torch.float32)
    qp[seq_of, row] = q.float()  # [S, max_q, H, d]
    k, v, valid = gather_padded(k_cache, v_cache, block_tables, lens, max_ctx)
    q_pos = (lens - q_lens)[:, None] + torch.arange(max_q, device=dev)[None, :]  # [S, max_q] absolute position
    k_pos = torch.arange(k.shape[2], device=dev)
    mask = (k_pos[None, None, :] <= q_pos[:, :, None]) & valid[:, None, :]  # [S, max_q, T] causal + in-context
    out = _attend(qp, k, v, mask, scale)  # [S, max_q, H, d]
    return out[seq_of, row].to(q.dtype)
