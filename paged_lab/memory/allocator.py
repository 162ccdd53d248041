"""KVCacheAllocator: what the Scheduler (and ``simulate()``) asks of a KV-cache allocator.

Two classes answer it: the paged :class:`~paged_lab.memory.BlockManager` (blocks of ``block_size``
slots, anywhere in the pool) and the old :class:`~paged_lab.memory.ContiguousAllocator` (one
reservation of ``max_seq_len`` slots in a row per request, ``block_size = 1``). The Scheduler holds one
as ``scheduler.allocator`` and never asks which kind it is: the same queues, admission and preemption
run over either, which is how notebooks 02 and 05 compare the two memory managers on one workload.

Every operation is all-or-nothing: when ``allocate`` or ``append_tokens`` raises ``OutOfBlocks``,
nothing changed, so the Scheduler can preempt someone and try again.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from paged_lab.memory.block_manager import CowAction

@runtime_checkable
class KVCacheAllocator(Protocol):
    """The KV-cache allocator one Scheduler drives (BlockManager, ContiguousAllocator, HybridBlockManager)."""

    block_size: int  # token slots per block (1 for the contiguous allocator: a block is one slot)
    num_blocks: int  # blocks in the pool: num_blocks x block_size slots in all
    clock: int  # stamped on logged events; the Scheduler sets it to its step number

    @property
    def max_slots_per_seq(self) -> int:
        """The most slots one sequence can ever hold (the whole pool, or one reservation)."""

    @property
    def max_slots_per_seq_reason(self) -> str:
        """What sets ``max_slots_per_seq``, for error messages: ``"num_blocks=4 x block_size=4"``."""

    # -- admission ---------------------------------------------------------------------------
    def can_allocate(self, tokens: int | Sequence[int]) -> bool:
        """Would ``allocate`` succeed for a prompt of ``tokens`` (a count, or the token ids)?"""

    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], *, num_tokens_to_cache: int | None = None,
                 max_new_tokens: int | None = None, num_prompt_tokens: int | None = None) -> list[int]:
        """Give a new sequence slots for its prompt (its first ``max_new_tokens`` after any prefix-cache
        hit, when given). ``num_prompt_tokens``: how many of ``token_ids`` are the prompt (a recomputed
        request brings its outputs too; a sliding-window group caches the window before the prompt's end).
        Returns its block table."""

    # -- every step --------------------------------------------------------------------------
    def append_tokens(self, seq_id: Hashable, token_ids: Sequence[int],
                      num_lookahead_tokens: int = 0) -> CowAction | None:
        """Slots for the next tokens of ``seq_id`` (and for ``num_lookahead_tokens`` draft positions after
        them: speculative decoding, the BlockManager only); raises ``OutOfBlocks`` (changing nothing) when
        they do not fit. Returns the block copy to make first when its last block was shared."""

    def remove_skipped_blocks(self, seq_id: Hashable, num_computed_tokens: int) -> None:
        """Give back the blocks no later token of ``seq_id`` reads, once ``num_computed_tokens`` are computed:
        a sliding-window layer group's blocks before its window (``HybridBlockManager``); nothing for full
        attention (BlockManager, ContiguousAllocator), as vLLM's ``remove_skipped_blocks`` for it."""

    def cache_blocks(self, seq_id: Hashable, num_tokens: int) -> None:
        """Offer to the prefix cache the full blocks among the first ``num_tokens`` tokens (KV computed)."""

    def free(self, seq_id: Hashable) -> None:
        """Give back every slot of ``seq_id``."""

    def fork(self, parent_id: Hashable, child_id: Hashable) -> list[int]:
        """``child_id`` shares every block of ``parent_id`` (parallel sampling)."""

    def reset(self) -> None:
        """Drop every sequence and free every slot at once, whatever state an interrupted operation left
        (``Scheduler.abort_all``); a prefix cache is emptied too."""

    # -- what a sequence holds ---------------------------------------------------------------
    def __contains__(self, seq_id: object) -> bool: ...

    @property
    def seq_ids(self) -> list[Hashable]: ...

    def num_tokens(self, seq_id: Hashable) -> int:
        """Tokens of ``seq_id`` that have a slot."""

    def num_cached_tokens(self, seq_id: Hashable) -> int:
        """Prompt tokens whose KV ``allocate`` found in the prefix cache."""

    def block_table(self, seq_id: Hashable) -> list[int]:
        """``seq_id``'s blocks in logical order: token ``pos`` lives in slot
        ``table[pos // block_size] * block_size + pos % block_size``."""

    # -- what the pool holds (simulate()'s timeline) -------------------------------------------
    @property
    def used_slots(self) -> int:
        """Slots that hold a token (a slot shared by several sequences counts once)."""

    @property
    def reserved_slots(self) -> int:
        """Slots given to some sequence, holding a token or not."""

    @property
    def external_fragmentation(self) -> int:
        """Free slots that no new request could use (0 for paged memory: any free block fits anyone)."""


class PagedPoolSlots:
    """What a paged pool holds, for admission and ``simulate()``'s timeline: one home for the BlockManager
    and the HybridBlockManager (each has ``pool``, ``num_blocks``, ``block_size`` and ``empty_slots``)."""

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_used_blocks

    @property
    def reserved_slots(self) -> int:
        """Slots of the blocks some table holds, whether they hold a token yet or not."""
        return self.pool.num_used_blocks * self.block_size

    @property
    def used_slots(self) -> int:
        """Slots that hold a token of a live sequence, a shared slot once: the held blocks' slots but the
        empty ones (computed from the tables, never counted by hand, so it cannot drift)."""
        return self.reserved_slots - self.empty_slots

    @property
    def usage(self) -> float:
        """Fraction of all token slots that hold a token of a live sequence (shared slots once)."""
        return self.used_slots / (self.num_blocks * self.block_size)

    @property
    def external_fragmentation(self) -> int:
        """Free slots no request can use: none. Any free block takes any sequence's next tokens."""
        return 0
