"""How the Triton kernels of :mod:`paged_lab.kernels.triton_paged` are launched, per GPU target.

A launch is a grid (how many programs, over which axes), the constexprs each program is compiled with
(``TILE``, ``GROUP_PAD``, ``BLOCK_Q``, ``F32``...) and compile options (``num_warps``). They come from the
pure functions :func:`store_kv_launch`, :func:`decode_launch` and :func:`prefill_launch`, which take the
GPU's compute capability as an argument. The wrappers in ``triton_paged`` call them with the real
device's; ``paged_lab.tools.aot`` (run by ``tests/test_kernels_triton.py``) calls the same functions for
sm_75, sm_80, sm_86 and sm_90 and compiles what they return, without a GPU, and checks the registers,
spills and shared memory the compiler reports (the table is in ``docs/benchmarks.md``). No figure about
GPU *speed* comes from that: it was not measured on a GPU.

Why the sizes are what they are: ``TILE`` (token positions per loop step) is ``block_size`` clamped to
[16, :func:`max_tile`]: at least 16 because ``tl.dot`` needs it, at most 32 or 64 to bound shared memory
and registers. A prefill program holds :func:`prefill_rows` rows (query tokens x GQA heads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import triton

# Compute capabilities (10 * major + minor) the kernels are compiled for in the tests, and the shared
# memory one block may use there (CUDA's opt-in maximum per block): T4 (sm_75) 64 KiB; A100 (sm_80)
# 163 KiB; RTX 30xx/A10 (sm_86) and RTX 40xx/L4/L40 (sm_89) 99 KiB; H100/H200 (sm_90) 227 KiB.
SMEM_PER_BLOCK = {75: 65536, 80: 166912, 86: 101376, 89: 101376, 90: 232448}
MIN_CC = 75  # older GPUs (V100 = sm_70 ...) are not checked: the dispatch refuses them
INTERPRETER_CC = 80  # under the interpreter (cc None) tiles are chosen as for an A100


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
    if dtype == torch.float32:
        return True
    return dtype == torch.bfloat16 and (cc is None or cc < 80)


def max_tile(f32: bool, cc: int | None) -> int:
    """Largest TILE (token positions per loop step). fp32 K and V tiles take twice the bytes of half
    ones: at 64 positions x head_dim 128 they need more shared memory than a T4 (64 KiB) or an sm_86
    (99 KiB) has, and spill registers on sm_90; 32 fits all. Half tiles: 64 from sm_80 up; 32 on sm_75."""
    if f32 or (cc or INTERPRETER_CC) < 80:
        return 32
    return 64


def tile_for(block_size: int, f32: bool, cc: int | None) -> int:
    return min(max(block_size, 16), max_tile(f32, cc))


def prefill_rows(f32: bool, cc: int | None, head_dim: int) -> int:
    """Rows (query tokens x GQA heads) one prefill program holds. Its q and accumulator live in
    registers, [rows, head_dim] each, so rows x head_dim is bounded: 4,096 for half dots from sm_80 up
    (64 rows at head_dim 64, 32 at 128), 2,048 for fp32 tiles and on sm_75 (spills otherwise, up to
    8.8 KB per thread on sm_90 before this limit). Never under 16 (``tl.dot``)."""
    budget = 2048 if f32 or (cc or INTERPRETER_CC) < 80 else 4096
    return max(budget // head_dim, 16)


def store_kv_launch(num_tokens: int, num_kv_heads: int, head_dim: int, block_size: int) -> Launch:
    consts = dict(NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads),
                  HEAD_DIM=head_dim, BLOCK_SIZE=block_size)  # fmt: skip
    return Launch((num_tokens,), consts, dict(num_warps=4))


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
    merge = Launch((num_seqs, num_heads),
                   dict(SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim),
                   dict(num_warps=4))  # fmt: skip
    return decode, merge, tiles_per_split


def prefill_launch(num_seqs, max_query_len, num_heads, num_kv_heads, head_dim, block_size, dtype,
                   cc) -> Launch:
    f32 = compute_in_f32(dtype, cc)
    group = num_heads // num_kv_heads
    group_pad = triton.next_power_of_2(group)
    rows = prefill_rows(f32, cc, head_dim)
    # rows per program = block_q * group_pad: `rows`, never under 16 (tl.dot), fewer for short queries
    block_q = min(max(rows // group_pad, 1), max(triton.next_power_of_2(max_query_len), 16 // group_pad, 1))
    consts = dict(GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
                  TILE=tile_for(block_size, f32, cc), F32=f32)  # fmt: skip
    # head_dim 128: eight warps share the [rows, 128] q and accumulator (with four, ptxas spills 0.5-3 KB)
    num_warps = 8 if head_dim >= 128 else 4
    grid = (num_seqs, triton.cdiv(max_query_len, block_q), num_kv_heads)
    return Launch(grid, consts, dict(num_warps=num_warps))


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_tokens: int, device) -> int:
    """Split the context only when there are too few (seq, KV head) programs to keep the GPU busy.

    A long context read by few programs leaves SMs idle (and a memory-bound kernel needs several
    programs per SM in flight to hide latency); splitting it into partitions of at least 512 tokens
    (so the merge stays cheap) aims at ~4 programs per SM. A heuristic, not tuned on hardware yet.
    On CPU it never splits.
    """
    if device.type != "cuda":
        return 1
    target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    programs = num_seqs * num_kv_heads
    if programs >= target or max_tokens < 1024:
        return 1
    return max(1, min(math.ceil(target / programs), max_tokens // 512, 64))
