"""The bookkeeping rules a BlockManager must keep after every operation.

Tests (and the property tests' random operation sequences) call ``bm.check_invariants()`` after
each step; it raises BlockManagerError naming the first rule that is broken:

1. A block appears at most once in a table, and a table holds ``blocks_for(num_tokens)`` entries; its
   NULL_BLOCK entries (blocks a sliding window gave back, ``SlidingWindowManager``) all lead the table.
2. ``refcount[b]`` equals the number of tables that hold ``b``.
3. A block is in the free queue exactly when its refcount is 0.
4. Tables that share a block agree on how many tokens it holds. (With rules 1 and 2, this makes
   ``used_slots``, computed from the tables and the pool, count every held token once.)
5. A cached block is a full block, registered under its own hash.
6. Prefix-cache hits never exceed queries.
7. A sequence holds a cached block only among its leading blocks already offered to the cache (its
   hits, and the full blocks whose KV was computed), under the hash of its own tokens: a block whose
   KV is not written yet is never findable.
"""

from __future__ import annotations

from collections import Counter

from paged_lab.memory.block_pool import NULL_BLOCK
from paged_lab.memory.errors import BlockManagerError


def check_invariants(bm, pool_sharers=()) -> None:
    """Raise BlockManagerError when ``bm`` breaks one of the rules above. ``pool_sharers``: the other
    managers whose tables hold blocks of ``bm.pool`` (the layer groups of a HybridBlockManager); rules 2
    and 3 count their tables too."""
    fill = _check_tables(bm)
    # block -> tables holding it
    holders = Counter(b for m in (bm, *pool_sharers) for s in m.sequences.values() for b in s.table
                      if b != NULL_BLOCK)
    for b in range(bm.num_blocks):
        if holders[b] != bm.pool.refcounts[b]:
            raise BlockManagerError(f"block {b}: refcount {bm.pool.refcounts[b]} but {holders[b]} tables")
        if (holders[b] == 0) != (b in bm.pool.free_queue):
            raise BlockManagerError(f"block {b}: refcount {holders[b]} disagrees with the free queue")
    for b, h in bm.pool.block_hash.items():
        if h not in bm.pool.cached or fill.get(b, bm.block_size) != bm.block_size:
            raise BlockManagerError(f"cached block {b} is not a full block under its hash")
    for h, b in bm.pool.cached.items():
        if bm.pool.block_hash.get(b) != h:
            raise BlockManagerError(f"the prefix cache finds block {b}, which does not hold that content")
    if bm.stats.prefix_cache_hits > bm.stats.prefix_cache_queries:
        raise BlockManagerError("prefix-cache hits exceed queries")
    _check_cached_blocks(bm)


def _check_cached_blocks(bm) -> None:
    """Rule 7."""
    for sid, s in bm.sequences.items():
        if not 0 <= s.num_cached_blocks <= min(len(s.hashes), len(s.table)):
            raise BlockManagerError(f"seq {sid!r}: {s.num_cached_blocks} blocks offered to the cache, "
                                    f"but it has {len(s.hashes)} full blocks")
        for i, b in enumerate(s.table):
            h = None if b == NULL_BLOCK else bm.pool.block_hash.get(b)
            if h is None:
                continue
            if i >= s.num_cached_blocks:
                raise BlockManagerError(f"seq {sid!r}: block {b} (#{i}) is in the prefix cache before its KV "
                                        f"is computed (only its first {s.num_cached_blocks} blocks are)")
            if s.hashes[i] != h:
                raise BlockManagerError(f"seq {sid!r}: cached block {b} (#{i}) is registered under "
                                        f"another prefix's hash")


def _check_tables(bm) -> dict[int, int]:
    """Rules 1 and 4. Returns ``{used block: tokens it holds}``."""
    fill: dict[int, int] = {}
    for sid, s in bm.sequences.items():
        skipped = next((i for i, b in enumerate(s.table) if b != NULL_BLOCK), len(s.table))
        held = s.table[skipped:]
        if len(set(held)) != len(held):
            raise BlockManagerError(f"seq {sid!r}: a block appears twice in {s.table}")
        if NULL_BLOCK in held:
            raise BlockManagerError(f"seq {sid!r}: a NULL_BLOCK entry after a held block in {s.table}")
        if len(s.table) != bm.blocks_for(len(s.token_ids)):
            raise BlockManagerError(f"seq {sid!r}: {len(s.table)} blocks for {len(s.token_ids)} tokens")
        for i, b in enumerate(s.table):
            if b == NULL_BLOCK:
                continue
            tokens = min(bm.block_size, len(s.token_ids) - i * bm.block_size)
            if fill.setdefault(b, tokens) != tokens:
                raise BlockManagerError(f"block {b}: the tables that share it disagree on its tokens")
    return fill
