"""SlidingWindowManager: a sliding-window layer group's blocks, beside the full-attention BlockManager.

The token at position ``p`` of a layer with a window of ``W`` reads positions ``p - W + 1 .. p`` only. So,
as vLLM 0.32.0's ``SlidingWindowManager`` (``vllm/v1/core/single_type_kv_cache_manager.py:933``) does:

* once ``num_computed_tokens`` tokens are computed, every block made only of tokens before the next token's
  window goes back to the pool (``remove_skipped_blocks``); its table entry becomes ``NULL_BLOCK``, so index
  ``i`` still means tokens ``[i * block_size, (i + 1) * block_size)``;
* to go on after a prefix-cache hit of ``h`` tokens, only the K and V of tokens ``h - W + 1 .. h - 1`` are
  needed: the ``cdiv(W - 1, block_size)`` blocks just before the hit point. So the hit search walks from the
  right (:func:`window_prefix_hit`), not from the left as full attention does, and the blocks before the
  hit are NULL_BLOCK in the new table;
* a window group caches only the blocks a later hit can use, not every full block: the rest are freed
  without a hash, to the front of the free queue.

``memory/hybrid.py`` puts such groups next to full-attention ones over one pool.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from paged_lab._checks import check_int
from paged_lab.memory.block_manager import BlockManager
from paged_lab.memory.block_pool import NULL_BLOCK
from paged_lab.memory.errors import InvalidArgument, InvalidBlockConfig
from paged_lab.memory.layer_groups import KVCacheGroup

__all__ = ["window_prefix_hit", "SlidingWindowManager"]


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


class SlidingWindowManager(BlockManager):
    """The BlockManager of a layer group with a sliding window (``group.sliding_window`` tokens): it gives
    back the blocks before the window, and its table keeps a NULL_BLOCK entry for each.

    With prefix caching it offers the cache only the blocks a later hit can use (vLLM's
    ``SlidingWindowManager.reachable_block_mask`` under its default ``prefix_cache_retention_interval = 0``):
    for each boundary a later request may stop at, the ``cdiv(W - 1, block_size)`` blocks before it. The
    boundaries of each sequence are set by the HybridBlockManager when it allocates: ``num_prompt_tokens - 1``
    and its shared-prefix junction (:meth:`set_boundaries`)."""

    def __init__(self, num_blocks: int, block_size: int, group: KVCacheGroup, **kwargs):
        super().__init__(num_blocks, block_size, **kwargs)
        if not isinstance(group, KVCacheGroup) or group.sliding_window is None:
            raise InvalidBlockConfig(f"group: a SlidingWindowManager needs a KVCacheGroup with a "
                                     f"sliding_window, got {group!r}")
        self.group = group
        self.blocks_for_hit = group.blocks_for_hit(block_size)  # cdiv(W - 1, block_size)
        self.boundaries: dict[Hashable, tuple[int, ...]] = {}  # seq_id -> token positions a hit stops at

    def set_boundaries(self, seq_id, boundaries: Sequence[int]) -> None:
        """The token positions where a later request's prefix hit on ``seq_id``'s blocks may stop."""
        self._seq(seq_id)  # (UnknownSequence)
        self.boundaries[seq_id] = tuple(boundaries)

    def remove_skipped_blocks(self, seq_id, num_computed_tokens: int) -> None:
        """Give back the blocks that hold only tokens before the next token's window, once
        ``num_computed_tokens`` are computed (vLLM: ``remove_skipped_blocks``, ``get_num_skipped_tokens``,
        ``single_type_kv_cache_manager.py:672, 1135``)."""
        computed = check_int("num_computed_tokens", num_computed_tokens, minimum=0, error=InvalidArgument)
        skipped_blocks = self.group.num_skipped_tokens(computed) // self.block_size
        if skipped_blocks:  # (tokens not slotted yet may count as skipped: at most the table's blocks)
            self.free_blocks_before(seq_id, min(skipped_blocks, len(self._seq(seq_id).table)))

    def free_blocks_before(self, seq_id, num_blocks: int) -> list[int]:
        """Give the first ``num_blocks`` blocks of ``seq_id``'s table back to the pool: the window no
        longer reads their tokens. Their entries become NULL_BLOCK, so the table keeps its length and
        ``table[pos // block_size]`` its meaning. Walks back from block ``num_blocks - 1`` and stops at the
        first entry already null (as vLLM's ``_remove_blocks_in_range``), freeing in that order. Returns
        the blocks given back (those another table shares stay held by it)."""
        s = self._seq(seq_id)
        upto = check_int("num_blocks", num_blocks, minimum=0, maximum=len(s.table), error=InvalidArgument)
        first = upto
        while first > 0 and s.table[first - 1] != NULL_BLOCK:  # back to the first entry already null
            first -= 1
        if first == upto:
            return []
        dropped = s.table[first:upto][::-1]  # last first, the order vLLM frees them in
        freed = self.pool.free_blocks(dropped, checked=True)
        s.table[first:upto] = [NULL_BLOCK] * (upto - first)
        self._emit("skip", seq_id, dropped, len(s.token_ids))
        return freed

    def _held(self, table: list[int]) -> list[int]:
        """The pool blocks among ``table``'s entries: not the NULL_BLOCK entries (blocks given back, or a
        prefix hit's blocks before its window)."""
        return [b for b in table if b != NULL_BLOCK]

    def _reachable_blocks(self, seq_id, first: int, end: int) -> list[bool]:
        """Blocks ``[first, end)`` worth a hash: those in the last window before one of the sequence's
        boundaries. A request resuming at a boundary reads nothing older, and a hit anywhere else would need
        blocks cached at that other point too, which vLLM's default does not keep."""
        keep = [False] * (end - first)
        table = self._seq(seq_id).table
        for boundary in self.boundaries.get(seq_id, ()):
            stop = boundary // self.block_size  # a hit ends on a block boundary: blocks [0, stop)
            for i in range(max(first, stop - self.blocks_for_hit), min(end, stop)):
                keep[i - first] = table[i] != NULL_BLOCK
        return keep

    def free(self, seq_id) -> None:
        super().free(seq_id)
        self.boundaries.pop(seq_id, None)

    def reset(self, pool: bool = True) -> None:
        super().reset(pool)
        self.boundaries.clear()
