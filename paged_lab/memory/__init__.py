"""Paged KV-cache memory: a block pool, block tables, copy-on-write, prefix caching, an event log;
and the contiguous allocator it replaces (one reservation per request, notebook 02). The Scheduler drives
either through one interface, ``KVCacheAllocator`` (``allocator.py``).

    from paged_lab.memory import BlockManager
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    table = bm.allocate("req-0", prompt_token_ids)   # physical block ids, in logical order
    cow = bm.append_token("req-0", next_token)       # None, or CowAction(src, dst) to copy KV
    bm.free("req-0")
"""

from paged_lab.memory.allocator import KVCacheAllocator
from paged_lab.memory.block_manager import BlockManager, CowAction
from paged_lab.memory.block_pool import BlockPool
from paged_lab.memory.contiguous import ContiguousAllocator
from paged_lab.memory.errors import (
    BlockManagerError,
    DuplicateSequence,
    InvalidArgument,
    InvalidBlockConfig,
    InvalidTokenId,
    OutOfBlocks,
    UnknownSequence,
)
from paged_lab.memory.events import KINDS, BlockManagerStats, Event, PoolState, replay
from paged_lab.memory.prefix_cache import block_hashes, hash_block

__all__ = [
    "KVCacheAllocator", "BlockManager", "BlockManagerStats", "CowAction", "BlockPool", "ContiguousAllocator",
    "BlockManagerError", "DuplicateSequence", "InvalidArgument", "InvalidBlockConfig", "InvalidTokenId",
    "OutOfBlocks",
    "UnknownSequence", "KINDS", "Event", "PoolState", "replay", "block_hashes", "hash_block",
]
