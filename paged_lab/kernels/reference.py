"""The readable truth: paged attention in plain torch, one sequence at a time.

Every operation follows the same two steps, so a reader can check each line by hand:

1. **gather** — read a sequence's K and V out of the paged pool *through its block table*
   (``k_cache[block_table[:num_blocks]]``), which turns scattered pages back into one
   contiguous ``[context_len, num_kv_heads, head_dim]`` tensor;
2. **attend** — ordinary softmax attention on that contiguous tensor.

Cache layout (per layer): ``k_cache``, ``v_cache``: ``[num_blocks, block_size, num_kv_heads, head_dim]``;
``slot = physical_block * block_size + offset``. Any block size works here (1, 3, 16, ...).

A sliding-window layer (``sliding_window=W``, notebook 08) lets the query at position ``p`` see keys
``p - W + 1 .. p`` only. Its table may hold ``NULL_BLOCK`` (-1) for blocks wholly before every query's
window: never read, since the gather starts at the first block a query needs.

Scores and softmax run in float32 whatever the cache dtype; the result is cast back to ``q.dtype``.
An fp8 cache (``torch.float8_e4m3fn``) stores ``x / k_scale`` (or ``v_scale``) and is read back as
``x * scale`` (:mod:`paged_lab.kernels.quant`); a float cache ignores the scales.
This file does no argument checking: :mod:`paged_lab.kernels.dispatch` (``backend="reference"``) checks
shapes, dtypes and table contents first. Its three functions are the interface every backend has, with
these signatures (torch_paged, cpu.attention, triton_paged; ``dispatch`` holds their table). The
keyword-only ``plan``, ``num_splits`` and ``max_query_len`` are what faster backends precompute or tune (a
step's indices, how to split a long context, the grid's size); a loop over sequences needs none.
"""

from __future__ import annotations

import torch

from paged_lab.kernels.quant import dequantize_kv, quantize_kv
from paged_lab.kv_math import cdiv


def store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale: float = 1.0, v_scale: float = 1.0, *,
             plan=None) -> None:
    """Write token ``i``'s K/V into slot ``slot_mapping[i]`` of the paged pool (in place).

    k, v: ``[num_tokens, num_kv_heads, head_dim]``; slot_mapping: int ``[num_tokens]``.
    A negative slot means "padding token, do not store" (vLLM's convention).
    An fp8 cache stores ``k / k_scale`` and ``v / v_scale`` (:func:`~paged_lab.kernels.quant.quantize_kv`).
    """
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    block, offset = slots // block_size, slots % block_size  # slot -> (physical block, row in block)
    k_cache[block, offset] = quantize_kv(k[keep], k_cache.dtype, k_scale)
    v_cache[block, offset] = quantize_kv(v[keep], v_cache.dtype, v_scale)


def first_key(context_len: int, query_len: int, sliding_window: int | None) -> int:
    """The first position any of the last ``query_len`` queries of a ``context_len``-token sequence
    reads: 0 for full attention; with a window W, the first query's ``p - W + 1`` (p = context_len -
    query_len), clamped at 0."""
    if sliding_window is None:
        return 0
    return max(0, context_len - query_len - sliding_window + 1)


def gather_kv(k_cache, v_cache, block_table, context_len: int, k_scale: float = 1.0, v_scale: float = 1.0,
              first_block: int = 0):
    """Read one sequence's tokens ``first_block * block_size .. context_len - 1`` of K and V through its
    block table (``first_block`` > 0: a window's sequence, whose earlier entries may be NULL_BLOCK).
    Returns two contiguous float32 tensors ``[context_len - first_block * block_size, num_kv_heads,
    head_dim]`` (an fp8 cache dequantized: ``x * k_scale``, ``x * v_scale``)."""
    block_size = k_cache.shape[1]
    num_blocks = cdiv(context_len, block_size)  # ceil: the last block may be partly filled
    blocks = block_table[first_block:num_blocks].long()
    num_read = context_len - first_block * block_size
    # [blocks * block_size, kv_heads, d] -> the first num_read rows
    k = dequantize_kv(k_cache[blocks].flatten(0, 1)[:num_read], k_scale)
    v = dequantize_kv(v_cache[blocks].flatten(0, 1)[:num_read], v_scale)
    return k, v


def attend(q, k, v, scale: float, causal_offset: int | None = None, sliding_window: int | None = None,
           key_offset: int = 0):
    """Ordinary attention for one sequence, GQA-aware, in float32.

    q: ``[num_q, num_heads, head_dim]``; k, v: ``[ctx, num_kv_heads, head_dim]``, the keys of positions
    ``key_offset .. key_offset + ctx - 1``. With ``causal_offset = c``, query ``i`` sits at position
    ``c + i`` and sees keys up to ``c + i``; with ``sliding_window = W`` too, only from ``c + i - W + 1``.
    Returns ``[num_q, num_heads, head_dim]`` in float32.
    """
    group = q.shape[1] // k.shape[1]  # GQA: each KV head serves `group` query heads
    k = k.float().repeat_interleave(group, dim=1)  # [ctx, num_heads, d]
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale  # [num_heads, num_q, ctx]
    if causal_offset is not None:
        q_pos = causal_offset + torch.arange(q.shape[0]).unsqueeze(1)  # [num_q, 1]
        k_pos = key_offset + torch.arange(k.shape[0]).unsqueeze(0)  # [1, ctx]
        hidden = k_pos > q_pos  # the future
        if sliding_window is not None:
            hidden |= k_pos <= q_pos - sliding_window  # before the window
        scores = scores.masked_fill(hidden.to(scores.device), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale: float,
                           k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                           plan=None, num_splits: int | None = None):
    """One new query token per sequence attends to its whole paged context (its last
    ``sliding_window`` tokens, with a window).

    q: ``[num_seqs, num_heads, head_dim]``; block_tables: ``[num_seqs, max_blocks]``;
    context_lens: ``[num_seqs]`` (includes the query token, whose K/V is already stored).
    Returns ``[num_seqs, num_heads, head_dim]``.
    """
    out = torch.empty_like(q)
    block_size = k_cache.shape[1]
    for i in range(q.shape[0]):
        ctx = int(context_lens[i])
        first_block = first_key(ctx, 1, sliding_window) // block_size
        k, v = gather_kv(k_cache, v_cache, block_tables[i], ctx, k_scale, v_scale, first_block)
        out[i] = attend(q[i : i + 1], k, v, scale, ctx - 1, sliding_window, first_block * block_size)[0]
    return out


def paged_attention_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale: float,
                            k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                            plan=None, max_query_len: int | None = None):
    """Several query tokens per sequence, causal, over the paged context (also chunked prefill).

    q: ``[num_tokens, num_heads, head_dim]``, all sequences' query tokens concatenated;
    ``query_start_loc[i]:query_start_loc[i+1]`` are sequence ``i``'s rows. They are the LAST
    ``query_len`` positions of its ``context_lens[i]`` tokens, so the context before them (a cached
    prefix, earlier chunks) is attended to in full and the query tokens causally (with a window: each
    query its last ``sliding_window`` positions).
    Returns ``[num_tokens, num_heads, head_dim]``.
    """
    out = torch.empty_like(q)
    block_size = k_cache.shape[1]
    for i in range(block_tables.shape[0]):
        start, end = int(query_start_loc[i]), int(query_start_loc[i + 1])
        if end == start:
            continue
        ctx = int(context_lens[i])
        first_block = first_key(ctx, end - start, sliding_window) // block_size
        k, v = gather_kv(k_cache, v_cache, block_tables[i], ctx, k_scale, v_scale, first_block)
        out[start:end] = attend(q[start:end], k, v, scale, ctx - (end - start), sliding_window,
                                first_block * block_size).to(q.dtype)
    return out
