"""Block tables: what a BlockManager knows about each sequence, and every question it answers about them.

A sequence's KV cache lives in fixed-size *blocks* of ``block_size`` token slots. Its *block table* lists the
physical block ids in logical order, so token ``pos`` lives in slot

    slot = block_table[pos // block_size] * block_size + pos % block_size

:class:`BlockTables` holds the tables over a ``BlockPool`` and reads them (no operation changes anything
here); the operations that write them, allocate, append, copy-on-write, fork, free, are the BlockManager's
(``memory/block_manager.py``), its subclass.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from paged_lab.kv_math import cdiv
from paged_lab.memory.allocator import PagedPoolSlots
from paged_lab.memory.block_pool import BlockPool
from paged_lab.memory.errors import InvalidArgument, InvalidBlockConfig, UnknownSequence


def slot_for(pos: int, block_table: Sequence[int], block_size: int) -> int:
    """The physical slot of token position ``pos``: its block's id x block_size + its offset in the block."""
    return block_table[pos // block_size] * block_size + pos % block_size


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


class BlockTables(PagedPoolSlots):
    """The block tables of many sequences over one pool of ``num_blocks`` blocks, and their reads (what the
    pool holds, ``used_slots`` and ``usage``: ``PagedPoolSlots``).

    ``reuse``: which freed block the pool hands out next (``BlockPool``: ``"v1"``, or the simpler ``"lru"``).
    ``pool``: a BlockPool shared with other managers (one per layer group, ``memory/hybrid.py``); by default
    the tables get a new one."""

    def __init__(self, num_blocks: int, block_size: int, reuse: str = "v1", pool: BlockPool | None = None):
        self.pool = BlockPool(num_blocks, block_size, reuse) if pool is None else pool
        if (self.pool.num_blocks, self.pool.block_size) != (num_blocks, block_size):
            raise InvalidBlockConfig(f"pool: holds {self.pool.num_blocks} blocks of {self.pool.block_size} "
                                     f"slots, but num_blocks={num_blocks}, block_size={block_size}")
        self.num_blocks, self.block_size = self.pool.num_blocks, self.pool.block_size
        self._seqs: dict[Hashable, SequenceBlocks] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_blocks={self.num_blocks}, block_size={self.block_size})"

    @property
    def max_slots_per_seq(self) -> int:
        """The most slots one sequence can hold: every block of the pool."""
        return self.num_blocks * self.block_size

    @property
    def max_slots_per_seq_reason(self) -> str:
        return f"num_blocks={self.num_blocks} x block_size={self.block_size}"

    @property
    def empty_slots(self) -> int:
        """Slots of held blocks that hold no token yet: the end of each table's last block (every other
        block of a table is full), a last block that forked tables share counted once. (A table an interrupt
        left empty, mid-``allocate``, counts none: the engine resets the manager after the step.)"""
        bs = self.block_size
        return sum({s.table[-1]: -len(s.token_ids) % bs for s in self._seqs.values() if s.table}.values())

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._seqs

    @property
    def seq_ids(self) -> list[Hashable]:
        return list(self._seqs)

    @property
    def sequences(self) -> Mapping[Hashable, SequenceBlocks]:
        """seq_id -> its SequenceBlocks, a read-only view (the invariant checks and the event log read it)."""
        return MappingProxyType(self._seqs)

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

    def slot_mapping(self, seq_id, start: int = 0, end: int | None = None) -> list[int]:
        """Physical slot of each token position in ``[start, end)`` (default: every token)."""
        s = self._seq(seq_id)
        n = len(s.token_ids)
        end = n if end is None else end
        if not 0 <= start <= end <= n:
            raise InvalidArgument(f"slot_mapping needs 0 <= start <= end <= num_tokens={n}, "
                                  f"got start={start}, end={end}")
        return [slot_for(pos, s.table, self.block_size) for pos in range(start, end)]
