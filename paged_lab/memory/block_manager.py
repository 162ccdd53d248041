"""BlockManager: block tables over a BlockPool, with copy-on-write, fork and prefix caching.

A sequence's KV cache lives in fixed-size *blocks* of ``block_size`` token slots. Its *block
table* lists the physical block ids in logical order, so token ``pos`` lives in slot

    slot = block_table[pos // block_size] * block_size + pos % block_size

The manager never touches tensors: it decides *where* every token's K and V go. When it must copy
a block (copy-on-write) it returns a :class:`CowAction` and the caller copies the KV tensors.

Vocabulary and split follow vLLM's KVCacheManager and nano-vllm's ``block_manager.py``.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from paged_lab.memory.block_pool import BlockPool
from paged_lab.memory.errors import (
    BlockManagerError,
    DuplicateSequence,
    InvalidArgument,
    OutOfBlocks,
    UnknownSequence,
)
from paged_lab.memory.events import Event, PoolState
from paged_lab.memory.prefix_cache import block_hashes, hash_block


class CowAction(NamedTuple):
    """Copy block ``src`` into block ``dst`` before writing (``src, dst = action`` works)."""

    src: int
    dst: int


@dataclass
class BlockManagerStats:
    prefix_cache_queries: int = 0  # prompt tokens looked up (vLLM counts in tokens)
    prefix_cache_hits: int = 0  # of those, tokens whose KV was reused
    num_cow: int = 0  # copy-on-write copies
    num_evictions: int = 0  # cached blocks overwritten with new content
    num_block_allocations: int = 0  # blocks taken from the free queue

    @property
    def hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0


@dataclass(slots=True)
class _Seq:
    table: list[int]
    token_ids: list[int]
    hashes: list[bytes] = field(default_factory=list)  # chained hash of each full block (caching on)
    extra_key: Hashable | None = None
    num_cached_tokens: int = 0  # prompt tokens reused from the prefix cache at allocate
    room: int = 0  # appends that may take append_token's fast path (see BlockManager._room)


class BlockManager:
    """Block tables for many sequences over one pool of ``num_blocks`` blocks.

    >>> bm = BlockManager(num_blocks=8, block_size=4)
    >>> bm.allocate("a", [1, 2, 3, 4, 5, 6, 7])
    [0, 1]
    >>> bm.append_token("a", 8) is None, bm.block_table("a")
    (True, [0, 1])
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 record_events: bool = True):
        self.pool = BlockPool(num_blocks, block_size)
        self.num_blocks, self.block_size = self.pool.num_blocks, self.pool.block_size
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.record_events = record_events
        self.events: list[Event] = []
        self.stats = BlockManagerStats()
        self.clock = 0  # stamped on every event; a scheduler sets it to its step number
        self._seqs: dict[Hashable, _Seq] = {}
        self._fill = array("q", [0]) * self.num_blocks  # tokens held by each block (kept while it waits, cached)
        self._used_slots = 0  # sum of _fill over used blocks

    # -- queries ------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_used_blocks

    @property
    def usage(self) -> float:
        """Fraction of all token slots that hold a token of a live sequence (shared slots once)."""
        return self._used_slots / (self.num_blocks * self.block_size)

    @property
    def seq_ids(self) -> list[Hashable]:
        return list(self._seqs)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._seqs

    def _seq(self, seq_id) -> _Seq:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise UnknownSequence(seq_id) from None

    def block_table(self, seq_id) -> list[int]:
        return list(self._seq(seq_id).table)

    def num_tokens(self, seq_id) -> int:
        return len(self._seq(seq_id).token_ids)

    def token_ids(self, seq_id) -> list[int]:
        return list(self._seq(seq_id).token_ids)

    def num_cached_tokens(self, seq_id) -> int:
        """Prompt tokens whose KV ``allocate`` found in the prefix cache (prefill can skip them)."""
        return self._seq(seq_id).num_cached_tokens

    def refcount(self, block_id: int) -> int:
        return self.pool.refcounts[block_id]

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that ``num_tokens`` tokens occupy: ceil(num_tokens / block_size)."""
        return -(-num_tokens // self.block_size)

    def slot_mapping(self, seq_id, start: int = 0, end: int | None = None) -> list[int]:
        """Physical slot of each token position in ``[start, end)`` (default: every token)."""
        s = self._seq(seq_id)
        n = len(s.token_ids)
        end = n if end is None else end
        if not 0 <= start <= end <= n:
            raise InvalidArgument(f"slot_mapping needs 0 <= start <= end <= num_tokens={n}, "
                                  f"got start={start}, end={end}")
        bs, table = self.block_size, s.table
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    # -- planning (no state changes) -----------------------------------------------------------
    def _plan(self, token_ids: Sequence[int], extra_key) -> tuple[list[int], list[bytes]]:
        """(the cached blocks allocate would reuse, the hash of every full block)."""
        if not self.enable_prefix_caching:
            return [], []
        hashes = block_hashes(token_ids, self.block_size, extra_key)
        hits: list[int] = []
        # The last prompt token is always computed (its logits start decoding), so at most
        # floor((len - 1) / block_size) blocks can be reused.
        for i in range((len(token_ids) - 1) // self.block_size):
            b = self.pool.lookup(hashes[i])
            if b is None:
                break
            hits.append(b)
        return hits, hashes

    def num_blocks_needed(self, tokens: int | Sequence[int], extra_key: Hashable | None = None) -> int:
        """Free blocks ``allocate`` would take: new blocks, plus cached blocks it revives from the
        free queue. Pass token ids (not a count) to account for prefix-cache hits."""
        if isinstance(tokens, int):
            return self.blocks_for(tokens)
        hits, _ = self._plan(tokens, extra_key)
        return self._needed(len(tokens), hits)

    def _needed(self, num_tokens: int, hits: list[int]) -> int:
        if not hits:
            return -(-num_tokens // self.block_size)
        revived = sum(1 for b in hits if self.pool.refcounts[b] == 0)  # cached, waiting in the free queue
        return self.blocks_for(num_tokens) - len(hits) + revived

    def can_allocate(self, tokens: int | Sequence[int], extra_key: Hashable | None = None) -> bool:
        """Would ``allocate`` succeed? ``tokens``: a token count, or the token ids (exact with caching)."""
        if isinstance(tokens, int):  # (blocks_for inlined: a scheduler asks once per admission)
            return -(-tokens // self.block_size) <= self.pool.num_free_blocks
        return self.num_blocks_needed(tokens, extra_key) <= self.pool.num_free_blocks

    def blocks_needed_to_append(self, seq_id) -> int:
        """1 when the next token needs a block (the last is full, or shared and must be copied)."""
        s = self._seq(seq_id)
        if len(s.token_ids) % self.block_size == 0:
            return 1
        return 1 if self.pool.refcounts[s.table[-1]] > 1 else 0

    def can_append(self, seq_id) -> bool:
        return self.blocks_needed_to_append(seq_id) <= self.num_free_blocks

    # -- operations ---------------------------------------------------------------------------
    def _emit(self, kind: str, seq_id, block_ids=(), num_tokens: int = 0, parent_id=None) -> None:
        if self.record_events:
            self.events.append(Event(len(self.events), kind, seq_id, tuple(block_ids), num_tokens,
                                     parent_id, self.clock))

    def _take_block(self, seq_id) -> int:
        b, evicted = self.pool.allocate()
        stats = self.stats
        stats.num_block_allocations += 1
        if evicted is not None:
            stats.num_evictions += 1
            self._emit("evict", seq_id, (b,))
        self._fill[b] = 0
        return b

    def allocate(self, seq_id, token_ids: Sequence[int], extra_key: Hashable | None = None) -> list[int]:
        """Give a new sequence its block table for the prompt ``token_ids`` and return it.

        With prefix caching, the longest chain of cached full blocks is reused (also blocks of
        finished sequences still waiting in the free queue); ``extra_key`` salts the hashes.
        """
        if seq_id in self._seqs:
            raise DuplicateSequence(seq_id)
        token_ids = list(token_ids)
        n = len(token_ids)
        if n == 0:
            raise InvalidArgument(f"allocate(seq_id={seq_id!r}) needs at least 1 token, got 0")
        hits, hashes = self._plan(token_ids, extra_key)
        needed, free = self._needed(n, hits), self.pool.num_free_blocks
        if needed > free:
            raise OutOfBlocks(needed, free, f"allocate(seq_id={seq_id!r}, {n} tokens)")

        bs = self.block_size
        if self.enable_prefix_caching:
            self.stats.prefix_cache_queries += n
            self.stats.prefix_cache_hits += len(hits) * bs
        for b in hits:  # touch first, so that taking new blocks can never evict them
            if self.pool.refcounts[b] == 0:
                self._used_slots += self._fill[b]
            self.pool.touch(b)
        if hits:
            self._emit("hit", seq_id, hits, len(hits) * bs)
        table = list(hits)
        fill, take = self._fill, self._take_block
        for i in range(len(hits), -(-n // bs)):  # the new blocks: full, except maybe the last
            b = take(seq_id)
            fill[b] = min(bs, n - i * bs)
            table.append(b)
        self._used_slots += n - len(hits) * bs  # what the new blocks hold (hits were counted above)
        s = self._seqs[seq_id] = _Seq(table, token_ids, hashes, extra_key, len(hits) * bs)
        s.room = self._room(s)
        if self.record_events:
            self._emit("allocate", seq_id, table, n)
        if len(hashes) > len(hits):  # full new blocks become cacheable
            cached = [table[i] for i in range(len(hits), len(hashes)) if self.pool.cache(table[i], hashes[i])]
            if cached:
                self._emit("cache", seq_id, cached)
        return list(table)

    def _room(self, s: _Seq) -> int:
        """How many more tokens can go straight into ``s``'s last block: it must be held by ``s``
        alone (a shared block is copied first) and have free slots; with prefix caching the token
        that fills it is left out, because a full block must be hashed. Recomputed whenever the
        last block changes hands; fork sets it to 0 (the block becomes shared)."""
        in_last = len(s.token_ids) % self.block_size  # 0: the last block is full
        if not in_last or self.pool.refcounts[s.table[-1]] != 1:
            return 0
        return self.block_size - in_last - (1 if self.enable_prefix_caching else 0)

    def append_token(self, seq_id, token_id: int) -> CowAction | None:
        """Make room for one more token and record it. Returns a CowAction when the last block was
        shared (refcount > 1) and had to be copied first; the caller copies the KV tensors."""
        try:
            s = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise UnknownSequence(seq_id) from None
        # Fast path -- most decode steps, so it runs once per generated token: the last block is
        # ours alone and has a free slot (``room``). No block moves, nothing can fail.
        if s.room:
            s.room -= 1
            s.token_ids.append(token_id)
            b = s.table[-1]
            self._fill[b] += 1
            self._used_slots += 1
            if self.record_events:
                self._emit("append", seq_id, (b,), len(s.token_ids))
            return None
        return self._append_slow(s, seq_id, token_id)

    def _append_slow(self, s: _Seq, seq_id, token_id: int) -> CowAction | None:
        """append_token when the token needs a new block or a copy-on-write, or fills a block that
        prefix caching must name (or the last block's sharer just let go of it)."""
        n, bs = len(s.token_ids), self.block_size
        new_hash = None
        if self.enable_prefix_caching and (n + 1) % bs == 0:  # this token fills its block: name it
            parent = s.hashes[-1] if s.hashes else None  # (hashed before any change: all-or-nothing)
            new_hash = hash_block(parent, s.token_ids[n + 1 - bs:] + [token_id], s.extra_key)
        action = None
        if n % bs == 0:  # the last block is full (full shared blocks are never written)
            if not self.pool.num_free_blocks:
                raise OutOfBlocks(1, 0, f"append_token(seq_id={seq_id!r}) at {n} tokens")
            b = self._take_block(seq_id)
            s.table.append(b)
        else:
            b = s.table[-1]
            if self.pool.refcounts[b] > 1:  # copy-on-write
                if not self.pool.num_free_blocks:
                    raise OutOfBlocks(1, 0, f"copy-on-write for append_token(seq_id={seq_id!r})")
                dst = self._take_block(seq_id)
                self.pool.release(b)  # refcount was > 1: b stays used by the other tables
                self._fill[dst] = self._fill[b]
                self._used_slots += self._fill[dst]
                s.table[-1] = dst
                self.stats.num_cow += 1
                self._emit("cow", seq_id, (b, dst), n)
                action, b = CowAction(b, dst), dst
        s.token_ids.append(token_id)
        self._fill[b] += 1
        self._used_slots += 1
        if self.record_events:
            self._emit("append", seq_id, (b,), n + 1)
        if new_hash is not None:  # a block just filled: cacheable from now on
            s.hashes.append(new_hash)
            if self.pool.cache(b, new_hash):
                self._emit("cache", seq_id, (b,))
        s.room = self._room(s)
        return action

    def fork(self, parent_id, child_id) -> list[int]:
        """The child shares every block of the parent (refcounts go up; nothing is copied yet)."""
        p = self._seq(parent_id)
        if child_id in self._seqs:
            raise DuplicateSequence(child_id)
        for b in p.table:
            self.pool.touch(b)
        self._seqs[child_id] = _Seq(list(p.table), list(p.token_ids), list(p.hashes), p.extra_key,
                                    p.num_cached_tokens)  # room 0: the last block is shared now
        p.room = 0
        self._emit("fork", child_id, p.table, len(p.token_ids), parent_id)
        return list(p.table)

    def free(self, seq_id) -> None:
        """Drop the sequence's table. Blocks nobody else holds join the free queue's end, last
        block first, so a shared prefix outlives its tail; their cached content stays reusable
        until the block is handed out again."""
        try:
            s = self._seqs.pop(seq_id)
        except (KeyError, TypeError):
            raise UnknownSequence(seq_id) from None
        release, fill, freed_slots = self.pool.release, self._fill, 0
        for b in reversed(s.table):
            if release(b):
                freed_slots += fill[b]
        self._used_slots -= freed_slots
        if self.record_events:
            self._emit("free", seq_id, s.table, len(s.token_ids))

    def reset_prefix_cache(self) -> int:
        """Forget every cached hash (e.g. after new weights). Returns how many blocks were cached."""
        blocks = list(self.pool.cached.values())
        for b in blocks:
            self._emit("evict", None, (b,))
        return self.pool.reset_cache()

    # -- inspection ---------------------------------------------------------------------------
    def state(self) -> PoolState:
        """The live pool as a PoolState (what ``replay(bm.events, ...)`` must rebuild)."""
        return PoolState(
            num_blocks=self.num_blocks,
            refcounts=list(self.pool.refcounts),
            tables={sid: list(s.table) for sid, s in self._seqs.items()},
            num_tokens={sid: len(s.token_ids) for sid, s in self._seqs.items()},
            free_queue=list(self.pool.free_queue),
            cached=set(self.pool.cached.values()),
            last=self.events[-1] if self.events else None,
        )

    def check_invariants(self) -> None:
        """Raise BlockManagerError when any bookkeeping rule is broken (tests call it every step)."""
        holders = [0] * self.num_blocks
        used_slots = 0
        fill = [0] * self.num_blocks
        for sid, s in self._seqs.items():
            if s.room > self._room(s):
                raise BlockManagerError(f"seq {sid!r}: room {s.room} > {self._room(s)} (fast path unsafe)")
            if len(set(s.table)) != len(s.table):
                raise BlockManagerError(f"seq {sid!r}: a block appears twice in {s.table}")
            if len(s.table) != self.blocks_for(len(s.token_ids)):
                raise BlockManagerError(f"seq {sid!r}: {len(s.table)} blocks for {len(s.token_ids)} tokens")
            for i, b in enumerate(s.table):
                holders[b] += 1
                fill[b] = min(self.block_size, len(s.token_ids) - i * self.block_size)
        for b in range(self.num_blocks):
            if holders[b] != self.pool.refcounts[b]:
                raise BlockManagerError(f"block {b}: refcount {self.pool.refcounts[b]} but {holders[b]} tables")
            if (holders[b] == 0) != (b in self.pool.free_queue):
                raise BlockManagerError(f"block {b}: refcount {holders[b]} disagrees with the free queue")
            if holders[b] and fill[b] != self._fill[b]:
                raise BlockManagerError(f"block {b}: holds {self._fill[b]} tokens, tables say {fill[b]}")
            used_slots += fill[b] if holders[b] else 0
        if self.num_free_blocks + self.num_used_blocks != self.num_blocks:
            raise BlockManagerError("free + used != total")
        if used_slots != self._used_slots:
            raise BlockManagerError(f"used slots {self._used_slots} != {used_slots}")
        for h, b in self.pool.cached.items():
            if self.pool.block_hash.get(b) != h or self._fill[b] != self.block_size:
                raise BlockManagerError(f"cached block {b} is not a full block under its hash")
        if self.stats.prefix_cache_hits > self.stats.prefix_cache_queries:
            raise BlockManagerError("prefix-cache hits exceed queries")
