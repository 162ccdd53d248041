"""FreeBlockQueue: the free block ids of a BlockPool, in the order they will be handed out.

Which block is reused next is the pool's rule (``block_pool.py``); how the queue makes each move in O(1)
is this file's, as vLLM keeps its ``FreeKVCacheBlockQueue`` apart from its pool
(``vllm/v1/core/kv_cache_utils.py:246``, vllm 0.32.0).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

NOT_QUEUED = -1  # prev[b] of a block that is not in the queue


class FreeBlockQueue:
    """Free block ids in the order they will be handed out: O(1) ``popleft``, ``append``,
    ``appendleft`` and ``remove``, whatever the number of blocks.

    A doubly linked list threaded through two integer arrays (vLLM's ``FreeKVCacheBlockQueue`` links block
    objects the same way): ``next[b]`` / ``prev[b]`` link block ``b`` to its neighbours, and index
    ``num_blocks`` is the sentinel, its ``next`` the front (handed out next) and its ``prev`` the back.
    Arrays, not lists: Python's garbage collector never walks them, so a pool of a million blocks costs
    no more per operation than one of a thousand.
    """

    def __init__(self, num_blocks: int):
        self.sentinel = self.size = num_blocks
        # At first every block is free, in id order: sentinel -> 0 -> 1 -> ... -> n-1 -> sentinel.
        self.next = array("q", range(1, num_blocks + 2))
        self.prev = array("q", range(-1, num_blocks))
        self.next[self.sentinel], self.prev[0] = 0, self.sentinel

    def __len__(self) -> int:
        return self.size

    def __contains__(self, b: int) -> bool:
        return 0 <= b < self.sentinel and self.prev[b] != NOT_QUEUED

    def __iter__(self) -> Iterator[int]:
        b = self.next[self.sentinel]
        while b != self.sentinel:
            yield b
            b = self.next[b]

    def popleft(self) -> int:
        """Take the front block out of the queue."""
        b = self.next[self.sentinel]
        self.remove(b)
        return b

    def remove(self, b: int) -> None:
        """Unlink block ``b`` from wherever it sits in the queue."""
        before, after = self.prev[b], self.next[b]
        self.next[before] = after
        self.prev[after] = before
        self.prev[b] = NOT_QUEUED
        self.size -= 1

    def append(self, b: int) -> None:
        """Put block ``b`` at the end: it is handed out after every block already waiting."""
        last = self.prev[self.sentinel]
        self.next[last] = b
        self.prev[b] = last
        self.next[b] = self.sentinel
        self.prev[self.sentinel] = b
        self.size += 1

    def appendleft(self, b: int) -> None:
        """Put block ``b`` at the front: it is handed out before every block already waiting."""
        first = self.next[self.sentinel]
        self.prev[first] = b
        self.next[b] = first
        self.prev[b] = self.sentinel
        self.next[self.sentinel] = b
        self.size += 1
