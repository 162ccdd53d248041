"""ContiguousAllocator: the old manager of the locker story.

Every admitted request reserves ``max_seq_len`` slots *in a row* (first fit in one linear memory)
and keeps them until it finishes, however few tokens it ends up writing. That is how serving
systems worked before paging (e.g. Orca/FasterTransformer style pre-allocation), and it wastes
memory three ways:

* reservation + internal fragmentation: reserved slots that hold no token (yet, or ever);
* external fragmentation: free slots stranded in holes too small for another ``max_seq_len``.

It speaks the same subset of the BlockManager API that the Scheduler uses (``can_allocate``,
``allocate``, ``can_append``, ``append_token``, ``free``, ``usage`` ...), with ``block_size = 1``:
a block table lists the reserved slots, so ``slot = block_table[pos]``.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence

from paged_lab._checks import check_int
from paged_lab.memory.errors import DuplicateSequence, OutOfBlocks, UnknownSequence


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
        self._used = 0

    # -- queries -------------------------------------------------------------------------------
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
            pos = s + self.max_seq_len
        if pos < self.num_slots:
            out.append((pos, self.num_slots - pos))
        return out

    def _first_fit(self) -> int | None:
        pos = 0
        for s in self._starts:
            if s - pos >= self.max_seq_len:
                return pos
            pos = s + self.max_seq_len
        return pos if self.num_slots - pos >= self.max_seq_len else None

    @property
    def seq_ids(self) -> list[Hashable]:
        return list(self._start)

    def regions(self) -> list[tuple[Hashable, int, int]]:
        """``(seq_id, start, num_tokens)`` of every reservation, in address order."""
        by_start = {s: sid for sid, s in self._start.items()}
        return [(by_start[s], s, self._tokens[by_start[s]]) for s in self._starts]

    def num_tokens(self, seq_id) -> int:
        self._check(seq_id)
        return self._tokens[seq_id]

    def num_cached_tokens(self, seq_id) -> int:
        self._check(seq_id)
        return 0  # no prefix cache: nothing is shared

    def block_table(self, seq_id) -> list[int]:
        s = self._check(seq_id)
        return list(range(s, s + self.max_seq_len))

    def slot_mapping(self, seq_id, start: int = 0, end: int | None = None) -> list[int]:
        s, n = self._check(seq_id), self._tokens[seq_id]
        end = n if end is None else end
        if not 0 <= start <= end <= n:
            raise ValueError(f"slot_mapping needs 0 <= start <= end <= num_tokens={n}, got {start}, {end}")
        return list(range(s + start, s + end))

    @property
    def num_free_blocks(self) -> int:
        return self.num_slots - len(self._starts) * self.max_seq_len

    @property
    def reserved_slots(self) -> int:
        return len(self._starts) * self.max_seq_len

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
    def can_allocate(self, tokens: int | Sequence[int]) -> bool:
        n = tokens if isinstance(tokens, int) else len(tokens)
        return n <= self.max_seq_len and self._first_fit() is not None

    def allocate(self, seq_id, token_ids: Sequence[int]) -> list[int]:
        """Reserve ``max_seq_len`` slots in a row (first fit) and write the prompt into them."""
        if seq_id in self._start:
            raise DuplicateSequence(seq_id)
        n = len(token_ids)
        if n == 0:
            raise ValueError(f"allocate(seq_id={seq_id!r}) needs at least 1 token, got 0")
        if n > self.max_seq_len:
            raise ValueError(f"token_ids: {n} tokens exceed max_seq_len={self.max_seq_len}")
        start = self._first_fit()
        if start is None:
            raise OutOfBlocks(self.max_seq_len, self.num_free_blocks,
                              f"allocate(seq_id={seq_id!r}) reserving {self.max_seq_len} slots in a row")
        bisect.insort(self._starts, start)
        self._start[seq_id], self._tokens[seq_id] = start, n
        self._used += n
        return list(range(start, start + self.max_seq_len))

    def can_append(self, seq_id) -> bool:
        return self._tokens[seq_id] < self.max_seq_len if seq_id in self._start else False

    def append_token(self, seq_id, token_id: int) -> None:
        """One more token in the reservation; never copies (nothing is shared)."""
        self._check(seq_id)
        if self._tokens[seq_id] >= self.max_seq_len:
            raise OutOfBlocks(1, 0, f"append_token(seq_id={seq_id!r}) past max_seq_len={self.max_seq_len}")
        self._tokens[seq_id] += 1
        self._used += 1
        return None

    def fork(self, parent_id, child_id) -> None:
        raise ValueError("ContiguousAllocator cannot share slots between sequences; "
                         "fork (parallel sampling) needs the paged BlockManager")

    def free(self, seq_id) -> None:
        s = self._check(seq_id)
        self._starts.pop(bisect.bisect_left(self._starts, s))
        self._used -= self._tokens.pop(seq_id)
        del self._start[seq_id]
