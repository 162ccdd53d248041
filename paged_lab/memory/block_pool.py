"""BlockPool: the physical blocks, their refcounts, the free queue and the prefix-cache index.

The pool knows nothing about sequences. It hands out block ids and takes them back:

* ``refcounts[b]`` is how many block tables hold block ``b`` (0: the block is free).
* The free queue hands out the **least recently freed** block first. A freed block keeps its
  content (and, when it was full, its prefix-cache hash) until it is handed out again, so the
  oldest cached content is evicted first -- an LRU cache for free.
* ``cached`` maps a block hash (see ``prefix_cache``) to the block that holds that content. Touching a cached block that
  waits in the free queue takes it out of the queue again (a cache hit on a finished sequence).

Every operation is O(1) and independent of ``num_blocks``. The free queue is a doubly linked list
threaded through two integer arrays (vLLM's ``FreeKVCacheBlockQueue`` links block objects the
same way), so it can pop its oldest block and unlink any block from the middle in O(1). The
per-block state lives in ``array``s, not lists: Python's garbage collector never has to walk them,
so a pool of a million blocks costs no more per operation than a pool of a thousand.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

from paged_lab.memory.errors import InvalidBlockConfig, OutOfBlocks


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidBlockConfig(f"{name} must be an integer >= 1, got {value!r}")
    return value


class FreeBlockQueue:
    """Free block ids, oldest freed first: O(1) ``popleft``, ``append`` and ``remove``.

    ``nxt[b]`` / ``prv[b]`` link block ``b`` to its neighbours; index ``n`` is a sentinel that is
    both head and tail, and ``prv[b] == -1`` marks a block that is not in the queue.
    """

    def __init__(self, num_blocks: int):
        n = self._sentinel = num_blocks
        self.nxt = array("q", range(1, n + 2))  # 0 -> 1 -> ... -> n-1 -> sentinel
        self.prv = array("q", range(-1, n))  # sentinel <- 0 <- 1 ... and n-1 <- sentinel
        self.nxt[n], self.prv[0] = 0, n  # close the ring: the sentinel's next is the first block
        self._len = n

    def __len__(self) -> int:
        return self._len

    def __contains__(self, b: int) -> bool:
        return 0 <= b < self._sentinel and self.prv[b] != -1

    def __iter__(self) -> Iterator[int]:
        b = self.nxt[self._sentinel]
        while b != self._sentinel:
            yield b
            b = self.nxt[b]

    def popleft(self) -> int:
        s, nxt = self._sentinel, self.nxt
        b = nxt[s]
        n = nxt[b]  # (remove(b) inlined: this runs once per block handed out)
        nxt[s], self.prv[n] = n, s
        self.prv[b] = -1
        self._len -= 1
        return b

    def remove(self, b: int) -> None:
        p, n = self.prv[b], self.nxt[b]
        self.nxt[p], self.prv[n] = n, p
        self.prv[b] = -1
        self._len -= 1

    def append(self, b: int) -> None:
        s = self._sentinel
        last = self.prv[s]
        self.nxt[last], self.prv[b], self.nxt[b], self.prv[s] = b, last, s, b
        self._len += 1


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = _check_positive("num_blocks", num_blocks)
        self.block_size = _check_positive("block_size", block_size)
        self.refcounts = array("q", [0]) * num_blocks  # all zero: every block is free
        self.free_queue = FreeBlockQueue(num_blocks)  # hands out 0, 1, 2, ... at first
        self.block_hash: dict[int, bytes] = {}  # cached block -> its hash
        self.cached: dict[bytes, int] = {}  # block hash -> block id

    # -- counts -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.free_queue._len  # (not len(): that is one more Python call, on a hot path)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.free_queue._len

    # -- taking and returning blocks ----------------------------------------------------------
    def peek_free(self, n: int) -> list[int]:
        """The next ``n`` blocks the free queue would hand out (for explanations; O(n))."""
        out = []
        for b in self.free_queue:
            if len(out) == n:
                break
            out.append(b)
        return out

    def allocate(self) -> tuple[int, int | None]:
        """Take the least recently freed block. Returns ``(block_id, evicted_hash_or_None)``."""
        if not self.free_queue._len:
            raise OutOfBlocks(1, 0, "allocating a block")
        b = self.free_queue.popleft()
        self.refcounts[b] = 1
        evicted = self.block_hash.get(b) if self.block_hash else None
        if evicted is not None:  # its old content is about to be overwritten: forget it
            self.uncache(b)
        return b, evicted

    def touch(self, b: int) -> None:
        """One more table holds ``b``; a free (cached) block leaves the free queue."""
        if self.refcounts[b] == 0:
            self.free_queue.remove(b)
        self.refcounts[b] += 1

    def release(self, b: int) -> bool:
        """One table fewer holds ``b``. Returns True when it became free (joins the queue's end)."""
        refcounts = self.refcounts
        refcounts[b] -= 1
        if refcounts[b] == 0:
            self.free_queue.append(b)
            return True
        return False

    # -- prefix-cache index -------------------------------------------------------------------
    def lookup(self, block_hash: bytes) -> int | None:
        """The block holding the content named ``block_hash``, or None."""
        return self.cached.get(block_hash)

    def cache(self, b: int, block_hash: bytes) -> bool:
        """Register full block ``b`` under ``block_hash``. Returns False (and changes nothing) when
        another block already holds that content, or ``b`` is already cached."""
        if block_hash in self.cached or b in self.block_hash:
            return False
        self.cached[block_hash] = b
        self.block_hash[b] = block_hash
        return True

    def uncache(self, b: int) -> None:
        h = self.block_hash.pop(b, None)
        if h is not None:
            del self.cached[h]

    def reset_cache(self) -> int:
        """Forget every cached hash (the blocks stay where they are). Returns how many were cached."""
        n = len(self.cached)
        self.cached.clear()
        self.block_hash.clear()
        return n
