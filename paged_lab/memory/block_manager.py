"""BlockManager: the operations on block tables: allocate, append, copy-on-write, prefix caching, fork, free.

This is vLLM V1's full-attention manager (``FullAttentionManager`` in vllm 0.32.0's
``vllm/v1/core/single_type_kv_cache_manager.py:729``; nano-vllm's ``block_manager.py``): a sequence keeps
every block until it finishes. Its base, ``BlockTables`` (``memory/block_tables.py``), holds the tables and
their reads; a sliding window's manager is its subclass (``memory/sliding_window.py``), as in vLLM.

The manager never touches tensors: it decides *where* every token's K and V go (a copy-on-write returns a
:class:`CowAction`: the caller copies the KV). Every operation checks first, then changes state: an
exception leaves the manager as it was. Two simpler designs stay as options: ``allocate(max_new_tokens=None)``
slots the whole prompt at once (the PagedAttention paper, vLLM V0; V1 slots a step's tokens), and
``reuse="lru"`` sends every freed block to the back of the free queue (V1 puts a block without a prefix-cache
hash at the front: ``BlockPool``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

from paged_lab._checks import check_int, check_token_ids
from paged_lab.kv_math import cdiv
from paged_lab.memory.block_pool import BlockPool
from paged_lab.memory.block_tables import BlockTables, SequenceBlocks
from paged_lab.memory.errors import DuplicateSequence, InvalidArgument, InvalidTokenId, OutOfBlocks
from paged_lab.memory.events import BlockManagerStats, EventLog
from paged_lab.memory.invariants import check_invariants
from paged_lab.memory.prefix_cache import block_hashes, find_cached_prefix


class CowAction(NamedTuple):
    """Copy block ``src`` into block ``dst`` before writing (``src, dst = action`` works)."""

    src: int
    dst: int


class BlockManager(BlockTables, EventLog):
    """Block tables for many sequences over one pool of ``num_blocks`` blocks, and the operations that
    change them (``reuse``, ``pool``: ``BlockTables``; the log they write, ``events``: ``EventLog``).

    >>> bm = BlockManager(num_blocks=8, block_size=4)
    >>> bm.allocate("a", [1, 2, 3, 4, 5, 6, 7])
    [0, 1]
    >>> bm.append_token("a", 8) is None, bm.block_table("a")
    (True, [0, 1])
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 record_events: bool = True, reuse: str = "v1", pool: BlockPool | None = None):
        super().__init__(num_blocks, block_size, reuse, pool)
        self.enable_prefix_caching, self.stats = bool(enable_prefix_caching), BlockManagerStats()
        self._start_log(record_events)  # events, clock

    # -- planning (no state changes) -----------------------------------------------------------
    def _cached_prefix(self, token_ids: Sequence[int], extra_key) -> tuple[list[int], list[bytes]]:
        """(the cached blocks ``allocate`` would reuse, the hash of every full block)."""
        if not self.enable_prefix_caching:
            return [], []
        return find_cached_prefix(self.pool.cached, token_ids, self.block_size, extra_key)

    def _blocks_to_take(self, num_tokens: int, hits: list[int]) -> int:
        """Free blocks an allocation takes: the new blocks, plus cache hits revived from the free queue."""
        revived = sum(self.pool.refcounts[b] == 0 for b in hits)
        return self.blocks_for(num_tokens) - len(hits) + revived

    def num_blocks_needed(self, tokens: int | Sequence[int], extra_key: Hashable | None = None) -> int:
        """Free blocks ``allocate`` would take. Pass token ids (not a count) to count cache hits."""
        if not isinstance(tokens, Sequence):  # a token count
            return self.blocks_for(check_int("tokens", tokens, minimum=0, error=InvalidArgument))
        tokens = check_token_ids("tokens", tokens, error=InvalidTokenId)
        hits, _ = self._cached_prefix(tokens, extra_key)
        return self._blocks_to_take(len(tokens), hits)

    def can_allocate(self, tokens: int | Sequence[int], extra_key: Hashable | None = None) -> bool:
        """Would ``allocate`` succeed? ``tokens``: a token count, or the token ids (exact with caching)."""
        return self.num_blocks_needed(tokens, extra_key) <= self.num_free_blocks

    def blocks_needed_to_append(self, seq_id, num_tokens: int = 1) -> int:
        """Free blocks the next ``num_tokens`` tokens take: the new blocks they open, plus one when the
        last block is partly filled and shared (it must be copied first)."""
        new_blocks, copy_tail = self._append_plan(self._seq(seq_id), check_int(
            "num_tokens", num_tokens, minimum=0, error=InvalidArgument))
        return new_blocks + copy_tail

    def _append_plan(self, s: SequenceBlocks, num_tokens: int) -> tuple[int, bool]:
        """(new blocks that ``num_tokens`` more tokens open, whether the last block must be copied first:
        some of them go into it while it is partly filled and shared)."""
        room = len(s.table) * self.block_size - len(s.token_ids)  # free slots left (drafts' blocks included)
        new_blocks = cdiv(num_tokens - room, self.block_size) if num_tokens > room else 0
        return new_blocks, room > 0 and num_tokens > 0 and self.pool.refcounts[s.table[-1]] > 1

    def can_append(self, seq_id, num_tokens: int = 1) -> bool:
        return self.blocks_needed_to_append(seq_id, num_tokens) <= self.num_free_blocks

    # -- operations ---------------------------------------------------------------------------
    def _take_block(self, seq_id) -> int:
        """Take the oldest free block for ``seq_id``; its cached content (if any) is evicted."""
        b, evicted = self.pool.allocate()
        if evicted is not None:
            self.stats.num_evictions += 1
            self._emit("evict", seq_id, (b,))
        return b

    def allocate(self, seq_id, token_ids: Sequence[int], extra_key: Hashable | None = None,
                 num_tokens_to_cache: int | None = None, max_new_tokens: int | None = None,
                 num_prompt_tokens: int | None = None) -> list[int]:
        """Give a new sequence its block table for the prompt ``token_ids`` and return it. With prefix
        caching, the longest chain of cached full blocks is reused; ``extra_key`` salts the hashes.

        ``max_new_tokens``: slots for the cached prefix and at most this many tokens after it (vLLM V1
        gives the tokens a step computes their slots, ``KVCacheManager.allocate_slots``; the rest get theirs
        later, :meth:`append_tokens`). None: every token gets its slot now (the paper's design).

        ``num_tokens_to_cache``: the leading tokens whose KV exists before anyone can read these blocks;
        their full blocks are offered to the prefix cache at once. None: all of them (the whole prompt is
        computed now). A chunked prefill passes 0 and calls :meth:`cache_blocks` as each chunk is scheduled:
        a block whose KV was never computed must not be found (vLLM V1's ``cache_blocks``).
        ``num_prompt_tokens``: unused here (a sliding window's manager needs it: which blocks to cache)."""
        if seq_id in self._seqs:
            raise DuplicateSequence(seq_id)
        token_ids = check_token_ids("token_ids", list(token_ids), error=InvalidTokenId)  # (a copy of its own)
        n = len(token_ids)
        if n == 0:
            raise InvalidArgument(f"allocate(seq_id={seq_id!r}) needs at least 1 token, got 0")
        num_queried = n  # the prefix cache is asked about every token, slotted now or later
        to_cache = n if num_tokens_to_cache is None else check_int(
            "num_tokens_to_cache", num_tokens_to_cache, minimum=0, maximum=n, error=InvalidArgument)
        hits, hashes = self._cached_prefix(token_ids, extra_key)
        if max_new_tokens is not None:  # only these tokens get their slots now
            num_new = check_int("max_new_tokens", max_new_tokens, minimum=1, error=InvalidArgument)
            n = min(n, len(hits) * self.block_size + num_new)
            token_ids, hashes = token_ids[:n], hashes[:n // self.block_size]
        needed = self._blocks_to_take(n, hits)
        if needed > self.num_free_blocks:
            raise OutOfBlocks(needed, self.num_free_blocks, f"allocate(seq_id={seq_id!r}, {n} tokens)")
        self.adopt_hits(seq_id, token_ids, hashes, hits, extra_key, num_queried)
        self.take_new_blocks(seq_id)
        self._cache_full_blocks(self._seqs[seq_id], seq_id, min(to_cache, n))
        return self.block_table(seq_id)

    # The two halves of ``allocate`` (checked by the caller): a HybridBlockManager touches every layer
    # group's hits before any group takes a new block, so no group's new block evicts another's hit
    # (vLLM: ``allocate_new_computed_blocks``, then ``allocate_new_blocks``, kv_cache_coordinator.py).
    def adopt_hits(self, seq_id, token_ids: list[int], hashes: list[bytes], hits: list[int],
                   extra_key: Hashable | None, num_queried: int) -> None:
        """A new sequence whose table starts with the cache hits ``hits``. ``token_ids``: the tokens that
        get slots now; ``num_queried``: the tokens looked up (the stats count them)."""
        s = self._seqs[seq_id] = SequenceBlocks(list(hits), token_ids, hashes, extra_key,
                                                len(hits) * self.block_size, len(hits))
        if self.enable_prefix_caching:
            self.stats.prefix_cache_queries += num_queried
            self.stats.prefix_cache_hits += s.num_cached_tokens
        for b in self._held(hits):  # (a hit waiting in the free queue leaves it: a finished sequence's block)
            self.pool.touch(b)
        if hits:
            self._emit("hit", seq_id, hits, s.num_cached_tokens)

    def take_new_blocks(self, seq_id) -> None:
        """Give a just-adopted sequence new blocks for its tokens past its hits (full, but maybe the last)."""
        s = self._seq(seq_id)
        for _ in range(self.blocks_for(len(s.token_ids)) - len(s.table)):
            s.table.append(self._take_block(seq_id))
        self._emit("allocate", seq_id, s.table, len(s.token_ids))

    def _held(self, table: list[int]) -> list[int]:
        """The pool blocks among ``table``'s entries: all of them. (A sliding window's table also keeps
        entries for blocks it gave back: ``SlidingWindowManager``.)"""
        return table

    def cache_blocks(self, seq_id, num_tokens: int) -> None:
        """Offer to the prefix cache the full blocks among ``seq_id``'s first ``num_tokens`` tokens. Call it
        once their KV is computed, or is computed in the current step before any request reads it (every
        layer stores the whole step's K/V before it attends)."""
        if not self.enable_prefix_caching:  # nothing is ever cached (the Scheduler calls this every step)
            return
        s = self._seq(seq_id)
        self._cache_full_blocks(s, seq_id, check_int("num_tokens", num_tokens, minimum=0,
                                                     maximum=len(s.token_ids), error=InvalidArgument))

    def _cache_full_blocks(self, s: SequenceBlocks, seq_id, num_tokens: int) -> None:
        """Register the full blocks among the first ``num_tokens`` tokens that are not registered yet."""
        first, upto = s.num_cached_blocks, min(num_tokens // self.block_size, len(s.hashes))
        if not self.enable_prefix_caching or upto <= first:
            return
        new_full = zip(s.table[first:upto], s.hashes[first:upto], self._reachable_blocks(seq_id, first, upto))
        newly_cached = [b for b, h, keep in new_full if keep and self.pool.cache(b, h)]
        s.num_cached_blocks = upto
        if newly_cached:  # these blocks can be reused from now on
            self._emit("cache", seq_id, newly_cached)

    def _reachable_blocks(self, seq_id, first: int, end: int) -> list[bool]:
        """Which of blocks ``[first, end)`` a later prefix hit could use, so are worth caching: all of
        them for full attention. (A sliding window keeps fewer: ``SlidingWindowManager``.)"""
        return [True] * (end - first)

    def append_token(self, seq_id, token_id: int) -> CowAction | None:
        """Make room for one more token and record it. Returns a CowAction when the last block was
        shared (refcount > 1) and had to be copied first; the caller copies the KV tensors.

        The token's KV is computed in the step that appends it, so a block it fills is offered to the
        prefix cache (with the earlier full blocks, if a chunked prefill had not offered them yet)."""
        return self.append_tokens(seq_id, [check_int("token_id", token_id, error=InvalidTokenId)])

    def append_tokens(self, seq_id, token_ids: Sequence[int],
                      num_lookahead_tokens: int = 0) -> CowAction | None:
        """Give the next tokens of ``seq_id`` their slots: a decode's one token, or the next chunk of a
        prefill whose blocks are allocated as it is computed (vLLM V1). All or nothing: raises OutOfBlocks,
        changing nothing, when the free blocks are too few. Returns a CowAction when the partly filled last
        block was shared and had to be copied first. ``num_lookahead_tokens``: slots ("draft"), no token, no
        hash, for that many draft positions after them (a block they leave unused stays, as in vLLM)."""
        s = self._seq(seq_id)
        token_ids = check_token_ids("token_ids", token_ids, error=InvalidTokenId)
        ahead = 0 if num_lookahead_tokens == 0 else check_int(  # (0: no drafts, the usual case)
            "num_lookahead_tokens", num_lookahead_tokens, minimum=0, error=InvalidArgument)
        if not token_ids and not ahead:
            return None
        new_blocks, copy_tail = self._append_plan(s, len(token_ids) + ahead)
        free = self.pool.num_free_blocks
        if new_blocks + copy_tail > free:
            cow = " (with a copy-on-write of its shared last block)" if copy_tail else ""
            raise OutOfBlocks(new_blocks + copy_tail, free, f"append_tokens(seq_id={seq_id!r}, "
                              f"{len(token_ids)} tokens) at {len(s.token_ids)} tokens{cow}")
        # (hashed before any change: all-or-nothing)
        new_hashes = self._new_block_hashes(s, token_ids) if self.enable_prefix_caching else None
        cow = self._copy_on_write(s, seq_id) if copy_tail else None  # the last block is shared: copy it
        for _ in range(new_blocks):  # the blocks these tokens open
            s.table.append(self._take_block(seq_id))
        s.token_ids.extend(token_ids)
        if self.record_events:  # the blocks the tokens went to, then the drafts' blocks
            n, bs = len(s.token_ids), self.block_size
            for kind, a, b in (("append", n - len(token_ids), n), ("draft", n, n + ahead)):
                if b > a:
                    self._emit(kind, seq_id, s.table[a // bs:self.blocks_for(b)], b)
        if new_hashes:  # the tokens filled blocks: later prompts may reuse them
            s.hashes.extend(new_hashes)
            self._cache_full_blocks(s, seq_id, len(s.token_ids))
        return cow

    def _new_block_hashes(self, s: SequenceBlocks, token_ids: list[int]) -> list[bytes]:
        """The chained hash of each block that ``token_ids``, appended to ``s``, fill (caching on)."""
        start = len(s.token_ids) // self.block_size * self.block_size  # the last block's first token
        if len(s.token_ids) + len(token_ids) < start + self.block_size:  # (most appends fill none)
            return []
        return block_hashes(s.token_ids[start:] + token_ids, self.block_size, s.extra_key,
                            s.hashes[-1] if s.hashes else None)

    def _copy_on_write(self, s: SequenceBlocks, seq_id) -> CowAction:
        """Give ``s`` its own copy of its shared, partly filled last block."""
        src = s.table[-1]
        dst = self._take_block(seq_id)
        self.pool.release(src)  # its refcount was > 1: the other tables still hold it
        s.table[-1] = dst
        self.stats.num_cow += 1
        self._emit("cow", seq_id, (src, dst), len(s.token_ids))
        return CowAction(src, dst)

    def remove_skipped_blocks(self, seq_id, num_computed_tokens: int) -> None:
        """Full attention reads every earlier token: no block to give back (vLLM: the base class's
        ``get_num_skipped_tokens`` returns 0, ``single_type_kv_cache_manager.py:712``)."""

    def fork(self, parent_id, child_id) -> list[int]:
        """The child shares every block of the parent (refcounts go up; nothing is copied yet)."""
        p = self._seq(parent_id)
        if child_id in self._seqs:
            raise DuplicateSequence(child_id)
        for b in self._held(p.table):
            self.pool.touch(b)
        self._seqs[child_id] = SequenceBlocks(list(p.table), list(p.token_ids), list(p.hashes), p.extra_key,
                                              p.num_cached_tokens, p.num_cached_blocks)
        self._emit("fork", child_id, p.table, len(p.token_ids), parent_id)
        return list(p.table)

    def free(self, seq_id) -> None:
        """Drop the sequence's table, its tail block first (as vLLM's ``free``). The blocks nobody else
        holds join the free queue (where: the pool's ``reuse`` rule), so a shared prefix outlives its tail;
        cached content stays until the block is handed out again."""
        s = self._seq(seq_id)
        self.pool.free_blocks(reversed(self._held(s.table)), checked=True)
        del self._seqs[seq_id]
        self._emit("free", seq_id, s.table, len(s.token_ids))

    def reset_prefix_cache(self, pool: bool = True) -> int:
        """Forget every cached hash (e.g. after new weights); the log records the evictions. Returns how
        many blocks were cached (``pool=False``: the pool's owner forgets them, and counts)."""
        for b in self.pool.block_hash:
            self._emit("evict", None, (b,))
        return self.pool.reset_cache() if pool else len(self.pool.block_hash)

    def reset(self, pool: bool = True) -> None:
        """Drop every table, every block free, the pool as new (``pool=False``: its owner resets it)."""
        self._seqs = {}
        if pool:
            self.pool.reset()
        self._emit("reset", None)

    # -- inspection ---------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise BlockManagerError if a rule of ``paged_lab.memory.invariants`` is broken."""
        check_invariants(self)
