"""A sliding-window layer group's prefix cache: what a hit must find, and which blocks are worth caching.

A layer that attends to the last ``W`` tokens only needs, to go on after a prefix-cache hit of ``h``
tokens, the K and V of tokens ``h - W + 1 .. h - 1``: the ``cdiv(W - 1, block_size)`` blocks just before the
hit point. Everything earlier may be gone. Two consequences, both as vLLM 0.32.0's ``SlidingWindowManager``
(``vllm/v1/core/single_type_kv_cache_manager.py``):

* the hit search walks from the right (:func:`window_prefix_hit`), not from the left as full attention does;
* a window group caches only the blocks a later hit can use (:class:`SlidingWindowBlockManager`), not every
  full block: the rest are freed without a hash, to the front of the free queue.

``memory/hybrid.py`` puts such groups next to full-attention ones over one pool.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from paged_lab.memory.block_manager import BlockManager

__all__ = ["window_prefix_hit", "SlidingWindowBlockManager"]


def window_prefix_hit(found: Sequence[bool], blocks_needed: int) -> tuple[int, int]:
    """The longest prefix hit of a sliding-window group: ``(first, end)``, the hit covers blocks
    ``[0, end)`` and only ``[first, end)`` must be in the cache.

    ``found[i]``: block ``i`` of the prompt (as far as the hit may reach) is in the cache. Why not search
    from the left, as full attention does? The token after a hit of ``end`` blocks reads only the last
    ``W - 1`` tokens before it: the ``blocks_needed`` blocks just before ``end`` must be cached, the earlier
    ones may have left the cache long ago (and usually have: a window group caches few blocks). So the
    search walks from the right and stops at the first run of ``blocks_needed`` cached blocks. With no such
    run, only the cached blocks in a row from block 0 are a hit (a prompt shorter than a window).
    As vLLM's ``SlidingWindowManager.find_longest_cache_hit`` (``v1/core/single_type_kv_cache_manager.py``).

    >>> window_prefix_hit([False, False, True, True, False, True], blocks_needed=2)  # blocks 2, 3
    (2, 4)
    >>> window_prefix_hit([True, False, True, False], blocks_needed=2)  # no run of 2: block 0 alone
    (0, 1)
    """
    run = 0
    for i in range(len(found) - 1, -1, -1):  # right to left: the longest hit first
        if not found[i]:
            run = 0
            continue
        run += 1
        if run >= blocks_needed:
            return i, i + run
    return 0, run  # (the loop ended at block 0: ``run`` cached blocks in a row from the start)


class SlidingWindowBlockManager(BlockManager):
    """A sliding-window group's BlockManager: with prefix caching, offers the cache only the blocks a
    later hit can use (vLLM's ``SlidingWindowManager.reachable_block_mask`` under its default
    ``prefix_cache_retention_interval = 0``): for each boundary a later request may stop at, the
    ``cdiv(W - 1, block_size)`` blocks before it. The boundaries of each sequence are set by the
    HybridBlockManager when it allocates: ``num_prompt_tokens - 1`` and its shared-prefix junction."""

    def __init__(self, num_blocks: int, block_size: int, blocks_for_hit: int, **kwargs):
        super().__init__(num_blocks, block_size, **kwargs)
        self.blocks_for_hit = blocks_for_hit  # cdiv(W - 1, block_size): KVCacheGroup.blocks_for_hit
        self.boundaries: dict[Hashable, tuple[int, ...]] = {}  # seq_id -> token positions a hit stops at

    def _reachable_blocks(self, seq_id, first: int, end: int) -> list[bool]:
        """Blocks ``[first, end)`` worth a hash: those in the last window before one of the sequence's
        boundaries. A request resuming at a boundary reads nothing older, and a hit anywhere else would need
        blocks cached at that other point too, which vLLM's default does not keep."""
        keep = [False] * (end - first)
        for boundary in self.boundaries.get(seq_id, ()):
            stop = boundary // self.block_size  # a hit ends on a block boundary: blocks [0, stop)
            for i in range(max(first, stop - self.blocks_for_hit), min(end, stop)):
                keep[i - first] = True
        return keep

    def free(self, seq_id) -> None:
        super().free(seq_id)
        self.boundaries.pop(seq_id, None)

    def reset(self, pool: bool = True) -> None:
        super().reset(pool)
        self.boundaries.clear()
