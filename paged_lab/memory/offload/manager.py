"""The second tier's bookkeeping: which block hashes sit in CPU memory, and which one leaves first.

vLLM V1's native CPU offloading keeps this on the scheduler side, with no KV in it
(``vllm/v1/kv_offload/cpu/manager.py`` ``CPUOffloadingManager`` and its default policy
``cpu/policies/lru.py`` ``LRUCachePolicy``). One *tier block* holds one GPU block's K/V for every
layer (``blocks_per_chunk = 1``, vLLM's default); it is found by the block's chained hash.

A tier block's life (``ref_cnt``, as vLLM's ``ChunkStatus``):

* ``prepare_store``: a fresh tier block is taken for a new hash (``ref_cnt = -1``: being written,
  a lookup answers ``PENDING``), evicting the least recently used idle blocks when the tier is full;
* ``complete_store``: the copy is done, ``ref_cnt = 0``, readable and evictable;
* ``prepare_load`` / ``complete_load``: a load pins it (``ref_cnt > 0``: not evictable) until the
  copy back into the paged pool is done.

Recency (LRU): a block is ranked newest when stored; when a request finishes, every block it stored
or read is ranked again from its *tail to its head*, so the head of a prompt is the newest and the
tail is evicted first (``LRUCachePolicy.on_request_finished``), as the GPU prefix cache frees a
request's tail first.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from paged_lab._checks import check_int


class LookupResult(enum.Enum):
    MISS = "miss"
    PENDING = "pending"  # stored, but its copy has not finished: vLLM's HIT_PENDING (the request waits)
    HIT = "hit"


@dataclass(slots=True)
class TierBlock:
    tier_block_id: int  # the slot in the CPU tensor that holds its K/V
    ref_cnt: int = -1  # -1: being written; 0: idle (evictable); > 0: loads in flight

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0


@dataclass
class StoreDecision:
    """What ``prepare_store`` chose: the new hashes and their tier blocks, and what it evicted for them."""

    keys: list[bytes]
    tier_block_ids: list[int]
    evicted: list[bytes] = field(default_factory=list)


class CPUOffloadingManager:
    """``num_blocks`` tier blocks; the key of a block is its chained hash (``memory/prefix_cache.py``)."""

    def __init__(self, num_blocks: int):
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.blocks: dict[bytes, TierBlock] = {}
        self._rank: dict[bytes, int] = {}  # LRU order: the lowest rank among idle blocks goes first
        self._next_rank = 0
        self._num_fresh = 0  # tier blocks handed out at least once (vLLM takes fresh ones first)
        self._free: list[int] = []  # tier blocks given back by eviction (taken last-in, first-out)
        self._seen: dict[Hashable, dict[bytes, int]] = {}  # request -> {key it stored or read: position}
        self.num_evictions = 0

    # -- what is there -------------------------------------------------------------------------
    def lookup(self, key: bytes) -> LookupResult:
        block = self.blocks.get(key)
        if block is None:
            return LookupResult.MISS
        return LookupResult.HIT if block.is_ready else LookupResult.PENDING

    @property
    def num_used_blocks(self) -> int:
        return len(self.blocks)

    def _idle(self) -> list[bytes]:
        return [k for k, b in self.blocks.items() if b.ref_cnt == 0]

    # -- loads ---------------------------------------------------------------------------------
    def prepare_load(self, keys: Sequence[bytes], req_id: Hashable, positions: Sequence[int]) -> list[int]:
        """Pin ``keys`` (all ready) for a load; returns their tier blocks, in order."""
        for key in keys:
            if self.lookup(key) is not LookupResult.HIT:
                raise ValueError(f"keys: {key.hex()} is not a ready tier block; look it up first")
        for key in keys:
            self.blocks[key].ref_cnt += 1
        self._record(req_id, keys, positions)
        return [self.blocks[k].tier_block_id for k in keys]

    def complete_load(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.blocks[key].ref_cnt -= 1

    # -- stores --------------------------------------------------------------------------------
    def prepare_store(self, keys: Sequence[bytes], req_id: Hashable,
                      positions: Sequence[int]) -> StoreDecision | None:
        """Tier blocks for the ``keys`` not stored yet, evicting idle LRU blocks (never one of ``keys``).
        None when too few blocks are idle: nothing changes and the caller offers them again next step."""
        new = [k for k in keys if k not in self.blocks]
        ready = [k for k in keys if k in self.blocks and self.blocks[k].is_ready]
        self._record(req_id, new + ready, [p for k, p in zip(keys, positions) if k in set(new + ready)])
        if not new:
            return StoreDecision([], [])
        to_evict = len(new) - (self.num_blocks - self._num_fresh + len(self._free))
        evicted: list[bytes] = []
        if to_evict > 0:
            protected = set(keys)
            idle = sorted((k for k in self._idle() if k not in protected), key=self._rank.__getitem__)
            if len(idle) < to_evict:
                return None
            evicted = idle[:to_evict]
            for key in evicted:
                self._free.append(self.blocks.pop(key).tier_block_id)
                del self._rank[key]
            self.num_evictions += len(evicted)
        ids = [self._take_block() for _ in new]
        for key, tier_block_id in zip(new, ids):
            self.blocks[key] = TierBlock(tier_block_id)
            self._rank[key] = self._new_rank()
        return StoreDecision(new, ids, evicted)

    def complete_store(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            block = self.blocks.get(key)
            if block is not None and not block.is_ready:
                block.ref_cnt = 0

    def _take_block(self) -> int:
        if self._num_fresh < self.num_blocks:  # fresh tier blocks first, then the evicted ones
            self._num_fresh += 1
            return self._num_fresh - 1
        return self._free.pop()

    # -- recency -------------------------------------------------------------------------------
    def _new_rank(self) -> int:
        self._next_rank += 1
        return self._next_rank

    def _record(self, req_id: Hashable, keys: Iterable[bytes], positions: Iterable[int]) -> None:
        seen = self._seen.setdefault(req_id, {})
        for key, pos in zip(keys, positions):
            seen.setdefault(key, pos)

    def on_request_finished(self, req_id: Hashable) -> None:
        """Rank again every block the request stored or read, tail first, so its head is the newest."""
        seen = self._seen.pop(req_id, {})
        for key in sorted(seen, key=seen.__getitem__, reverse=True):
            if key in self.blocks:
                self._rank[key] = self._new_rank()

    def reset(self) -> None:
        """Drop everything (vLLM: ``reset_cache``); the eviction count stays."""
        self.blocks.clear()
        self._rank.clear()
        self._seen.clear()
        self._free.clear()
        self._num_fresh = 0

    def check_invariants(self) -> None:
        ids = [b.tier_block_id for b in self.blocks.values()]
        assert len(set(ids)) == len(ids) and len(ids) <= self.num_blocks, "a tier block is held twice"
        assert sorted(ids + self._free) == list(range(self._num_fresh)), "tier blocks lost or duplicated"
        assert set(self._rank) == set(self.blocks), "every stored block has a rank"
