"""Paged attention in Triton: store_kv, decode (with split-KV flash-decoding) and prefill.

Each section is one kernel, then its launcher (the Python function that sizes the grid and launches
it); the checks of whether these kernels can run here come last. How each launch is sized per GPU
target (grid, constexprs, ``num_warps``) is in :mod:`paged_lab.kernels.triton_launch`.

Import this module through :func:`paged_lab.kernels._interpret.load_kernels` (the dispatch does),
which turns Triton's interpreter on when there is no CUDA GPU. The launchers here assume validated
arguments (see :mod:`paged_lab.kernels.checks`).

How the kernels read the cache. Per layer, ``k_cache[num_blocks, block_size, num_kv_heads, head_dim]``;
a sequence's token at position ``p`` lives in physical block ``block_table[p // block_size]``, row
``p % block_size``. The kernels walk the context in *tiles* of ``TILE`` token positions and look the
physical block of every position up in the table. ``TILE`` is ``block_size`` clamped to
[16, max_tile]: at least 16 because ``tl.dot`` needs it (so two 8-token blocks share a tile), at most
32 or 64 to bound shared memory and registers (so a 256-token block takes four to eight tiles); see
:func:`~paged_lab.kernels.triton_launch.max_tile`. Positions at or past ``context_len`` are masked
twice: on the *loads* (``other=0``, so NaN or garbage in unused slots is never read) and on the
*scores* (``-inf``, so they get zero weight).

GQA: one program serves one KV head and the whole group of query heads that share it, so each K/V
tile is loaded once per group. ``tl.arange`` needs powers of two, so the group is padded
(``GROUP_PAD``) and the padding rows are masked on load and store.

Softmax is online (running max ``m``, running sum ``l_sum``) in base 2: scores are pre-multiplied by
``scale * log2(e)`` so ``exp2`` can be used; the log-sum-exp of a split is kept in the same base.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from paged_lab.kernels.triton_launch import (
    MIN_CC,
    choose_num_splits,
    compute_in_f32,
    decode_launch,
    device_cc,
    prefill_launch,
    store_kv_launch,
    tile_for,
)

LOG2E = 1.4426950408889634


# -------------------------------------------------------------------------------------- store_kv
@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr,  # [num_tokens, num_kv_heads, head_dim]: this step's new keys/values
    k_cache_ptr, v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]: the paged pool
    slot_mapping_ptr,  # [num_tokens]: where each token goes (slot = block * block_size + offset; < 0 skips)
    stride_kt, stride_kh,  # k/v strides (token, head); head_dim stride is 1
    stride_cb, stride_co, stride_ch,  # cache strides (block, offset, head); head_dim stride is 1
    NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
):
    token = tl.program_id(0)  # one program per token: copies all its KV heads
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:  # padding token
        return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    h = tl.arange(0, HEADS_PAD)[:, None]  # [HEADS_PAD, 1]
    d = tl.arange(0, HEAD_DIM)[None, :]  # [1, HEAD_DIM]
    mask = h < NUM_KV_HEADS
    src = token * stride_kt + h * stride_kh + d
    dst = block * stride_cb + offset * stride_co + h * stride_ch + d
    k = tl.load(k_ptr + src, mask=mask)
    v = tl.load(v_ptr + src, mask=mask)
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv(k, v, k_cache, v_cache, slot_mapping):
    """Write ``k, v [num_tokens, num_kv_heads, head_dim]`` into slots ``slot_mapping`` of the cache."""
    k, v = k.contiguous(), v.contiguous()
    num_tokens, num_kv_heads, head_dim = k.shape
    assert k_cache.stride(3) == 1 and v_cache.stride() == k_cache.stride(), (
        "cache head_dim must be contiguous")
    launch = store_kv_launch(num_tokens, num_kv_heads, head_dim, k_cache.shape[1])
    _store_kv_kernel[launch.grid](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        **launch.constexprs, **launch.options,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------- decode
@triton.jit
def _load_kv_tile(
    cache_ptr, block_tables_ptr, seq, kv_head, pos, valid, d,
    stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE: tl.constexpr,
):
    """Load K (or V) rows for token positions ``pos`` [TILE] of one sequence through its block table."""
    phys = tl.load(block_tables_ptr + seq * stride_bts + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
    row = phys * stride_cb + (pos % BLOCK_SIZE) * stride_co + kv_head * stride_ch  # [TILE]
    return tl.load(cache_ptr + row[:, None] + d[None, :], mask=valid[:, None], other=0.0)  # [TILE, HEAD_DIM]


@triton.jit
def _attend_tile(
    q, m, l_sum, acc,  # q [R, HEAD_DIM]; running max m [R], sum l_sum [R], acc [R, HEAD_DIM] (float32)
    k_cache_ptr, v_cache_ptr, block_tables_ptr, seq, kv_head, pos, valid, keep, d, qk_scale,
    stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE: tl.constexpr, F32: tl.constexpr,
):
    """One online-softmax step: load the K and V rows of positions ``pos`` [TILE] through the table
    (masked by ``valid``), score them, keep the scores where ``keep`` (broadcast to [R, TILE]) holds,
    and fold the tile into (m, l_sum, acc). Decode and prefill differ only in ``keep``."""
    k = _load_kv_tile(k_cache_ptr, block_tables_ptr, seq, kv_head, pos, valid, d,
                      stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE)  # fmt: skip
    v = _load_kv_tile(v_cache_ptr, block_tables_ptr, seq, kv_head, pos, valid, d,
                      stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE)  # fmt: skip
    if F32:
        k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(keep, s * qk_scale, float("-inf"))  # [R, TILE]
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.exp2(m - m_new)  # rescale what was accumulated under the old max
    p = tl.exp2(s - m_new[:, None])
    l_sum = l_sum * alpha + tl.sum(p, axis=1)
    if F32:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_sum, acc


@triton.jit
def _decode_kernel(
    # unsplit: [num_seqs, num_heads, head_dim]; split: float32 [num_seqs, num_heads, num_splits, head_dim]
    out_ptr,
    lse_ptr,  # split only: float32 [num_seqs, num_heads, num_splits], log2-sum-exp of each partition
    q_ptr,  # [num_seqs, num_heads, head_dim]
    k_cache_ptr, v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables_ptr,  # int [num_seqs, max_blocks]
    context_lens_ptr,  # int [num_seqs], includes the query token
    qk_scale,  # softmax scale * log2(e)
    tiles_per_split,  # how many TILE-token tiles one split (partition) covers
    stride_qs, stride_qh,
    stride_os, stride_oh, stride_op,  # out strides (seq, head, split); head_dim stride is 1
    stride_bts,  # block_tables row stride
    stride_cb, stride_co, stride_ch,  # cache strides (block, offset, head)
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, SPLIT: tl.constexpr, F32: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    num_tiles = tl.cdiv(context_len, TILE)
    tile_start = split * tiles_per_split
    tile_end = tl.minimum(tile_start + tiles_per_split, num_tiles)

    g = tl.arange(0, GROUP_PAD)  # [GROUP_PAD] query heads of this KV head (padded to a power of two)
    g_mask = g < GROUP
    heads = kv_head * GROUP + g
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :], mask=g_mask[:, None],
                other=0.0)
    if F32:
        q = q.to(tl.float32)  # [GROUP_PAD, HEAD_DIM]
    else:
        q = q.to(k_cache_ptr.dtype.element_ty)  # half inputs: tensor-core dots, float32 accumulators

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)  # running max (log2 domain)
    l_sum = tl.zeros([GROUP_PAD], tl.float32)  # running sum of exp2(score - m)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)  # running sum of p @ V
    offs = tl.arange(0, TILE)
    for t in range(tile_start, tile_end):
        pos = t * TILE + offs  # [TILE] token positions
        valid = pos < context_len  # the last tile may run past the context: mask loads AND scores
        m, l_sum, acc = _attend_tile(q, m, l_sum, acc, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq,
                                     kv_head,
                                     pos, valid, valid[None, :], d, qk_scale,
                                     stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE,
                                     F32)  # fmt: skip

    out_off = seq * stride_os + heads[:, None] * stride_oh + d[None, :]
    if SPLIT:
        nonempty = l_sum > 0  # a split past this sequence's context saw nothing: weight 0 in the merge
        out = tl.where(nonempty[:, None], acc / tl.where(nonempty, l_sum, 1.0)[:, None], 0.0)
        tl.store(out_ptr + out_off + split * stride_op, out, mask=g_mask[:, None])
        lse = tl.where(nonempty, m + tl.log2(tl.where(nonempty, l_sum, 1.0)), float("-inf"))
        num_heads = tl.num_programs(1) * GROUP
        tl.store(lse_ptr + (seq * num_heads + heads) * tl.num_programs(2) + split, lse, mask=g_mask)
    else:
        out = acc / l_sum[:, None]
        tl.store(out_ptr + out_off, out.to(out_ptr.dtype.element_ty), mask=g_mask[:, None])


@triton.jit
def _merge_splits_kernel(
    out_ptr,  # [num_seqs, num_heads, head_dim]
    part_ptr,  # float32 [num_seqs, num_heads, num_splits, head_dim]: each split's normalized output
    lse_ptr,  # float32 [num_seqs, num_heads, num_splits]: each split's log2-sum-exp
    num_splits,
    stride_os, stride_oh,
    SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    """Flash-decoding merge: out = sum_i w_i * out_i with w_i = 2^(lse_i - lse_total)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    num_heads = tl.num_programs(1)
    i = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    mask = i < num_splits
    row = seq * num_heads + head
    lse = tl.load(lse_ptr + row * num_splits + i, mask=mask, other=float("-inf"))  # [SPLITS_PAD]
    w = tl.exp2(lse - tl.max(lse, axis=0))  # empty splits (lse = -inf) get weight 0
    w = w / tl.sum(w, axis=0)
    part = tl.load(part_ptr + (row * num_splits + i[:, None]) * HEAD_DIM + d[None, :], mask=mask[:, None],
                   other=0.0)
    out = tl.sum(w[:, None] * part, axis=0)  # [HEAD_DIM]
    tl.store(out_ptr + seq * stride_os + head * stride_oh + d, out.to(out_ptr.dtype.element_ty))


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale, num_splits=None):
    """Decode attention over the paged cache; see
    :func:`paged_lab.kernels.dispatch.paged_attention_decode`."""
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    # `out` is allocated contiguous, not empty_like(q): q may be a strided view, and the kernels write
    # `out` with head_dim stride 1.
    out = torch.empty((num_seqs, num_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out
    assert k_cache.stride(3) == 1 and v_cache.stride() == k_cache.stride(), (
        "cache head_dim must be contiguous")
    q = q if q.stride(2) == 1 else q.contiguous()
    block_tables, context_lens = block_tables.contiguous(), context_lens.contiguous()
    cc = device_cc(q.device)
    if num_splits is None:
        tile = tile_for(block_size, compute_in_f32(q.dtype, cc), cc)
        max_tokens = triton.cdiv(block_tables.shape[1] * block_size, tile) * tile
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_tokens, q.device)
    decode, merge, tiles_per_split = decode_launch(num_seqs, num_heads, num_kv_heads, head_dim, block_size,
                                                   block_tables.shape[1], q.dtype, cc,
                                                   num_splits)  # fmt: skip
    if merge is not None:
        num_splits = decode.grid[2]
        part = torch.empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        lse = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=q.device)
        dst, s_os, s_oh, s_op = part, part.stride(0), part.stride(1), part.stride(2)
    else:
        lse = out  # unused
        dst, s_os, s_oh, s_op = out, out.stride(0), out.stride(1), 0
    _decode_kernel[decode.grid](
        dst, lse, q, k_cache, v_cache, block_tables, context_lens,
        scale * LOG2E, tiles_per_split,
        q.stride(0), q.stride(1),
        s_os, s_oh, s_op,
        block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        **decode.constexprs, **decode.options,
    )  # fmt: skip
    if merge is not None:
        _merge_splits_kernel[merge.grid](
            out, part, lse, num_splits, out.stride(0), out.stride(1), **merge.constexprs, **merge.options,
        )  # fmt: skip
    return out


# --------------------------------------------------------------------------------------- prefill
@triton.jit
def _prefill_kernel(
    out_ptr,  # [num_tokens, num_heads, head_dim]
    q_ptr,  # [num_tokens, num_heads, head_dim], all sequences' query tokens concatenated
    k_cache_ptr, v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables_ptr,  # int [num_seqs, max_blocks]
    context_lens_ptr,  # int [num_seqs], includes the query tokens
    query_start_loc_ptr,  # int [num_seqs + 1]
    qk_scale,  # softmax scale * log2(e)
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_bts,
    stride_cb, stride_co, stride_ch,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, F32: tl.constexpr,
):
    """One program per (sequence, tile of BLOCK_Q query tokens, KV head); rows = query token x GQA head."""
    seq = tl.program_id(0)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if q_tile * BLOCK_Q >= q_len:  # this sequence has fewer query tokens than the longest one
        return
    context_len = tl.load(context_lens_ptr + seq)
    # position of the first query token (a cached prefix / earlier chunks before it)
    first_pos = context_len - q_len

    r = tl.arange(0, BLOCK_Q * GROUP_PAD)  # [M] rows: query token qi = r // GROUP_PAD, head g = r % GROUP_PAD
    qi = q_tile * BLOCK_Q + r // GROUP_PAD
    g = r % GROUP_PAD
    row_mask = (qi < q_len) & (g < GROUP)
    q_pos = first_pos + qi  # [M] absolute position of each row's query token
    d = tl.arange(0, HEAD_DIM)
    row_off = (q_start + qi) * stride_qt + (kv_head * GROUP + g) * stride_qh
    q = tl.load(q_ptr + row_off[:, None] + d[None, :], mask=row_mask[:, None], other=0.0)
    if F32:
        q = q.to(tl.float32)  # [M, HEAD_DIM]
    else:
        q = q.to(k_cache_ptr.dtype.element_ty)

    m = tl.full([BLOCK_Q * GROUP_PAD], float("-inf"), tl.float32)
    l_sum = tl.zeros([BLOCK_Q * GROUP_PAD], tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_PAD, HEAD_DIM], tl.float32)
    # Causal: the last query token of this tile sees positions < end; nothing later is read.
    end = tl.minimum(first_pos + (q_tile + 1) * BLOCK_Q, context_len)
    offs = tl.arange(0, TILE)
    for t in range(0, tl.cdiv(end, TILE)):
        pos = t * TILE + offs  # [TILE]
        valid = pos < end
        causal = valid[None, :] & (pos[None, :] <= q_pos[:, None])  # [M, TILE]
        # position 0 is in the first tile, so m is finite from then on
        m, l_sum, acc = _attend_tile(q, m, l_sum, acc, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq,
                                     kv_head,
                                     pos, valid, causal, d, qk_scale,
                                     stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE,
                                     F32)  # fmt: skip

    out = acc / tl.where(row_mask, l_sum, 1.0)[:, None]
    out_off = (q_start + qi) * stride_ot + (kv_head * GROUP + g) * stride_oh
    tl.store(out_ptr + out_off[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None])


def paged_attention_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale,
                            max_query_len=None):  # fmt: skip
    """Causal (chunked) prefill over the paged cache; see
    :func:`paged_lab.kernels.dispatch.paged_attention_prefill`.

    ``max_query_len`` sizes the grid; when None it is read from ``query_start_loc`` (one device sync).
    """
    num_tokens, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    # contiguous, as in decode
    out = torch.empty((num_tokens, num_heads, head_dim), dtype=q.dtype, device=q.device)
    num_seqs = query_start_loc.shape[0] - 1
    if num_tokens == 0 or num_seqs == 0:
        return out
    assert k_cache.stride(3) == 1 and v_cache.stride() == k_cache.stride(), (
        "cache head_dim must be contiguous")
    q = q if q.stride(2) == 1 else q.contiguous()
    block_tables, context_lens = block_tables.contiguous(), context_lens.contiguous()
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    launch = prefill_launch(num_seqs, max_query_len, num_heads, num_kv_heads, head_dim, block_size, q.dtype,
                            device_cc(q.device))  # fmt: skip
    _prefill_kernel[launch.grid](
        out, q, k_cache, v_cache, block_tables, context_lens, query_start_loc,
        scale * LOG2E,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        block_tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        **launch.constexprs, **launch.options,
    )  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------- checks
def unsupported_reason(dtype, device) -> str | None:
    """Why the kernels must not run on ``device`` (a GPU older than sm_75), or None when they can."""
    cc = device_cc(device)
    if cc is not None and cc < MIN_CC:
        return (f"GPU {torch.cuda.get_device_name(device)} (sm_{cc}): the Triton kernels are compiled and "
                f"checked for sm_{MIN_CC} (T4) and newer")  # fmt: skip
    return None


def is_interpreted() -> bool:
    """Were these kernels decorated under Triton's interpreter (TRITON_INTERPRET=1)?"""
    return not isinstance(_decode_kernel, triton.runtime.JITFunction)


def triton_lang_interpreted() -> bool:
    """Were triton's own jit helpers (``tl.cdiv``, ``tl.sum``...) decorated under the interpreter too?"""
    return not isinstance(tl.cdiv, triton.runtime.JITFunction)
