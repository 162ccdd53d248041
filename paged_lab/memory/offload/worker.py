"""The tier's K/V: CPU tensors beside the paged pool, and the copies the connector asks for each step.

vLLM's worker side (``vllm/v1/kv_offload/cpu/gpu_worker.py``, a GPU<->CPU copy kernel on CUDA streams)
needs a GPU; here the pool is already in CPU memory, so a copy is one indexed tensor assignment per step.
The tier holds whole blocks of every layer: ``tier[i]`` is ``[num_tensors, 2, block_size, kv_heads,
head_dim]``, the same numbers as ``kv.data[:, :, b]`` of the GPU block ``b`` it came from.

``kv_offloading_size`` is in GiB, as vLLM's ``CacheConfig.kv_offloading_size``; vLLM's CPU spec rounds each
block up to whole 4 KiB pages (``CPUOffloadingSpec``: ``round_up(kv_bytes_per_chunk, mmap.PAGESIZE)``), so the
tier holds ``int(GiB * 2**30) // round_up(bytes_per_block, 4096)`` blocks.
"""

from __future__ import annotations

import math
import os

import torch

from paged_lab.memory.offload.connector import OffloadingConnector, OffloadMeta, Transfer
from paged_lab.memory.offload.manager import CPUOffloadingManager

PAGE = 4096  # vLLM: mmap.PAGESIZE (SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT)


def check_tier_size(kv_offloading_size, smallest: float = 0.0) -> None:
    """ValueError naming ``kv_offloading_size`` unless it is a number of GiB above ``smallest`` (one block)
    and within this machine's memory."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    if isinstance(kv_offloading_size, bool) or not isinstance(kv_offloading_size, (int, float)) \
            or not math.isfinite(kv_offloading_size) or kv_offloading_size <= 0 \
            or kv_offloading_size < smallest:
        limit = f">= {smallest:.6g} (one block of all layers' K and V)" if smallest else "> 0"
        raise ValueError(f"kv_offloading_size must be a number of GiB {limit}, got {kv_offloading_size!r}")
    if kv_offloading_size > ram:
        raise ValueError(f"kv_offloading_size={kv_offloading_size} GiB is more than this machine's memory "
                         f"({ram:.1f} GiB); the tier lives in CPU memory")


def tier_num_blocks(kv_offloading_size, bytes_per_block: int) -> int:
    """Blocks a ``kv_offloading_size`` GiB tier holds; ValueError naming the argument and its limits."""
    page_bytes = -(-bytes_per_block // PAGE) * PAGE
    check_tier_size(kv_offloading_size, smallest=page_bytes / 2**30)
    return int(kv_offloading_size * 2**30) // page_bytes


class OffloadTier:
    """The connector (scheduler side) and the tier's tensors (worker side) of one engine."""

    def __init__(self, kv, kv_offloading_size):
        block = kv.data[:, :, 0]  # one block of every tensor: [num_tensors, 2, block_size, heads, head_dim]
        self.bytes_per_block = block.numel() * block.element_size()
        self.num_blocks = tier_num_blocks(kv_offloading_size, self.bytes_per_block)
        self.size_gib = kv_offloading_size
        self.kv = kv
        self.data = torch.zeros((self.num_blocks, *block.shape), dtype=kv.data.dtype)  # CPU memory
        self.connector = OffloadingConnector(CPUOffloadingManager(self.num_blocks), kv.block_size)

    @property
    def bytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def before_forward(self, meta: OffloadMeta | None) -> None:
        """Finished requests' stores (their freed blocks are intact until this step writes), then loads."""
        if meta is not None:
            self._copy([t for t in meta.stores if t.before_forward] + meta.loads)

    def after_forward(self, meta: OffloadMeta | None) -> None:
        """The stores of blocks this step computed."""
        if meta is not None:
            self._copy([t for t in meta.stores if not t.before_forward])

    def _copy(self, transfers: list[Transfer]) -> None:
        for t in transfers:
            gpu = torch.tensor(t.gpu_block_ids, device=self.kv.data.device)
            tier = torch.tensor(t.tier_block_ids)
            if t.is_store:  # pool -> tier: [n, num_tensors, 2, block_size, heads, head_dim]
                self.data[tier] = self.kv.data[:, :, gpu].permute(2, 0, 1, 3, 4, 5).to("cpu")
            else:  # tier -> pool, through the request's block table
                self.kv.data[:, :, gpu] = self.data[tier].permute(1, 2, 0, 3, 4, 5).to(self.kv.data.device)

    def drain(self, allocator) -> None:
        """Between calls: the last offers of finished requests, and every transfer marked done (vLLM keeps
        stepping while the connector has work, ``has_pending_push_work``)."""
        meta = self.connector.build_connector_meta([], allocator)
        self.before_forward(meta)
        self.connector.update_connector_output(meta)
        self.connector.flush()

    def stats(self) -> dict:
        c = self.connector
        return {"kv_offloading_size": self.size_gib, "kv_offloading_blocks": self.num_blocks,
                "kv_offloading_bytes": self.bytes, "kv_offloading_used_blocks": c.manager.num_used_blocks,
                "kv_offloading_loaded_blocks": c.num_loaded_blocks,
                "kv_offloading_stored_blocks": c.num_stored_blocks,
                "kv_offloading_evictions": c.manager.num_evictions,
                "external_prefix_cache_queries": c.external_prefix_cache_queries,
                "external_prefix_cache_hits": c.external_prefix_cache_hits,
                "vllm:external_prefix_cache_queries": c.external_prefix_cache_queries,
                "vllm:external_prefix_cache_hits": c.external_prefix_cache_hits}
