"""Random paged caches with a known contiguous truth: for tests, notebook 06 and the benchmark.

``random_paged_kv`` scatters each sequence's K/V over shuffled, non-contiguous physical blocks
(the way a BlockManager hands them out after some churn) and keeps the contiguous copies, so a
check can compare "attention through the table" with "attention on the contiguous tensor".
Slots that hold no token are filled with ``fill_unused`` (NaN by default): a kernel that reads
past ``context_len`` poisons its output and fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paged_lab.kernels import reference
from paged_lab.kv_math import cdiv


@dataclass
class PagedKV:
    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks]
    context_lens: torch.Tensor  # int32 [num_seqs]
    keys: list[torch.Tensor]  # per sequence, contiguous [context_len, num_kv_heads, head_dim]
    values: list[torch.Tensor]

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]


def random_paged_kv(
    context_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype=torch.float32,
    device="cpu",
    extra_blocks: int = 2,
    shuffle: bool = True,
    fill_unused: float = float("nan"),
    table_pad: int = 0,
    seed: int = 0,
) -> PagedKV:
    """Build a paged cache holding random K/V for sequences of the given ``context_lens``.

    ``extra_blocks`` free blocks stay in the pool (filled with ``fill_unused``); ``table_pad`` fills
    the unused tail of each block-table row (the kernels must never read it).
    """
    g = torch.Generator().manual_seed(seed)
    need = [cdiv(n, block_size) for n in context_lens]  # blocks per sequence, last one maybe partial
    num_blocks = sum(need) + extra_blocks
    order = torch.randperm(num_blocks, generator=g) if shuffle else torch.arange(num_blocks)
    max_blocks = max([1, *need])
    tables = torch.full((len(context_lens), max_blocks), table_pad, dtype=torch.int32)
    k_cache = torch.full((num_blocks, block_size, num_kv_heads, head_dim), fill_unused, dtype=dtype)
    v_cache = torch.full_like(k_cache, fill_unused)
    keys, values, used = [], [], 0
    for i, (n, nb) in enumerate(zip(context_lens, need)):
        blocks = order[used : used + nb]
        used += nb
        tables[i, :nb] = blocks.to(torch.int32)
        k = torch.randn(n, num_kv_heads, head_dim, generator=g).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=g).to(dtype)
        pos = torch.arange(n)
        # slot = block * block_size + offset
        slots = blocks[pos // block_size] * block_size + pos % block_size
        reference.store_kv(k, v, k_cache, v_cache, slots)
        keys.append(k.to(device))
        values.append(v.to(device))
    return PagedKV(
        k_cache.to(device),
        v_cache.to(device),
        tables.to(device),
        torch.tensor(context_lens, dtype=torch.int32, device=device),
        keys,
        values,
    )


def contiguous_attention(q, k, v, scale: float, causal_offset: int | None = None):
    """Attention of one sequence on contiguous K/V, via torch SDPA (independent of the paged code).

    q: ``[num_q, num_heads, head_dim]``; k, v: ``[ctx, num_kv_heads, head_dim]``; float32 result.
    """
    group = q.shape[1] // k.shape[1]
    qh = q.float().transpose(0, 1)  # [H, num_q, d]
    kh = k.float().repeat_interleave(group, dim=1).transpose(0, 1)  # [H, ctx, d]
    vh = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
    mask = None
    if causal_offset is not None:
        q_pos = causal_offset + torch.arange(q.shape[0], device=q.device)[:, None]
        mask = torch.arange(k.shape[0], device=q.device)[None, :] <= q_pos  # [num_q, ctx]
    o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
    return o.transpose(0, 1)  # [num_q, H, d]
