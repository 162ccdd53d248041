"""BlockPool: the physical blocks, their refcounts, the free queue and the prefix-cache index (notebook 03).

The pool knows nothing about sequences: it hands block ids out and takes them back (vLLM V1's
``BlockPool``, ``vllm/v1/core/block_pool.py``). vLLM also takes block 0 out of its pool as a "null block"
that is never handed out; this pool does not, so its block ``b`` is vLLM's ``b + 1`` in a pool of
``num_blocks + 1``.
"""

from __future__ import annotations

from array import array
from itertools import islice

from paged_lab._checks import check_int
from paged_lab.memory.errors import InvalidArgument, InvalidBlockConfig, OutOfBlocks
from paged_lab.memory.free_queue import FreeBlockQueue

# The table entry of a block a sliding-window group no longer reads (``memory/hybrid.py``): the block went
# back to the pool, the entry stays so that index i still means tokens [i*bs, (i+1)*bs). vLLM's is its
# block 0 (``BlockPool.null_block``), which this pool numbers -1.
NULL_BLOCK = -1
REUSE = ("v1", "lru")


class BlockPool:
    """Every physical block of the KV cache, and which are free (notebook 03's lockers, in blocks):
    ``num_blocks`` blocks of ``block_size`` token slots, named ``0 .. num_blocks - 1``. It keeps:

    * ``refcounts[b]``: how many block tables hold block ``b``. 0 means free; more than 1, shared (a
      prefix-cache hit, or a forked sequence), so a write into it must copy it first (copy-on-write).
    * ``free_queue``: the free blocks, in the order ``allocate`` hands them out. Where a freed block joins
      it decides what is reused next (``reuse``). ``"v1"`` (default; vLLM V1's ``BlockPool.free_blocks``):
      a block with no prefix-cache hash goes to the front, reused while its memory is warm ("LIFO reuse of
      non-cached blocks for better GPU locality"), one with a hash to the back, so cached content lives
      longest (LRU eviction). ``"lru"`` (a plain FIFO; not vLLM's, whose V0 also reused the most recently
      freed block first): every freed block goes to the back.
    * ``cached``: block hash -> the block holding that content, what a prefix-cache lookup finds, and its
      inverse ``block_hash``. A free block keeps its hash (and stays findable) until ``allocate`` hands it
      out for new content: an eviction. A hit on a free cached block takes it out of the queue (``touch``).

    >>> pool = BlockPool(num_blocks=4, block_size=16)
    >>> pool.allocate(), pool.allocate(), pool.num_free_blocks   # (block id, evicted hash or None)
    ((0, None), (1, None), 2)
    >>> pool.free_blocks([0]), pool.peek_free(3)                 # v1: block 0 (no hash) is reused next
    ([0], [0, 2, 3])
    """

    def __init__(self, num_blocks: int, block_size: int, reuse: str = "v1"):
        if reuse not in REUSE:
            raise InvalidBlockConfig(f"reuse must be one of {REUSE}, got {reuse!r}")
        self.reuse = reuse
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1, error=InvalidBlockConfig)
        self.block_size = check_int("block_size", block_size, minimum=1, error=InvalidBlockConfig)
        self.refcounts = array("q", [0]) * self.num_blocks  # all zero: every block is free
        self.free_queue = FreeBlockQueue(self.num_blocks)  # hands out 0, 1, 2, ... at first
        self.block_hash: dict[int, bytes] = {}  # cached block -> its hash
        self.cached: dict[bytes, int] = {}  # block hash -> the block a lookup finds
        # Every block holding each content, oldest first: two requests that computed the same block in
        # the same step both keep theirs cached (vLLM's BlockHashToBlockMap does not deduplicate either).
        self._holders: dict[bytes, dict[int, None]] = {}

    # -- counts -------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.size

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def peek_free(self, n: int) -> list[int]:
        """The next ``n`` blocks the free queue would hand out (for explanations; O(n))."""
        return list(islice(self.free_queue, n))

    # -- taking and returning blocks ----------------------------------------------------------
    def allocate(self) -> tuple[int, bytes | None]:
        """Take the block at the front of the free queue. Returns ``(block_id, evicted_hash_or_None)``."""
        if not self.free_queue:
            raise OutOfBlocks(1, 0, "allocating a block")
        b = self.free_queue.popleft()
        self.refcounts[b] = 1
        evicted = self.block_hash.get(b)
        if evicted is not None:  # its old content is about to be overwritten: forget it
            self.uncache(b)
        return b, evicted

    def check_block(self, b) -> int:
        """``b`` as a block id, or InvalidArgument: a negative id would index from the end."""
        return check_int("block_id", b, minimum=0, maximum=self.num_blocks - 1, error=InvalidArgument)

    def touch(self, b: int) -> None:
        """One more table holds ``b``; a free (cached) block leaves the free queue."""
        b = self.check_block(b)
        if self.refcounts[b] == 0:
            self.free_queue.remove(b)
        self.refcounts[b] += 1

    def release(self, b: int) -> bool:
        """One table fewer holds ``b``. Returns True when it became free (and joined the free queue)."""
        return bool(self.free_blocks([b]))

    def free_blocks(self, blocks, checked: bool = False) -> list[int]:
        """One table fewer holds each of ``blocks``, given in eviction order (a sequence frees its tail
        first). The blocks nobody holds any more join the free queue (see ``reuse``); returns them.
        ``checked``: the caller knows every block is held (a BlockManager freeing a table)."""
        if not checked:
            blocks = [self.check_block(b) for b in blocks]
            for b in blocks:  # (all checked before any change)
                if self.refcounts[b] == 0:
                    raise InvalidArgument(f"release(block_id={b}): the block is already free (refcount 0)")
        front, back = [], []
        for b in blocks:
            self.refcounts[b] -= 1
            if self.refcounts[b] == 0:
                to_front = self.reuse == "v1" and b not in self.block_hash
                (front if to_front else back).append(b)
        for b in reversed(front):  # the group keeps its order at the front: front[0] is handed out first
            self.free_queue.appendleft(b)
        for b in back:
            self.free_queue.append(b)
        return front + back

    # -- prefix-cache index -------------------------------------------------------------------
    def lookup(self, block_hash: bytes) -> int | None:
        """The block holding the content named ``block_hash``, or None."""
        return self.cached.get(block_hash)

    def cache(self, b: int, block_hash: bytes) -> bool:
        """Register full block ``b`` under ``block_hash``. Returns False (and changes nothing) when ``b`` is
        already cached. Another block may hold the same content: lookups find the first one registered."""
        if b in self.block_hash:
            return False
        self.block_hash[b] = block_hash
        self._holders.setdefault(block_hash, {})[b] = None
        self.cached.setdefault(block_hash, b)
        return True

    def uncache(self, b: int) -> None:
        h = self.block_hash.pop(b, None)
        if h is None:
            return
        holders = self._holders[h]
        del holders[b]
        if not holders:
            del self._holders[h], self.cached[h]
        elif self.cached[h] == b:  # the next block holding that content is the one found now
            self.cached[h] = next(iter(holders))

    def reset(self) -> None:
        """The pool as new: every block free, in id order, and nothing cached. (An aborted engine's pool,
        whatever an interrupted operation left half-done: ``BlockManager.reset``.)"""
        self.refcounts = array("q", [0]) * self.num_blocks
        self.free_queue = FreeBlockQueue(self.num_blocks)
        self.reset_cache()

    def reset_cache(self) -> int:
        """Forget every cached hash (the blocks stay where they are). Returns how many were cached."""
        n = len(self.block_hash)
        for index in (self.cached, self.block_hash, self._holders):
            index.clear()
        return n
