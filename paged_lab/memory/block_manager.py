"""BlockManager: block tables over a BlockPool, with copy-on-write, fork and prefix caching.

A sequence's KV cache lives in fixed-size *blocks* of ``block_size`` token slots. Its *block
table* lists the physical block ids in logical order, so token ``pos`` lives in slot

    slot = block_table[pos // block_size] * block_size + pos % block_size

The manager never touches tensors: it decides *where* every token's K and V go. When it must copy
a block (copy-on-write) it returns a :class:`CowAction` and the caller copies the KV tensors.

Every operation checks first, then changes state: an exception leaves the manager as it was.
Vocabulary and split follow vLLM's KVCacheManager and nano-vllm's ``block_manager.py``. The Scheduler
drives it through the small interface of ``paged_lab.memory.allocator`` (KVCacheAllocator), which the
ContiguousAllocator answers too.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from paged_lab._checks import check_int, check_token_ids
from paged_lab.kv_math import cdiv
from paged_lab.memory.block_pool import NULL_BLOCK, BlockPool
from paged_lab.memory.errors import (
    DuplicateSequence,
    InvalidArgument,
    InvalidBlockConfig,
    InvalidTokenId,
    OutOfBlocks,
    UnknownSequence,
)
from paged_lab.memory.events import BlockManagerStats, Event, PoolState, keep_latest
from paged_lab.memory.invariants import check_invariants
from paged_lab.memory.prefix_cache import find_cached_prefix, hash_block


def slot_for(pos: int, block_table: Sequence[int], block_size: int) -> int:
    """The physical slot of token position ``pos``: its block's id x block_size + its offset in the block."""
    return block_table[pos // block_size] * block_size + pos % block_size


class CowAction(NamedTuple):
    """Copy block ``src`` into block ``dst`` before writing (``src, dst = action`` works)."""

    src: int
    dst: int


@dataclass(slots=True)
class SequenceBlocks:
    """What the manager knows about one sequence: its block table and the tokens its blocks hold.
    (The scheduler's view of the same request is a ``paged_lab.sched.Sequence``.)"""

    table: list[int]  # physical block ids, in logical order
    token_ids: list[int]  # every token that has a slot: the block contents
    hashes: list[bytes] = field(default_factory=list)  # chained hash of each full block (caching on)
    extra_key: Hashable | None = None
    num_cached_tokens: int = 0  # prompt tokens reused from the prefix cache at allocate
    # Leading blocks already offered to the prefix cache: hits, and full blocks whose KV the caller has
    # computed or computes in the current step (``cache_blocks``). Never a block whose KV may not exist.
    num_cached_blocks: int = 0
    # Leading entries that are NULL_BLOCK: blocks a sliding window no longer reads, already freed
    # (``free_blocks_before``; always 0 for a full-attention table).
    num_skipped_blocks: int = 0


class BlockManager:
    """Block tables for many sequences over one pool of ``num_blocks`` blocks.

    >>> bm = BlockManager(num_blocks=8, block_size=4)
    >>> bm.allocate("a", [1, 2, 3, 4, 5, 6, 7])
    [0, 1]
    >>> bm.append_token("a", 8) is None, bm.block_table("a")
    (True, [0, 1])
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 record_events: bool = True, reuse: str = "v1", pool: BlockPool | None = None):
        # pool: a BlockPool shared with other managers (one per layer group, ``memory/hybrid.py``); by
        # default the manager owns a new one. reuse: which freed block is handed out next.
        self.pool = BlockPool(num_blocks, block_size, reuse) if pool is None else pool
        if (self.pool.num_blocks, self.pool.block_size) != (num_blocks, block_size):
            raise InvalidBlockConfig(f"pool: holds {self.pool.num_blocks} blocks of {self.pool.block_size} "
                                     f"slots, but num_blocks={num_blocks}, block_size={block_size}")
        self.num_blocks, self.block_size = self.pool.num_blocks, self.pool.block_size
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.record_events = record_events
        self.events: list[Event] = []
        self._events_dropped = 0  # events trim_events() dropped
        self.stats = BlockManagerStats()
        self.clock = 0  # stamped on every event; a scheduler sets it to its step number
        self._seqs: dict[Hashable, SequenceBlocks] = {}
        # Slots of used blocks that hold a token, a shared slot once (``usage`` reads it every step, so it is
        # kept as a count, not summed over the tables). Three operations move it, each by one rule: allocate
        # (the new table's tokens, except those in blocks another table holds), append_tokens (the tokens,
        # and a copy-on-write's copy) and free (the tokens of the blocks no other table holds).
        self._used_slots = 0

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
        return self.used_slots / (self.num_blocks * self.block_size)

    @property
    def used_slots(self) -> int:
        """Slots that hold a token of a live sequence (a slot shared by several tables counts once)."""
        return self._used_slots

    @property
    def reserved_slots(self) -> int:
        """Slots of the blocks some table holds, whether they hold a token yet or not."""
        return self.num_used_blocks * self.block_size

    @property
    def external_fragmentation(self) -> int:
        """Free slots no request can use: none. Any free block takes any sequence's next tokens."""
        return 0

    @property
    def max_slots_per_seq(self) -> int:
        """The most slots one sequence can hold: every block of the pool."""
        return self.num_blocks * self.block_size

    @property
    def max_slots_per_seq_reason(self) -> str:
        return f"num_blocks={self.num_blocks} x block_size={self.block_size}"

    def __repr__(self) -> str:
        return f"BlockManager(num_blocks={self.num_blocks}, block_size={self.block_size})"

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._seqs

    @property
    def seq_ids(self) -> list[Hashable]:
        return list(self._seqs)

    def _seq(self, seq_id) -> SequenceBlocks:
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
        return self.pool.refcounts[self.pool.check_block(block_id)]

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that ``num_tokens`` tokens occupy: ceil(num_tokens / block_size)."""
        return cdiv(num_tokens, self.block_size)

    def _tokens_in_block(self, s: SequenceBlocks, i: int) -> int:
        """Tokens held by the ``i``-th block of ``s``'s table: full, except maybe the last."""
        return max(0, min(self.block_size, len(s.token_ids) - i * self.block_size))  # 0: a draft's block

    def slot_mapping(self, seq_id, start: int = 0, end: int | None = None) -> list[int]:
        """Physical slot of each token position in ``[start, end)`` (default: every token)."""
        s = self._seq(seq_id)
        n = len(s.token_ids)
        end = n if end is None else end
        if not 0 <= start <= end <= n:
            raise InvalidArgument(f"slot_mapping needs 0 <= start <= end <= num_tokens={n}, "
                                  f"got start={start}, end={end}")
        return [slot_for(pos, s.table, self.block_size) for pos in range(start, end)]

    # -- planning (no state changes) -----------------------------------------------------------
    def _cached_prefix(self, token_ids: Sequence[int], extra_key) -> tuple[list[int], list[bytes]]:
        """(the cached blocks ``allocate`` would reuse, the hash of every full block)."""
        if not self.enable_prefix_caching:
            return [], []
        return find_cached_prefix(self.pool.cached, token_ids, self.block_size, extra_key)

    def _blocks_to_take(self, num_tokens: int, hits: list[int]) -> int:
        """Free blocks an allocation takes: the new blocks, plus cache hits revived from the free queue."""
        revived = [b for b in hits if b != NULL_BLOCK and self.pool.refcounts[b] == 0]
        return self.blocks_for(num_tokens) - len(hits) + len(revived)

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
        n, bs = len(s.token_ids), self.block_size
        room = len(s.table) * bs - n  # free slots left in the table's blocks (a rollback's kept blocks too)
        new_blocks = cdiv(num_tokens - room, bs) if num_tokens > room else 0
        return new_blocks, n % bs > 0 and num_tokens > 0 and self.pool.refcounts[s.table[n // bs]] > 1

    def can_append(self, seq_id, num_tokens: int = 1) -> bool:
        return self.blocks_needed_to_append(seq_id, num_tokens) <= self.num_free_blocks

    # -- operations ---------------------------------------------------------------------------
    def _emit(self, kind: str, seq_id, block_ids=(), num_tokens: int = 0, parent_id=None) -> None:
        if self.record_events:
            self.events.append(Event(self._events_dropped + len(self.events), kind, seq_id, tuple(block_ids),
                                     num_tokens, parent_id, self.clock))

    def trim_events(self, max_events: int) -> None:
        """Bound the log (a long-lived engine's): ``events.keep_latest``; Event.index still counts from 0."""
        self._events_dropped += keep_latest(self.events, max_events)

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

        ``max_new_tokens``: give slots to the cached prefix and at most this many tokens after it (vLLM V1
        allocates blocks for the tokens a step computes, ``KVCacheManager.allocate_slots``; the rest get
        theirs later, through :meth:`append_tokens`). None: every token gets its slot now (the paper).

        ``num_tokens_to_cache``: the leading tokens whose KV exists before anyone can read these
        blocks; the full blocks among them are offered to the prefix cache at once. None: all of them
        (the caller computes the whole prompt now). A scheduler that prefills in chunks passes 0 and
        calls :meth:`cache_blocks` as each chunk is scheduled: a block whose KV was never computed must
        not be found by another request (vLLM V1 caches blocks the same way, ``cache_blocks`` in
        ``vllm/v1/core/kv_cache_manager.py``).

        ``num_prompt_tokens``: how many of ``token_ids`` are the request's prompt (a recomputed request
        brings its outputs too). Full attention caches every full block, so it does not need it; a
        sliding-window group caches the window before the prompt's end (``memory/sliding_window.py``)."""
        if seq_id in self._seqs:
            raise DuplicateSequence(seq_id)
        token_ids = list(token_ids)
        n = len(token_ids)
        if n == 0:
            raise InvalidArgument(f"allocate(seq_id={seq_id!r}) needs at least 1 token, got 0")
        token_ids = check_token_ids("token_ids", token_ids, error=InvalidTokenId)
        num_queried = n  # the prefix cache is asked about every token, slotted now or later
        to_cache = n if num_tokens_to_cache is None else check_int(
            "num_tokens_to_cache", num_tokens_to_cache, minimum=0, maximum=n, error=InvalidArgument)
        hits, hashes = self._cached_prefix(token_ids, extra_key)
        num_hit = len(hits) * self.block_size
        if max_new_tokens is not None:  # only these tokens get their slots now
            num_new = check_int("max_new_tokens", max_new_tokens, minimum=1, error=InvalidArgument)
            n = min(n, num_hit + num_new)
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
        """A new sequence whose table starts with ``hits``: cached blocks, after NULL_BLOCK entries where a
        sliding window's hit skips blocks its next token never reads. ``token_ids``: the tokens that get
        slots now; ``num_queried``: the tokens looked up (the stats count them)."""
        skipped = next((i for i, b in enumerate(hits) if b != NULL_BLOCK), len(hits))
        already_held = sum(self.pool.refcounts[b] > 0 for b in hits[skipped:])  # hits another table holds
        s = self._seqs[seq_id] = SequenceBlocks([], token_ids, hashes, extra_key, len(hits) * self.block_size,
                                                len(hits), num_skipped_blocks=skipped)
        self._reuse_cached_blocks(s, seq_id, hits, num_queried)
        self._used_slots -= (skipped + already_held) * self.block_size  # (take_new_blocks adds every token)

    def take_new_blocks(self, seq_id) -> None:
        """Give a just-adopted sequence new blocks for its tokens past its hits (full, but maybe the last)."""
        s = self._seq(seq_id)
        for _ in range(self.blocks_for(len(s.token_ids)) - len(s.table)):
            s.table.append(self._take_block(seq_id))
        self._used_slots += len(s.token_ids)
        self._emit("allocate", seq_id, s.table, len(s.token_ids))

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
        if not self.enable_prefix_caching:
            return
        upto = min(num_tokens // self.block_size, len(s.hashes))
        if upto <= s.num_cached_blocks:
            return
        first = s.num_cached_blocks
        keep = self._reachable_blocks(seq_id, first, upto)  # None: every full block
        new_full = zip(s.table[first:upto], s.hashes[first:upto], keep or [True] * (upto - first))
        # (a NULL_BLOCK entry is a window's skipped block: nothing to cache)
        newly_cached = [b for b, h, k in new_full if k and b != NULL_BLOCK and self.pool.cache(b, h)]
        s.num_cached_blocks = upto
        if newly_cached:  # these blocks can be reused from now on
            self._emit("cache", seq_id, newly_cached)

    def _reachable_blocks(self, seq_id, first: int, end: int) -> list[bool] | None:
        """Which of blocks ``[first, end)`` a later prefix hit could use, so are worth caching: all of
        them for full attention (None). A sliding-window group keeps fewer (``memory/sliding_window.py``)."""
        return None

    def _reuse_cached_blocks(self, s: SequenceBlocks, seq_id, hits: list[int], num_queried: int) -> None:
        """Put the cache hits first in ``s``'s table, before any new block is taken (taking one
        must never evict them). ``num_queried``: the tokens looked up (the stats count them)."""
        if self.enable_prefix_caching:
            self.stats.prefix_cache_queries += num_queried
            self.stats.prefix_cache_hits += s.num_cached_tokens
        for b in hits:  # (a hit waiting in the free queue leaves it: a finished sequence's cached block)
            if b != NULL_BLOCK:
                self.pool.touch(b)
            s.table.append(b)
        if hits:
            self._emit("hit", seq_id, hits, s.num_cached_tokens)

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
        block was shared and had to be copied first.

        ``num_lookahead_tokens``: slots for that many positions after them whose tokens are not verified
        (speculative drafts, ``engine/spec_decode``): they get blocks (a "draft" event) but no token and no
        hash, so no block of theirs is ever cached; blocks they leave unused stay in the table for the next
        tokens (vLLM: ``allocate_slots(num_new_tokens)`` counts the drafts, ``cache_blocks`` stops at
        ``request.num_tokens``)."""
        s = self._seq(seq_id)
        token_ids = check_token_ids("token_ids", token_ids, error=InvalidTokenId)
        ahead = check_int("num_lookahead_tokens", num_lookahead_tokens, minimum=0, error=InvalidArgument)
        if not token_ids and not ahead:
            return None
        new_blocks, copy_tail = self._append_plan(s, len(token_ids) + ahead)
        free = self.pool.num_free_blocks
        if new_blocks + copy_tail > free:
            cow = " (with a copy-on-write of its shared last block)" if copy_tail else ""
            raise OutOfBlocks(new_blocks + copy_tail, free, f"append_tokens(seq_id={seq_id!r}, "
                              f"{len(token_ids)} tokens) at {len(s.token_ids)} tokens{cow}")
        # (hashed before any change: all-or-nothing)
        new_hashes = self._hashes_of_new_full_blocks(s, token_ids) if self.enable_prefix_caching else None
        cow = self._copy_on_write(s, seq_id) if copy_tail else None  # the last block is shared: copy it
        copied = len(s.token_ids) % self.block_size if copy_tail else 0  # the tokens the copy holds
        for _ in range(new_blocks):  # the blocks these tokens open
            s.table.append(self._take_block(seq_id))
        s.token_ids.extend(token_ids)
        self._used_slots += len(token_ids) + copied
        if self.record_events:  # the blocks the tokens went to: the last one if it had room, and the new ones
            n, bs = len(s.token_ids), self.block_size
            if token_ids:
                self._emit("append", seq_id, s.table[(n - len(token_ids)) // bs:self.blocks_for(n)], n)
            if ahead:
                self._emit("draft", seq_id, s.table[n // bs:self.blocks_for(n + ahead)], n + ahead)
        if new_hashes:  # the tokens filled blocks: later prompts may reuse them
            s.hashes.extend(new_hashes)
            self._cache_full_blocks(s, seq_id, len(s.token_ids))
        return cow

    def _hashes_of_new_full_blocks(self, s: SequenceBlocks, token_ids: list[int]) -> list[bytes]:
        """The chained hash of each block that ``token_ids``, appended to ``s``, fill (caching on)."""
        bs, n = self.block_size, len(s.token_ids)
        first, end = n // bs, (n + len(token_ids)) // bs  # the blocks [first, end) become full
        if first == end:
            return []
        tokens = s.token_ids[first * bs:] + token_ids
        hashes, parent = [], s.hashes[-1] if s.hashes else None
        for i in range(end - first):
            parent = hash_block(parent, tokens[i * bs:(i + 1) * bs], s.extra_key)
            hashes.append(parent)
        return hashes

    def _copy_on_write(self, s: SequenceBlocks, seq_id) -> CowAction:
        """Give ``s`` its own copy of its shared, partly filled last block."""
        if not self.num_free_blocks:
            raise OutOfBlocks(1, 0, f"copy-on-write for append_token(seq_id={seq_id!r})")
        i = len(s.token_ids) // self.block_size  # the block of its last token
        src, dst = s.table[i], self._take_block(seq_id)
        self.pool.release(src)  # its refcount was > 1: the other tables still hold it
        s.table[i] = dst
        self.stats.num_cow += 1
        self._emit("cow", seq_id, (src, dst), len(s.token_ids))
        return CowAction(src, dst)

    def record(self, kind: str, seq_id, block_ids=(), num_tokens: int = 0) -> None:
        """Log an event that changes no block (speculative decoding's "verify", "accept", "rollback")."""
        self._emit(kind, seq_id, block_ids, num_tokens)

    def remove_skipped_blocks(self, seq_id, num_computed_tokens: int) -> None:
        """Free the blocks no later token reads. Full attention reads every earlier token: nothing to
        free (as vLLM's ``remove_skipped_blocks`` for a FullAttentionManager). A sliding-window group
        frees its old blocks through :meth:`free_blocks_before` (``paged_lab.memory.hybrid``)."""

    def free_blocks_before(self, seq_id, num_blocks: int) -> list[int]:
        """Give the first ``num_blocks`` blocks of ``seq_id``'s table back to the pool: a sliding window
        no longer reads their tokens. Their entries become NULL_BLOCK, so the table keeps its length and
        ``table[pos // block_size]`` its meaning. Walks back from block ``num_blocks - 1`` and stops at the
        first entry already null (as vLLM's ``_remove_blocks_in_range``), freeing in that order. Returns
        the blocks given back (those another table shares stay held by it)."""
        s = self._seq(seq_id)
        upto = check_int("num_blocks", num_blocks, minimum=0, maximum=len(s.table), error=InvalidArgument)
        if upto <= s.num_skipped_blocks:
            return []
        dropped = s.table[upto - 1:s.num_skipped_blocks - 1 if s.num_skipped_blocks else None:-1]
        freed = self.pool.free_blocks(dropped, checked=True)
        if freed:  # their tokens no longer occupy a slot (a block another table holds keeps its tokens)
            gone = set(freed)
            self._used_slots -= sum(self._tokens_in_block(s, i) for i in range(s.num_skipped_blocks, upto)
                                    if s.table[i] in gone)
        s.table[s.num_skipped_blocks:upto] = [NULL_BLOCK] * (upto - s.num_skipped_blocks)
        s.num_skipped_blocks = upto
        self._emit("skip", seq_id, dropped, len(s.token_ids))
        return freed

    def fork(self, parent_id, child_id) -> list[int]:
        """The child shares every block of the parent (refcounts go up; nothing is copied yet)."""
        p = self._seq(parent_id)
        if child_id in self._seqs:
            raise DuplicateSequence(child_id)
        for b in p.table[p.num_skipped_blocks:]:
            self.pool.touch(b)
        self._seqs[child_id] = SequenceBlocks(list(p.table), list(p.token_ids), list(p.hashes), p.extra_key,
                                              p.num_cached_tokens, p.num_cached_blocks, p.num_skipped_blocks)
        self._emit("fork", child_id, p.table, len(p.token_ids), parent_id)
        return list(p.table)

    def free(self, seq_id) -> None:
        """Drop the sequence's table, its tail block first. The blocks nobody else holds join the free
        queue (where: the pool's ``reuse`` rule), so a shared prefix outlives its tail; cached content
        stays until the block is handed out again."""
        s = self._seq(seq_id)
        held = s.table[s.num_skipped_blocks:] if s.num_skipped_blocks else s.table  # (not the null entries)
        freed = self.pool.free_blocks(reversed(held), checked=True)  # tail first (as vLLM's free)
        if len(freed) == len(s.table):  # nothing was shared or skipped: all its slots are free now
            self._used_slots -= len(s.token_ids)
        else:
            freed = set(freed)
            self._used_slots -= sum(self._tokens_in_block(s, i) for i, b in enumerate(s.table) if b in freed)
        del self._seqs[seq_id]
        self._emit("free", seq_id, s.table, len(s.token_ids))

    def reset_prefix_cache(self) -> int:
        """Forget every cached hash (e.g. after new weights). Returns how many blocks were cached."""
        for b in self.pool.block_hash:
            self._emit("evict", None, (b,))
        return self.pool.reset_cache()

    def reset(self, pool: bool = True) -> None:
        """Drop every table, every block free, the pool as new (``pool=False``: its owner resets it)."""
        self._seqs, self._used_slots = {}, 0
        if pool:
            self.pool.reset()
        self._emit("reset", None)

    # -- inspection ---------------------------------------------------------------------------
    def state(self) -> PoolState:
        """The live pool as a PoolState (what ``replay(bm.events, ...)`` must rebuild)."""
        tables = {sid: list(s.table) for sid, s in self._seqs.items()}
        num_tokens = {sid: len(s.token_ids) for sid, s in self._seqs.items()}
        return PoolState(self.num_blocks, list(self.pool.refcounts), tables, num_tokens,
                         list(self.pool.free_queue),
                         set(self.pool.block_hash), self.events[-1] if self.events else None)

    def check_invariants(self) -> None:
        """Raise BlockManagerError if a rule of ``paged_lab.memory.invariants`` is broken."""
        check_invariants(self)
