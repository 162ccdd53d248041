"""Paged attention in Triton: store_kv, decode (with split-KV flash-decoding) and prefill (notebook 06).

Top to bottom: the sizes the kernels support, how a launch is sized, each kernel with its launcher, and a
check against :mod:`~paged_lab.kernels.reference` (``python -m paged_lab.kernels.triton_paged``; with no
CUDA GPU, import the kernels through ``_interpret.load_kernels``: Triton's interpreter). The launchers have
every backend's signatures and trust checked arguments; no fp8 cache, no window: scales, ``sliding_window``
and ``plan`` go unused.

The kernels walk a sequence's context in tiles of ``TILE`` positions and look each position's block up in
the table; positions at or past ``context_len`` are masked on the loads (``other=0``: NaN in unused slots is
never read) and on the scores (``-inf``). One program serves one KV head and its whole GQA group, padded to
a power of two for ``tl.arange``, so each K/V tile is loaded once per group. The softmax is online (running
max ``m``, sum ``l_sum``) in base 2: scores are pre-multiplied by ``scale * log2(e)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from paged_lab.kernels.quant import is_quantized

LOG2E = 1.4426950408889634

# ------------------------------------------------------------------------------ what the kernels take
TRITON_BLOCK_SIZES = (8, 16, 32, 64, 128, 256)  # what the kernels are written and tested for
TRITON_HEAD_DIMS = (64, 128)
MIN_CC = 75  # compute capability (10 * major + minor); older GPUs (V100 = sm_70 ...) are refused
INTERPRETER_CC = 80  # under the interpreter (cc None) tiles are chosen as for an A100


def unsupported(k_cache, v_cache, q=None) -> str | None:
    """Why these kernels cannot take this cache, or None when they can (the dispatch asks this)."""
    block_size, head_dim, dtype = k_cache.shape[1], k_cache.shape[3], k_cache.dtype
    if is_quantized(dtype):
        return (f"a {str(dtype).removeprefix('torch.')} cache (the Triton kernels read float caches; "
                f"the torch backend dequantizes fp8)")
    if block_size not in TRITON_BLOCK_SIZES:
        return f"block_size {block_size} (the Triton kernels support {TRITON_BLOCK_SIZES})"
    if head_dim not in TRITON_HEAD_DIMS:
        return f"head_dim {head_dim} (the Triton kernels support {TRITON_HEAD_DIMS})"
    if k_cache.stride(3) != 1 or v_cache.stride() != k_cache.stride():
        return (f"cache strides k {k_cache.stride()} / v {v_cache.stride()} (the Triton kernels need "
                f"head_dim contiguous and both caches laid out alike; pass .contiguous() caches)")
    return unsupported_reason(dtype, k_cache.device)


def unsupported_reason(dtype, device) -> str | None:
    """Why the kernels must not run on ``device`` (a GPU older than sm_75), or None when they can."""
    cc = device_cc(device)
    if cc is not None and cc < MIN_CC:
        return (f"GPU {torch.cuda.get_device_name(device)} (sm_{cc}): the Triton kernels are compiled and "
                f"checked for sm_{MIN_CC} (T4) and newer")  # fmt: skip
    return None


# ------------------------------------------------------------------------------ how a launch is sized
# A launch (grid, constexprs, num_warps) is a pure function of the shapes and the GPU's compute capability,
# so ``paged_lab.tools.aot`` compiles the very launches the launchers make for sm_75 to sm_90 without a GPU.
@dataclass(frozen=True)
class Launch:
    """How one kernel is launched: ``kernel[grid](*args, **constexprs, **options)``."""

    grid: tuple
    constexprs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)  # num_warps...: compile options, also given to triton.compile


def device_cc(device) -> int | None:
    """Compute capability as 10 * major + minor (75 for a T4, 90 for an H100), None off CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def compute_in_f32(dtype, cc: int | None) -> bool:
    """Upcast K/V tiles to float32 and use IEEE fp32 dots? fp32 inputs: yes (not TF32). fp16: no,
    native tensor-core dots. bf16: native on sm_80 and newer; sm_75 (T4) has no bf16 tensor cores,
    and the interpreter (cc None) does bf16 arithmetic on raw bits, so there the tiles are upcast."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and (cc is None or cc < 80))


def tile_for(block_size: int, f32: bool, cc: int | None) -> int:
    """TILE, the positions one loop step reads: ``block_size`` clamped to [16 (``tl.dot``), the largest that
    fits]. fp32 tiles of 64 positions x head_dim 128 need more shared memory than a T4 (64 KiB) or an sm_86
    (99 KiB) has, and spill registers on sm_90: 32 fits all. Half tiles: 64 from sm_80 up, 32 on sm_75."""
    return min(max(block_size, 16), 32 if f32 or (cc or INTERPRETER_CC) < 80 else 64)


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


def store_kv_launch(num_tokens: int, num_kv_heads: int, head_dim: int, block_size: int) -> Launch:
    consts = dict(NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads),
                  HEAD_DIM=head_dim, BLOCK_SIZE=block_size)  # fmt: skip
    return Launch((num_tokens,), consts, dict(num_warps=4))


def store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale: float = 1.0, v_scale: float = 1.0, *, plan=None):
    """Write ``k, v [num_tokens, num_kv_heads, head_dim]`` into slots ``slot_mapping`` of the cache."""
    k, v = k.contiguous(), v.contiguous()
    launch = store_kv_launch(*k.shape, k_cache.shape[1])
    _store_kv_kernel[launch.grid](k, v, k_cache, v_cache, slot_mapping, k.stride(0), k.stride(1),
                                  *k_cache.stride()[:3], **launch.constexprs, **launch.options)


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
    seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
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
    # [GROUP_PAD, HEAD_DIM]; half inputs stay half: tensor-core dots, float32 accumulators
    q = q.to(tl.float32) if F32 else q.to(k_cache_ptr.dtype.element_ty)

    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)  # running max (log2 domain)
    l_sum = tl.zeros([GROUP_PAD], tl.float32)  # running sum of exp2(score - m)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)  # running sum of p @ V
    offs = tl.arange(0, TILE)
    for t in range(tile_start, tile_end):
        pos = t * TILE + offs  # [TILE] token positions
        valid = pos < context_len  # the last tile may run past the context: mask loads AND scores
        m, l_sum, acc = _attend_tile(q, m, l_sum, acc, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq,
                                     kv_head, pos, valid, valid[None, :], d, qk_scale,
                                     stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE, F32)

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
    num_splits, stride_os, stride_oh,
    SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    """Flash-decoding merge: out = sum_i w_i * out_i with w_i = 2^(lse_i - lse_total)."""
    seq, head, num_heads = tl.program_id(0), tl.program_id(1), tl.num_programs(1)
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


def decode_launch(num_seqs, num_heads, num_kv_heads, head_dim, block_size, max_blocks, dtype, cc,
                  num_splits=1) -> tuple[Launch, Launch | None, int]:  # fmt: skip
    """-> (decode, merge or None, tiles_per_split). ``max_blocks`` is the block table's width; the
    longest context is bounded by it, so no device sync is needed to read ``context_lens``."""
    f32 = compute_in_f32(dtype, cc)
    tile = tile_for(block_size, f32, cc)
    max_tiles = triton.cdiv(max_blocks * block_size, tile)
    num_splits = max(1, min(num_splits, max_tiles))
    tiles_per_split = triton.cdiv(max_tiles, num_splits)
    num_splits = triton.cdiv(max_tiles, tiles_per_split)  # drop splits that would always be empty
    group = num_heads // num_kv_heads
    consts = dict(GROUP=group, GROUP_PAD=max(triton.next_power_of_2(group), 16), HEAD_DIM=head_dim,
                  BLOCK_SIZE=block_size, TILE=tile, SPLIT=num_splits > 1, F32=f32)  # fmt: skip
    decode = Launch((num_seqs, num_kv_heads, num_splits), consts, dict(num_warps=4))
    if num_splits == 1:
        return decode, None, tiles_per_split
    merge = Launch((num_seqs, num_heads), dict(SPLITS_PAD=triton.next_power_of_2(num_splits),
                                               HEAD_DIM=head_dim), dict(num_warps=4))
    return decode, merge, tiles_per_split


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_tokens: int, device) -> int:
    """Split the context only when too few (seq, KV head) programs would leave SMs idle: partitions of
    at least 512 tokens (the merge stays cheap), aiming at ~4 programs per SM (a memory-bound kernel needs
    several in flight). A heuristic, not tuned on hardware yet. On CPU it never splits."""
    if device.type != "cuda":
        return 1
    target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    programs = num_seqs * num_kv_heads
    if programs >= target or max_tokens < 1024:
        return 1
    return max(1, min(math.ceil(target / programs), max_tokens // 512, 64))


def _contiguous(q, block_tables, context_lens):  # what the kernels index with unit strides
    return q if q.stride(2) == 1 else q.contiguous(), block_tables.contiguous(), context_lens.contiguous()


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale, k_scale: float = 1.0,
                           v_scale: float = 1.0, sliding_window=None, *, plan=None, num_splits=None):
    """Decode attention over the paged cache (``dispatch.paged_attention_decode``)."""
    (num_seqs, num_heads, head_dim), block_size, num_kv_heads = q.shape, k_cache.shape[1], k_cache.shape[2]
    # contiguous, not empty_like(q): q may be a strided view, and the kernels write head_dim stride 1
    out = torch.empty((num_seqs, num_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out
    q, block_tables, context_lens = _contiguous(q, block_tables, context_lens)
    cc = device_cc(q.device)
    if num_splits is None:
        tile = tile_for(block_size, compute_in_f32(q.dtype, cc), cc)
        max_tokens = triton.cdiv(block_tables.shape[1] * block_size, tile) * tile
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_tokens, q.device)
    decode, merge, tiles_per_split = decode_launch(num_seqs, num_heads, num_kv_heads, head_dim, block_size,
                                                   block_tables.shape[1], q.dtype, cc, num_splits)
    dst, lse, out_strides = out, out, (out.stride(0), out.stride(1), 0)  # unsplit: lse unused
    if merge is not None:  # each split writes its partial output and log-sum-exp; the merge combines them
        num_splits = decode.grid[2]
        dst = torch.empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        lse = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=q.device)
        out_strides = dst.stride()[:3]
    _decode_kernel[decode.grid](dst, lse, q, k_cache, v_cache, block_tables, context_lens, scale * LOG2E,
                                tiles_per_split, q.stride(0), q.stride(1), *out_strides,
                                block_tables.stride(0), *k_cache.stride()[:3], **decode.constexprs,
                                **decode.options)
    if merge is not None:
        _merge_splits_kernel[merge.grid](out, dst, lse, num_splits, out.stride(0), out.stride(1),
                                         **merge.constexprs, **merge.options)
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
    stride_qt, stride_qh, stride_ot, stride_oh, stride_bts, stride_cb, stride_co, stride_ch,  # as in decode
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, F32: tl.constexpr,
):
    """One program per (sequence, tile of BLOCK_Q query tokens, KV head); rows = query token x GQA head."""
    seq, q_tile, kv_head = tl.program_id(0), tl.program_id(1), tl.program_id(2)
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
    q = q.to(tl.float32) if F32 else q.to(k_cache_ptr.dtype.element_ty)  # [M, HEAD_DIM], as in decode

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
                                     kv_head, pos, valid, causal, d, qk_scale,
                                     stride_bts, stride_cb, stride_co, stride_ch, BLOCK_SIZE, F32)

    out = acc / tl.where(row_mask, l_sum, 1.0)[:, None]
    out_off = (q_start + qi) * stride_ot + (kv_head * GROUP + g) * stride_oh
    tl.store(out_ptr + out_off[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None])


def prefill_launch(num_seqs, max_query_len, num_heads, num_kv_heads, head_dim, block_size, dtype,
                   cc) -> Launch:
    f32 = compute_in_f32(dtype, cc)
    group = num_heads // num_kv_heads
    group_pad = triton.next_power_of_2(group)
    # Rows (query tokens x GQA heads) per program: its q and accumulator, [rows, head_dim] each, live in
    # registers, so rows x head_dim is bounded: 4,096 for half dots from sm_80 up, 2,048 for fp32 tiles and
    # on sm_75 (spills otherwise). Never under 16 rows (tl.dot); fewer query tokens for short queries.
    rows = max((2048 if f32 or (cc or INTERPRETER_CC) < 80 else 4096) // head_dim, 16)
    block_q = min(max(rows // group_pad, 1), max(triton.next_power_of_2(max_query_len), 16 // group_pad, 1))
    consts = dict(GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
                  TILE=tile_for(block_size, f32, cc), F32=f32)  # fmt: skip
    # head_dim 128: eight warps share the [rows, 128] q and accumulator (with four, ptxas spills 0.5-3 KB)
    num_warps = 8 if head_dim >= 128 else 4
    grid = (num_seqs, triton.cdiv(max_query_len, block_q), num_kv_heads)
    return Launch(grid, consts, dict(num_warps=num_warps))


def paged_attention_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale,
                            k_scale: float = 1.0, v_scale: float = 1.0, sliding_window=None, *, plan=None,
                            max_query_len=None):  # fmt: skip
    """Causal (chunked) prefill over the paged cache (``dispatch.paged_attention_prefill``).
    ``max_query_len`` sizes the grid; when None it is read from ``query_start_loc`` (one device sync)."""
    (num_tokens, num_heads, head_dim), block_size, num_kv_heads = q.shape, k_cache.shape[1], k_cache.shape[2]
    out = torch.empty((num_tokens, num_heads, head_dim), dtype=q.dtype, device=q.device)  # as in decode
    num_seqs = query_start_loc.shape[0] - 1
    if num_tokens == 0 or num_seqs == 0:
        return out
    q, block_tables, context_lens = _contiguous(q, block_tables, context_lens)
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    launch = prefill_launch(num_seqs, max_query_len, num_heads, num_kv_heads, head_dim, block_size, q.dtype,
                            device_cc(q.device))  # fmt: skip
    _prefill_kernel[launch.grid](out, q, k_cache, v_cache, block_tables, context_lens, query_start_loc,
                                 scale * LOG2E, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
                                 block_tables.stride(0), *k_cache.stride()[:3], **launch.constexprs,
                                 **launch.options)
    return out


# ---------------------------------------------------------------------- the check against the reference
def check_against_reference(device, dtype=torch.float32, seed: int = 0) -> dict[str, float]:
    """Each kernel against :mod:`~paged_lab.kernels.reference` on SmolLM2's attention (9 query heads over 3
    KV heads, head_dim 64), three sequences with partly filled last blocks and NaN in the unused slots ->
    the largest absolute difference of each (store_kv: in the caches it wrote)."""
    from paged_lab.kernels import reference
    from paged_lab.kernels.synthetic import random_paged_kv

    kv = random_paged_kv([5, 33, 70], 16, 3, 64, dtype=dtype, device=device, table_pad=-1, seed=seed)
    q, chunk = (torch.randn(n, 9, 64, generator=torch.Generator().manual_seed(seed + n)).to(device, dtype)
                for n in (3, 9))
    args = (kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens)
    qsl = torch.tensor([0, 2, 2, 9], dtype=torch.int32, device=device)  # queries of 2, 0 and 7 tokens
    want = reference.paged_attention_decode(q, *args, 0.125)
    err = {f"decode, {n} split(s)": diff(paged_attention_decode(q, *args, 0.125, num_splits=n), want)
           for n in (1, 3)}
    err["prefill"] = diff(paged_attention_prefill(chunk, *args, qsl, 0.125),
                          reference.paged_attention_prefill(chunk, *args, qsl, 0.125))
    mine, ref = [(kv.k_cache.clone(), kv.v_cache.clone()) for _ in range(2)]
    slots = kv.block_tables[:, 0].long() * 16 + 15  # the last slot of each first block
    store_kv(q[:, :3], q[:, 3:6], *mine, slots)
    reference.store_kv(q[:, :3], q[:, 3:6], *ref, slots)
    return err | {"store_kv": max(diff(a, b) for a, b in zip(mine, ref))}


def diff(a, b) -> float:  # the largest absolute difference
    return (a.float() - b.float()).nan_to_num(0.0).abs().max().item()


if __name__ == "__main__":
    device, tol = "cuda" if torch.cuda.is_available() else "cpu", {torch.float32: 1e-4, torch.bfloat16: 3e-2}
    errors = {(name, dtype): e for dtype in tol for name, e in check_against_reference(device, dtype).items()}
    for (name, dtype), e in errors.items():
        print(f"{'ok' if e <= tol[dtype] else 'FAIL':<5}{name:<20}{dtype!s:<16}max |diff| {e:.1e} ({device})")
    raise SystemExit(0 if all(e <= tol[dtype] for (_, dtype), e in errors.items()) else 1)
