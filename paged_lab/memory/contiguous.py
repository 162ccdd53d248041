"""ContiguousAllocator: the old manager of the locker story.

Every admitted request reserves ``max_seq_len`` slots *in a row* (first fit in one linear memory)
and keeps them until it finishes, however few tokens it ends up writing. That is how serving
systems worked before paging (e.g. Orca/FasterTransformer style pre-allocation), and it wastes
memory three ways:

* reservation + internal fragmentation: reserved slots that hold no token (yet, or ever);
* external fragmentation: free slots stranded in holes too small for another ``max_seq_len``.

By default every reservation has the same size (``max_seq_len``), so the only holes are whole
reservations and the tail of the pool. ``allocate(..., reserve=n)`` lets a request reserve its own
size instead (for example its prompt plus its ``max_tokens``): then requests of
different sizes come and go and leave holes of different sizes between them, which can add up to
enough free slots for a newcomer while none of them alone is big enough (``largest_hole``,
``stranded_slots``).

It answers the same interface as the BlockManager, the one the Scheduler drives
(``paged_lab.memory.allocator.KVCacheAllocator``: ``can_allocate``, ``allocate``, ``append_tokens``,
``free`` ...), with ``block_size = 1``: a block table lists the reserved slots, so
``slot = block_table[pos]``.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence

from paged_lab._checks import check_int
from paged_lab.memory.errors import DuplicateSequence, InvalidArgument, OutOfBlocks, UnknownSequence


class ContiguousAllocator:
    """``num_slots`` token slots; each request reserves ``max_seq_len`` consecutive ones.

    >>> old = ContiguousAllocator(num_slots=60, max_seq_len=12)
    >>> old.allocate("A", [1, 2, 3])[:3], old.reserved_slots, old.used_slots
    ([0, 1, 2], 12, 3)
    """

    block_size = 1  # a "block" is one slot, so block tables and slot mappings coincide

    def __init__(self, num_slots: int, max_seq_len: int):
        self.num_slots = check_int("num_slots", num_slots, minimum=1)
        self.max_seq_len = check_int("max_seq_len", max_seq_len, minimum=1)
        if max_seq_len > num_slots:
            raise ValueError(f"max_seq_len={max_seq_len} must be <= num_slots={num_slots}: "
                             "not even one reservation would fit")
        self.num_blocks = num_slots
        self.clock = 0  # same hook as BlockManager.clock (a scheduler sets it)
        self._start: dict[Hashable, int] = {}  # seq_id -> first slot of its reservation
        self._tokens: dict[Hashable, int] = {}  # seq_id -> slots holding tokens
        self._starts: list[int] = []  # sorted reservation starts (first-fit scans the gaps)
        self._size_at: dict[int, int] = {}  # reservation start -> its size in slots
        self._reserved = 0  # slots in all reservations
        self._used = 0

    def __repr__(self) -> str:
        return f"ContiguousAllocator(num_slots={self.num_slots}, max_seq_len={self.max_seq_len})"

    # -- queries -------------------------------------------------------------------------------
    @property
    def max_slots_per_seq(self) -> int:
        """The most slots one sequence can hold: one reservation of ``max_seq_len``."""
        return self.max_seq_len

    @property
    def max_slots_per_seq_reason(self) -> str:
        return f"max_seq_len={self.max_seq_len}"

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._start

    def _check(self, seq_id) -> int:
        try:
            return self._start[seq_id]
        except (KeyError, TypeError):
            raise UnknownSequence(seq_id) from None

    def holes(self) -> list[tuple[int, int]]:
        """Free runs ``(start, length)`` in address order."""
        out, pos = [], 0
        for s in self._starts:
            if s > pos:
                out.append((pos, s - pos))
            pos = s + self._size_at[s]
        if pos < self.num_slots:
            out.append((pos, self.num_slots - pos))
        return out

    @property
    def largest_hole(self) -> int:
        """The most slots in a row that one more reservation could get (0 when full)."""
        return max((n for _, n in self.holes()), default=0)

    def stranded_slots(self, reserve: int) -> int:
        """Free slots in holes too small for a reservation of ``reserve`` slots: free, yet of no
        use to such a request (external fragmentation as that request sees it)."""
        reserve = self._reserve_size(reserve, "stranded_slots")
        return sum(n for _, n in self.holes() if n < reserve)

    def first_fit(self, size: int) -> int | None:
        """Where a reservation of ``size`` slots would go: the start of the first hole (in address
        order) with at least ``size`` slots, or None when no hole is big enough."""
        pos = 0
        for s in self._starts:
            if s - pos >= size:
                return pos
            pos = s + self._size_at[s]
        return pos if self.num_slots - pos >= size else None

    def _reserve_size(self, reserve, where: str) -> int:
        """``reserve`` checked (default ``max_seq_len``): an int in ``1..max_seq_len``."""
        if reserve is None:
            return self.max_seq_len
        if isinstance(reserve, bool) or not isinstance(reserve, int) or not 1 <= reserve <= self.max_seq_len:
            raise ValueError(f"{where}: reserve must be an integer in 1..max_seq_len={self.max_seq_len}, "
                             f"got {reserve!r}")
        return reserve

    @property
    def seq_ids(self) -> list[Hashable]:
        return list(self._start)

    def regions(self) -> list[tuple[Hashable, int, int]]:
        """``(seq_id, start, num_tokens)`` of every reservation, in address order."""
        by_start = {s: sid for sid, s in self._start.items()}
        return [(by_start[s], s, self._tokens[by_start[s]]) for s in self._starts]

    def reservation(self, seq_id) -> int:
        """How many slots ``seq_id`` reserved (``max_seq_len`` unless it asked for its own size)."""
        return self._size_at[self._check(seq_id)]

    def num_tokens(self, seq_id) -> int:
        self._check(seq_id)
        return self._tokens[seq_id]

    def num_cached_tokens(self, seq_id) -> int:
        self._check(seq_id)
        return 0  # no prefix cache: nothing is shared

    def block_table(self, seq_id) -> list[int]:
        s = self._check(seq_id)
        return list(range(s, s + self._size_at[s]))

    def slot_mapping(self, seq_id, start: int = 0, end: int | None = None) -> list[int]:
        s, n = self._check(seq_id), self._tokens[seq_id]
        end = n if end is None else end
        if not 0 <= start <= end <= n:
            raise ValueError(f"slot_mapping needs 0 <= start <= end <= num_tokens={n}, got {start}, {end}")
        return list(range(s + start, s + end))

    @property
    def num_free_blocks(self) -> int:
        return self.num_slots - self._reserved

    @property
    def reserved_slots(self) -> int:
        return self._reserved

    @property
    def used_slots(self) -> int:
        return self._used

    @property
    def usage(self) -> float:
        """Fraction of all slots that hold a token."""
        return self._used / self.num_slots

    @property
    def utilization(self) -> float:
        """Slots holding tokens / slots reserved (0.0 when nothing is reserved)."""
        return self._used / self.reserved_slots if self._starts else 0.0

    @property
    def internal_fragmentation(self) -> int:
        """Reserved slots that hold no token."""
        return self.reserved_slots - self._used

    @property
    def external_fragmentation(self) -> int:
        """Free slots in holes too small for one more reservation of ``max_seq_len``."""
        return sum(n for _, n in self.holes() if n < self.max_seq_len)

    # -- operations ----------------------------------------------------------------------------
    def can_allocate(self, tokens: int | Sequence[int], reserve: int | None = None) -> bool:
        """Would ``allocate`` succeed: the tokens fit the reservation, and a hole of
        ``reserve`` slots (default ``max_seq_len``) exists?"""
        size = self._reserve_size(reserve, "can_allocate")
        n = tokens if isinstance(tokens, int) else len(tokens)
        return n <= size and self.first_fit(size) is not None

    def allocate(self, seq_id, token_ids: Sequence[int], reserve: int | None = None,
                 num_tokens_to_cache: int | None = None, max_new_tokens: int | None = None,
                 num_prompt_tokens: int | None = None) -> list[int]:
        """Reserve ``reserve`` slots (default ``max_seq_len``) in a row, first fit, and write the
        prompt into them (its first ``max_new_tokens`` only, when given: the rest follow through
        :meth:`append_tokens`). All or nothing: on any error nothing changes. (``num_tokens_to_cache``,
        ``num_prompt_tokens``: as the BlockManager's; there is no prefix cache here.)"""
        if seq_id in self._start:
            raise DuplicateSequence(seq_id)
        size = self._reserve_size(reserve, f"allocate(seq_id={seq_id!r})")
        n = len(token_ids)
        if n == 0:
            raise ValueError(f"allocate(seq_id={seq_id!r}) needs at least 1 token, got 0")
        if n > size:
            limit = f"max_seq_len={size}" if reserve is None else f"reserve={size}"
            raise ValueError(f"token_ids: {n} tokens exceed {limit}")
        start = self.first_fit(size)
        if start is None:
            raise OutOfBlocks(size, self.num_free_blocks,
                              f"allocate(seq_id={seq_id!r}) reserving {size} slots in a row "
                              f"(largest hole {self.largest_hole})")
        if max_new_tokens is not None:
            n = min(n, max_new_tokens)
        bisect.insort(self._starts, start)
        self._size_at[start] = size
        self._reserved += size
        self._start[seq_id], self._tokens[seq_id] = start, n
        self._used += n
        return list(range(start, start + size))

    def can_append(self, seq_id, num_tokens: int = 1) -> bool:
        if seq_id not in self._start:
            return False
        return self._tokens[seq_id] + num_tokens <= self._size_at[self._start[seq_id]]

    def append_token(self, seq_id, token_id: int) -> None:
        """One more token in the reservation; never copies (nothing is shared)."""
        return self.append_tokens(seq_id, [token_id])

    def append_tokens(self, seq_id, token_ids: Sequence[int], num_lookahead_tokens: int = 0) -> None:
        """More tokens in the reservation; never copies (nothing is shared). No draft slots (speculative
        decoding runs on the paged BlockManager)."""
        if num_lookahead_tokens:
            raise InvalidArgument(f"num_lookahead_tokens must be 0 for a contiguous reservation, got "
                                  f"{num_lookahead_tokens!r}")
        size = self._size_at[self._check(seq_id)]
        if self._tokens[seq_id] + len(token_ids) > size:
            raise OutOfBlocks(1, 0, f"append_token(seq_id={seq_id!r}) past its reservation of {size} slots "
                                    f"(max_seq_len={self.max_seq_len})")
        self._tokens[seq_id] += len(token_ids)
        self._used += len(token_ids)
        return None

    def cache_blocks(self, seq_id, num_tokens: int) -> None:
        """Nothing to do: a contiguous reservation is never shared, so there is no prefix cache."""

    def remove_skipped_blocks(self, seq_id, num_computed_tokens: int) -> None:
        """Nothing to do: every layer attends to every earlier token (full attention)."""

    def fork(self, parent_id, child_id) -> None:
        raise ValueError("ContiguousAllocator cannot share slots between sequences; "
                         "fork (parallel sampling) needs the paged BlockManager")

    def reset(self) -> None:
        """Drop every reservation: every slot free (an aborted engine's, ``Scheduler.abort_all``)."""
        self._start.clear(), self._tokens.clear(), self._starts.clear(), self._size_at.clear()
        self._reserved = self._used = 0

    def free(self, seq_id) -> None:
        s = self._check(seq_id)
        self._starts.pop(bisect.bisect_left(self._starts, s))
        self._reserved -= self._size_at.pop(s)
        self._used -= self._tokens.pop(seq_id)
        del self._start[seq_id]
