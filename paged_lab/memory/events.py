"""The event log: every change the BlockManager makes to the pool, in order, and a pure replay.

Kinds (the vocabulary of the figures):

=========  ==========================================================================================
hit        ``allocate`` reused cached blocks: ``block_ids`` are the reused blocks, ``num_tokens`` the
           reused tokens.
evict      a free block that still held cached content was taken for new content: ``block_ids=(b,)``.
allocate   a new sequence got its block table: ``block_ids`` is the whole table.
cow        copy-on-write: ``block_ids=(src, dst)``; the sequence's table now holds ``dst`` for ``src``.
append     one token was written into ``block_ids=(b,)``; when ``b`` is not yet the last block of
           the table it was just taken from the free queue. ``num_tokens`` is the new length.
fork       ``seq_id`` (the child) now shares every block of ``parent_id``: ``block_ids`` is its table.
free       the sequence finished; ``block_ids`` is its table, released last block first.
cache      full blocks got a prefix-cache hash (they can be reused from now on): ``block_ids``.
skip       a sliding window moved past leading blocks (``memory/hybrid.py``): ``block_ids`` went back to
           the pool (last first) and their table entries are now ``NULL_BLOCK``.
reset      every table was dropped and the pool is as new: all blocks free in id order, nothing cached
           (an aborted engine, ``BlockManager.reset``).
=========  ==========================================================================================

``replay(events, num_blocks, upto)`` rebuilds the pool from the log alone (refcounts, owners,
block tables, free-queue order, cached blocks); a test checks it equals the live manager.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from paged_lab.memory.block_pool import NULL_BLOCK

KINDS = ("hit", "evict", "allocate", "cow", "append", "fork", "free", "cache", "skip", "reset")


@dataclass(frozen=True, slots=True)
class Event:
    index: int  # position in the log
    kind: str  # one of KINDS
    seq_id: Hashable | None
    block_ids: tuple[int, ...] = ()
    num_tokens: int = 0  # the sequence's length after the operation (hit: the reused tokens)
    parent_id: Hashable | None = None  # fork only
    clock: int = 0  # the manager's ``clock`` when it happened (a scheduler sets it to its step)

    def describe(self) -> str:
        b = list(self.block_ids)
        text = {
            "hit": f"seq {self.seq_id!r} reuses cached blocks {b} ({self.num_tokens} tokens)",
            "evict": f"block {b[0] if b else '?'} loses its cached content",
            "allocate": f"seq {self.seq_id!r} gets block table {b} for {self.num_tokens} tokens",
            "cow": f"seq {self.seq_id!r} copies block {b[0]} -> {b[-1]} before writing (copy-on-write)",
            "append": f"seq {self.seq_id!r} writes token #{self.num_tokens} into block {b[0] if b else '?'}",
            "fork": f"seq {self.seq_id!r} forks from {self.parent_id!r}, sharing blocks {b}",
            "free": f"seq {self.seq_id!r} finishes; blocks {b} go back to the pool",
            "cache": f"blocks {b} are full and now in the prefix cache",
            "skip": f"seq {self.seq_id!r} no longer reads blocks {b} (out of its window): freed",
            "reset": "every sequence is dropped and every block is free again (the engine aborted)",
        }
        return text.get(self.kind, self.kind)


@dataclass
class BlockManagerStats:
    """Counters of what the event log records (kept even when ``record_events`` is off)."""

    prefix_cache_queries: int = 0  # prompt tokens looked up (vLLM counts in tokens)
    prefix_cache_hits: int = 0  # of those, tokens whose KV was reused
    num_cow: int = 0  # copy-on-write copies
    num_evictions: int = 0  # cached blocks overwritten with new content

    @property
    def hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0


class EventLog:
    """The writing half of the log, for a BlockManager (with ``sequences`` and ``pool``): ``events`` in
    order, each stamped with ``clock`` (a scheduler sets it to its step number); ``record_events=False``
    keeps none (the stats still count)."""

    def _start_log(self, record_events: bool) -> None:
        self.record_events, self.events, self.clock = record_events, [], 0
        self._events_dropped = 0  # events trim_events() dropped

    def _emit(self, kind: str, seq_id, block_ids=(), num_tokens: int = 0, parent_id=None) -> None:
        if self.record_events:
            self.events.append(Event(self._events_dropped + len(self.events), kind, seq_id, tuple(block_ids),
                                     num_tokens, parent_id, self.clock))

    def trim_events(self, max_events: int) -> None:
        """Bound the log (a long-lived engine's): ``keep_latest``; Event.index still counts from 0."""
        self._events_dropped += keep_latest(self.events, max_events)

    def state(self) -> PoolState:
        """The live pool as a PoolState: what ``replay(self.events, ...)`` must rebuild."""
        seqs, pool = self.sequences, self.pool
        tables = {sid: list(s.table) for sid, s in seqs.items()}
        num_tokens = {sid: len(s.token_ids) for sid, s in seqs.items()}
        return PoolState(pool.num_blocks, list(pool.refcounts), tables, num_tokens, list(pool.free_queue),
                         set(pool.block_hash), self.events[-1] if self.events else None)


@dataclass
class PoolState:
    """What the pool looks like after some prefix of the event log."""

    num_blocks: int
    refcounts: list[int]
    tables: dict[Hashable, list[int]] = field(default_factory=dict)
    num_tokens: dict[Hashable, int] = field(default_factory=dict)
    free_queue: list[int] = field(default_factory=list)  # next block to hand out first
    cached: set[int] = field(default_factory=set)  # blocks holding a prefix-cache hash
    last: Event | None = None  # the event that produced this state

    def owners(self) -> dict[int, list[Hashable]]:
        """Block id -> the sequences whose tables hold it (in table order of first appearance)."""
        out: dict[int, list[Hashable]] = {}
        for sid, table in self.tables.items():
            for b in table:
                if b != NULL_BLOCK:
                    out.setdefault(b, []).append(sid)
        return out

    def fill(self, block_size: int) -> list[int]:
        """Tokens held by each physical block (cached free blocks are full; other free blocks 0)."""
        out = [block_size if b in self.cached else 0 for b in range(self.num_blocks)]
        for sid, table in self.tables.items():
            n = self.num_tokens[sid]
            for i, b in enumerate(table):
                if b != NULL_BLOCK:
                    out[b] = max(0, min(block_size, n - i * block_size))
        return out


def keep_latest(events: list, max_events: int) -> int:
    """Bound a log: once it holds ``2 * max_events`` events, drop all but the latest ``max_events`` (so it
    always keeps at least those, and trimming costs O(1) per event on average). Returns how many were
    dropped."""
    if len(events) < 2 * max_events:
        return 0
    dropped = len(events) - max_events
    del events[:dropped]
    return dropped


def replay(events: Iterable[Event], num_blocks: int, upto: int | None = None, reuse: str = "v1") -> PoolState:
    """Rebuild the pool from the first ``upto`` events (all when None). Pure: reads only the log.
    ``reuse``: the free-queue rule of the pool that wrote the log (``BlockPool``'s). The log must start at
    its first event (a bounded log, ``BlockManager.trim_events``, may have dropped the oldest ones)."""
    events = list(events)
    if events and events[0].index != 0:
        raise ValueError(f"events: the log starts at event {events[0].index}; the events before it were "
                         f"dropped (a long-lived engine keeps the latest: BlockManager.trim_events), so the "
                         f"pool cannot be rebuilt")
    pool = _Replayer(num_blocks, reuse)
    for i, ev in enumerate(events):
        if upto is not None and i >= upto:
            break
        pool.apply(ev)
    pool.state.free_queue = list(pool.free)
    return pool.state


class _Replayer:
    """The pool as the log tells it: refcounts, an ordered free queue, tables, cached blocks."""

    def __init__(self, num_blocks: int, reuse: str = "v1"):
        self.refcounts = [0] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front first
        self.reuse = reuse
        self.state = PoolState(num_blocks, self.refcounts)

    def take(self, b: int) -> None:
        if self.refcounts[b] == 0:
            self.free.pop(b, None)
        self.refcounts[b] += 1

    def release(self, blocks) -> None:
        """As ``BlockPool.free_blocks``: uncached blocks to the front (reuse "v1"), the rest to the back."""
        front = []
        for b in blocks:
            self.refcounts[b] -= 1
            if self.refcounts[b] == 0:
                self.free[b] = None
                if self.reuse == "v1" and b not in self.state.cached:
                    front.append(b)
        for b in reversed(front):
            self.free.move_to_end(b, last=False)

    def apply(self, ev: Event) -> None:
        self.state.last = ev
        self.HANDLERS[ev.kind](self, ev.seq_id, ev.block_ids, ev)

    def _allocate(self, sid, ids, ev) -> None:  # a new table: fresh or cached blocks (a window's hit: nulls)
        for b in ids:
            if b != NULL_BLOCK:
                self.take(b)
        self.state.tables[sid] = list(ids)
        self.state.num_tokens[sid] = ev.num_tokens

    def _append(self, sid, ids, ev) -> None:
        table = self.state.tables[sid]
        for b in ids:  # the blocks the tokens landed in: the last one, and those just taken from the queue
            if not table or table[-1] != b:
                self.take(b)
                table.append(b)
        self.state.num_tokens[sid] = ev.num_tokens

    def _cow(self, sid, ids, ev) -> None:
        src, dst = ids
        table = self.state.tables[sid]
        table[table.index(src)] = dst
        self.take(dst)
        self.release([src])

    def _free(self, sid, ids, ev) -> None:
        self.release(b for b in reversed(self.state.tables.pop(sid)) if b != NULL_BLOCK)
        self.state.num_tokens.pop(sid)

    def _skip(self, sid, ids, ev) -> None:
        table = self.state.tables[sid]
        for b in ids:
            table[table.index(b)] = NULL_BLOCK
        self.release(ids)

    def _evict(self, sid, ids, ev) -> None:
        self.state.cached.difference_update(ids)

    def _cache(self, sid, ids, ev) -> None:
        self.state.cached.update(ids)

    def _reset(self, sid, ids, ev) -> None:
        self.refcounts[:] = [0] * len(self.refcounts)
        self.free = OrderedDict.fromkeys(range(len(self.refcounts)))
        self.state.tables.clear(), self.state.num_tokens.clear(), self.state.cached.clear()

    def _hit(self, sid, ids, ev) -> None:
        pass  # the blocks are taken by the "allocate" event that follows

    # What each kind of event (KINDS) does to the pool. A fork is a new table sharing the parent's blocks.
    HANDLERS = {"hit": _hit, "evict": _evict, "allocate": _allocate, "cow": _cow, "append": _append,
                "fork": _allocate, "free": _free, "cache": _cache, "skip": _skip, "reset": _reset}
