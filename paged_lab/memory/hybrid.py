"""HybridBlockManager: one block table per layer group over one shared pool (full and sliding-window layers).

Today's models mix attention types: gpt-oss alternates full-attention layers with layers that see only
the last ``W`` tokens (a sliding window). Layers of one type form a *layer group* (vLLM: a
``KVCacheGroupSpec``); every layer of a group has the same block table, so the manager keeps one table
per group, not per layer. All groups take their blocks from one ``BlockPool`` (vLLM:
``HybridKVCacheCoordinator`` in ``vllm/v1/core/kv_cache_coordinator.py`` over one ``BlockPool``).

A full-attention group keeps every block until the request finishes. A window group does not: the token
at position ``p`` reads positions ``p - W + 1 .. p`` only, so once ``num_computed_tokens`` tokens are
computed the next token skips the first ``num_computed_tokens - W + 1`` of them, and every block made
only of skipped tokens goes back to the pool. Its table entry becomes ``NULL_BLOCK``, so index ``i``
still means tokens ``[i * block_size, (i + 1) * block_size)`` (vLLM's ``SlidingWindowManager``:
``get_num_skipped_tokens`` and ``remove_skipped_blocks`` in ``vllm/v1/core/single_type_kv_cache_manager.py``;
``KVCacheManager.allocate_slots`` frees them before it allocates the step's new blocks). A window group
therefore holds about ``W / block_size + 1`` blocks per request, however long it grows.

Each group's tables are kept by a real manager over the shared pool: a full-attention group's by a
:class:`~paged_lab.memory.BlockManager`, a window group's by its subclass ``SlidingWindowManager``
(``memory/sliding_window.py``: the frees, the null entries, what it caches), so appends, all-or-nothing checks
and the event log (one per group) are the ones the rest of the series uses. The Scheduler drives this class
through the same ``KVCacheAllocator`` calls.

Prefix caching (``enable_prefix_caching=True``) makes vLLM 0.32.0's decisions
(``HybridKVCacheCoordinator`` in ``vllm/v1/core/kv_cache_coordinator.py``, ``SlidingWindowManager`` in
``vllm/v1/core/single_type_kv_cache_manager.py``):

* **A window group's hit needs only the last window.** A hit of ``h`` tokens means the next token to compute
  is token ``h``; in a window group it reads tokens ``h - W + 1 .. h - 1`` only, so only the
  ``cdiv(W - 1, block_size)`` blocks just before ``h`` must be in the cache; the earlier ones may be long
  gone (NULL_BLOCK in the hit). :func:`window_prefix_hit` finds it, searching from the right.
* **The groups agree on one length.** Full attention finds its longest prefix first; the window group then
  searches at most that far, and the full group's hit is cut to the window's (``find_longest_cache_hit``).
* **A window group caches only blocks a later hit can use** (vLLM's default
  ``prefix_cache_retention_interval = 0``, ``config/cache.py``): the window before ``num_prompt_tokens - 1``
  (where a resend of the same prompt stops, ``replay_boundaries``) and the window before a shared prefix
  whose full-attention blocks hit but whose window blocks did not (``shared_prefix_boundary``). Its other
  full blocks get no hash, so when freed they go to the *front* of the free queue.
* vLLM keys a cached block by its hash *and its group* (``make_block_hash_with_group_id``); here each group's
  hash chain is salted with the group's name, so one group's lookup never finds another group's block.

Not supported yet, each raising a clear error: ``fork`` (parallel sampling by sharing blocks), swap
preemption (``block_table``: there is no single table to copy).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from paged_lab._checks import check_int, check_token_ids
from paged_lab.kv_math import cdiv
from paged_lab.memory.allocator import PagedPoolSlots
from paged_lab.memory.block_manager import BlockManager, CowAction
from paged_lab.memory.block_pool import NULL_BLOCK, BlockPool
from paged_lab.memory.errors import (
    BlockManagerError,
    DuplicateSequence,
    InvalidArgument,
    InvalidBlockConfig,
    InvalidTokenId,
    OutOfBlocks,
)
from paged_lab.memory.events import BlockManagerStats, Event
from paged_lab.memory.invariants import check_invariants
from paged_lab.memory.layer_groups import KVCacheGroup
from paged_lab.memory.prefix_cache import block_hashes
from paged_lab.memory.sliding_window import SlidingWindowManager, window_prefix_hit

__all__ = ["HybridBlockManager", "CacheHit", "blocks_held_over_time"]


@dataclass(frozen=True)
class CacheHit:
    """What a prefix-cache lookup found for a prompt: ``num_tokens`` tokens every group can skip, each
    group's hit blocks (a window group's skipped ones NULL_BLOCK) and ``shared_prefix_boundary``: how far
    full attention alone would have hit when the window group stopped shorter (0 when they agree), so the
    window group caches the window before it this time (vLLM: ``get_computed_blocks``)."""

    num_tokens: int
    blocks: dict[str, list[int]]
    shared_prefix_boundary: int = 0


class HybridBlockManager(PagedPoolSlots):
    """Block tables per layer group over one pool of ``num_blocks`` blocks; a ``KVCacheAllocator``.

    ``max_num_batched_tokens``: the Scheduler's token budget per step. A window group never holds more
    than ``cdiv(W - 1 + max_num_batched_tokens, block_size) + 1`` blocks of one request (the window's
    tokens, one step's new tokens, one block the window starts inside), so admission counts at most that
    many for it (vLLM: ``SlidingWindowSpec.max_admission_blocks_per_request``). None: a step may compute a
    whole prompt, and admission counts a window group's blocks like a full group's.

    ``enable_prefix_caching``: hits as vLLM finds them over layer groups (the module docstring;
    :meth:`find_longest_cache_hit`), a window group caching only the blocks a later hit can use.

    >>> hm = HybridBlockManager(16, 4, [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=4)])
    >>> hm.allocate("a", list(range(10)))     # a 10-token prompt: 3 blocks in each group
    {'full': [0, 1, 2], 'swa': [3, 4, 5]}
    >>> hm.remove_skipped_blocks("a", 10)     # the 11th token reads tokens 7..10: block 0 is done
    >>> hm.append_tokens("a", [10]); hm.block_tables("a")
    {'full': [0, 1, 2], 'swa': [-1, 4, 5]}
    """

    swappable = False  # no single block table to copy to the CPU: the Scheduler refuses preemption="swap"

    def __init__(self, num_blocks: int, block_size: int, groups: Sequence[KVCacheGroup],
                 enable_prefix_caching: bool = False, record_events: bool = True, reuse: str = "v1",
                 max_num_batched_tokens: int | None = None):
        groups = tuple(groups)
        if not groups or not all(isinstance(g, KVCacheGroup) for g in groups):
            raise InvalidBlockConfig(f"groups: need at least one KVCacheGroup, got {groups!r}")
        if len({g.name for g in groups}) != len(groups):
            raise InvalidBlockConfig(f"groups: names must differ, got {[g.name for g in groups]}")
        if len({g.num_layers for g in groups}) != 1:  # one pool block = one page of every layer of a group
            raise InvalidBlockConfig(f"groups: every group needs the same num_layers (vLLM pads them to one "
                                     f"size: kv_cache_groups()), got {[g.num_layers for g in groups]}")
        self.max_num_batched_tokens = None if max_num_batched_tokens is None else check_int(
            "max_num_batched_tokens", max_num_batched_tokens, minimum=1, error=InvalidBlockConfig)
        self.pool = BlockPool(num_blocks, block_size, reuse)
        self.num_blocks, self.block_size = self.pool.num_blocks, self.pool.block_size
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.groups = groups
        kw = dict(enable_prefix_caching=self.enable_prefix_caching, record_events=record_events, reuse=reuse,
                  pool=self.pool)
        self.managers = {g.name: BlockManager(num_blocks, block_size, **kw) if g.sliding_window is None
                         else SlidingWindowManager(num_blocks, block_size, g, **kw) for g in groups}
        # Groups of one kind looked up together, full attention first (vLLM's attention_groups, sorted so:
        # its left-to-right search bounds the others').
        kinds = sorted({g.sliding_window or 0 for g in groups})
        self.spec_groups = [tuple(g for g in groups if (g.sliding_window or 0) == w) for w in kinds]
        self._clock = 0
        self.max_slots_per_seq = self._max_slots()

    def __repr__(self) -> str:
        names = ", ".join(f"{g.name}:{'full' if g.sliding_window is None else 'W=' + str(g.sliding_window)}"
                          for g in self.groups)
        return f"HybridBlockManager(num_blocks={self.num_blocks}, block_size={self.block_size}, [{names}])"

    # -- what the Scheduler reads ----------------------------------------------------------------
    @property
    def clock(self) -> int:
        return self._clock

    @clock.setter
    def clock(self, step: int) -> None:  # stamped on every group's events
        self._clock = step
        for m in self.managers.values():
            m.clock = step

    @property
    def _first(self) -> BlockManager:
        return self.managers[self.groups[0].name]

    def admission_blocks(self, group: KVCacheGroup, num_tokens: int) -> int:
        """Blocks admission counts for a request of ``num_tokens`` tokens in ``group``: all of its blocks
        for full attention; for a window, no more than the group ever holds at once (see the class)."""
        blocks = cdiv(num_tokens, self.block_size)
        if group.sliding_window is None or self.max_num_batched_tokens is None:
            return blocks
        peak = cdiv(group.sliding_window - 1 + self.max_num_batched_tokens, self.block_size) + 1
        return min(blocks, peak)

    def _max_slots(self) -> int:
        """The longest sequence whose admission count fits the whole pool (block-aligned)."""
        k = 0
        while sum(self.admission_blocks(g, (k + 1) * self.block_size)
                  for g in self.groups) <= self.num_blocks:
            k += 1
            if k > self.num_blocks:  # no full group: the window groups' blocks stop growing
                return sys.maxsize
        return k * self.block_size

    @property
    def max_whole_prompt_slots(self) -> int:
        """The longest prompt that fits when every group allocates all of its blocks at once (the Scheduler's
        ``allocation="whole_prompt"``: no token budget caps a window group's count then)."""
        return self.num_blocks // len(self.groups) * self.block_size

    @property
    def max_slots_per_seq_reason(self) -> str:
        return (f"num_blocks={self.num_blocks} x block_size={self.block_size} shared by "
                f"{len(self.groups)} layer groups")

    @property
    def empty_slots(self) -> int:
        """Slots of held blocks that hold no token yet, in every group (``used_slots``, ``usage``: of the
        whole pool, every group's tokens: ``PagedPoolSlots``)."""
        return sum(m.empty_slots for m in self.managers.values())

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._first

    @property
    def seq_ids(self) -> list[Hashable]:
        return self._first.seq_ids

    def num_tokens(self, seq_id) -> int:
        return self._first.num_tokens(seq_id)  # (every group slots the same tokens)

    def num_cached_tokens(self, seq_id) -> int:
        return self._first.num_cached_tokens(seq_id)

    @property
    def stats(self) -> BlockManagerStats:
        """Prefix-cache queries and hits (in tokens; every group counts the one agreed hit), copies and
        evictions summed over the groups."""
        first = self._first.stats
        return BlockManagerStats(first.prefix_cache_queries, first.prefix_cache_hits,
                                 sum(m.stats.num_cow for m in self.managers.values()),
                                 sum(m.stats.num_evictions for m in self.managers.values()))

    def block_tables(self, seq_id) -> dict[str, list[int]]:
        """Each group's block table (NULL_BLOCK where a window group gave a block back)."""
        return {name: m.block_table(seq_id) for name, m in self.managers.items()}

    def blocks_held(self, seq_id) -> dict[str, int]:
        """Real blocks each group holds for ``seq_id`` (its NULL_BLOCK entries not counted)."""
        return {name: sum(b != NULL_BLOCK for b in m.block_table(seq_id))
                for name, m in self.managers.items()}

    def block_table(self, seq_id) -> list[int]:
        raise InvalidArgument(f"block_table(seq_id={seq_id!r}): a HybridBlockManager keeps one table per "
                              f"layer group; use block_tables(seq_id) (swap preemption is not supported)")

    @property
    def events(self) -> dict[str, list[Event]]:
        """Each group's event log (its own BlockManager's; the ``skip`` events are the window's frees)."""
        return {name: m.events for name, m in self.managers.items()}

    # -- prefix caching ----------------------------------------------------------------------------
    def find_longest_cache_hit(self, token_ids: Sequence[int]) -> CacheHit:
        """The longest prefix of ``token_ids`` every group finds in the cache, as vLLM's
        ``HybridKVCacheCoordinator.find_longest_cache_hit``: each kind of group in turn, full attention
        first, searches no further than the length so far and may shorten it; repeat until no kind
        shortens it (one pass when there are just two kinds, full first). The last token is always computed
        (its logits), so at most ``len(token_ids) - 1`` tokens hit. Changes nothing. A window group's real
        blocks in ``CacheHit.blocks`` are the ones its hit had to find.

        >>> groups = [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=4)]
        >>> hm = HybridBlockManager(20, 2, groups, enable_prefix_caching=True)
        >>> hm.allocate("a", list(range(9)))
        {'full': [0, 1, 2, 3, 4], 'swa': [5, 6, 7, 8, 9]}
        >>> hm.find_longest_cache_hit(list(range(9)))  # a twin: the window part needs its last 2 blocks only
        CacheHit(num_tokens=8, blocks={'full': [0, 1, 2, 3], 'swa': [-1, -1, 7, 8]}, shared_prefix_boundary=0)
        """
        token_ids = check_token_ids("token_ids", list(token_ids), error=InvalidTokenId)
        if not self.enable_prefix_caching or len(token_ids) < 2:
            return CacheHit(0, {g.name: [] for g in self.groups})
        bs = self.block_size
        hashes = {g.name: block_hashes(token_ids, bs, g.name) for g in self.groups}
        found: dict[int, tuple[int, int]] = {}  # spec group -> (first, end) of its latest hit
        hit, longest = len(token_ids) - 1, 0
        while True:
            length = hit
            for k, spec in enumerate(self.spec_groups):
                if spec[0].sliding_window is None and k in found:  # full attention: a prefix of its first hit
                    length = min(length, found[k][1] * bs)
                    continue
                found[k] = self._spec_hit(spec, hashes, length // bs)
                length = found[k][1] * bs
                longest = max(longest, length)
            if length >= hit:
                break
            hit = length
            if len(self.spec_groups) == 2 and self.spec_groups[0][0].sliding_window is None:
                break  # one full kind and one window kind: one pass agrees (vLLM's is_simple_hybrid)
        blocks = {}
        for k, spec in enumerate(self.spec_groups):
            first, end = found[k]
            end = min(end, hit // bs)  # full attention is cut back to the agreed length
            for g in spec:
                cached = self.pool.cached
                blocks[g.name] = [NULL_BLOCK] * first + [cached[h] for h in hashes[g.name][first:end]]
        return CacheHit(hit, blocks, longest if longest > hit else 0)

    def _spec_hit(self, spec: tuple[KVCacheGroup, ...], hashes: dict[str, list[bytes]],
                  max_blocks: int) -> tuple[int, int]:
        """(first, end): the hit of one kind of group within its first ``max_blocks`` blocks; a block is
        found only when every group of the kind has it cached (vLLM's ``BlockPool.get_cached_block``)."""
        cached = self.pool.cached
        found = [all(hashes[g.name][i] in cached for g in spec) for i in range(max_blocks)]
        need = spec[0].blocks_for_hit(self.block_size)
        if need is None:  # full attention: every block from the start
            end = found.index(False) if False in found else max_blocks
            return 0, end
        return window_prefix_hit(found, need)

    def _blocks_to_allocate(self, group: KVCacheGroup, num_tokens: int, hit: CacheHit,
                            admission: bool) -> int:
        """Free blocks a new request of ``num_tokens`` slotted tokens takes in ``group`` after ``hit``
        (vLLM's ``get_num_blocks_to_allocate``): its new blocks, counted at most to the window's peak at
        admission, plus hit blocks revived from the free queue. A window group's skipped hit blocks are
        nulls: they take nothing, and count as blocks it already has."""
        hits = hit.blocks[group.name]
        bs = self.block_size
        required = self.admission_blocks(group, num_tokens) if admission else cdiv(num_tokens, bs)
        skipped = group.num_skipped_tokens(hit.num_tokens) // bs
        revived = sum(b != NULL_BLOCK and self.pool.refcounts[b] == 0 for b in hits[skipped:])
        return max(required - max(skipped, len(hits)), 0) + revived

    # -- admission and every step ----------------------------------------------------------------
    def can_allocate(self, tokens: int | Sequence[int]) -> bool:
        """Would a request of ``tokens`` (a count or the ids) fit, counted as vLLM's admission counts it
        (``allocate_slots(..., full_sequence_must_fit=True)``): every group's blocks, summed, after the
        prefix-cache hit (pass the ids to count it)."""
        if isinstance(tokens, Sequence):
            n, hit = len(tokens), self.find_longest_cache_hit(tokens)
        else:
            n = check_int("tokens", tokens, minimum=0, error=InvalidArgument)
            hit = CacheHit(0, {g.name: [] for g in self.groups})
        return sum(self._blocks_to_allocate(g, n, hit, admission=True)
                   for g in self.groups) <= self.num_free_blocks

    def allocate(self, seq_id, token_ids: Sequence[int], *, num_tokens_to_cache: int | None = None,
                 max_new_tokens: int | None = None,
                 num_prompt_tokens: int | None = None) -> dict[str, list[int]]:
        """Give a new sequence a table in every group: its prefix-cache hit, then slots for its prompt (the
        first ``max_new_tokens`` tokens after the hit, when given). All or nothing. ``num_tokens_to_cache``
        as ``BlockManager.allocate``; ``num_prompt_tokens``: how many of ``token_ids`` are the prompt
        (default all; a recomputed request brings its outputs too). Returns ``block_tables(seq_id)``."""
        if seq_id in self:
            raise DuplicateSequence(seq_id)
        token_ids = list(token_ids)
        if not token_ids:
            raise InvalidArgument(f"allocate(seq_id={seq_id!r}) needs at least 1 token, got 0")
        hit = self.find_longest_cache_hit(token_ids)  # (checks the token ids)
        n = len(token_ids) if max_new_tokens is None else min(len(token_ids), hit.num_tokens + check_int(
            "max_new_tokens", max_new_tokens, minimum=1, error=InvalidArgument))
        limit = dict(maximum=len(token_ids), error=InvalidArgument)
        to_cache = n if num_tokens_to_cache is None else min(n, check_int(
            "num_tokens_to_cache", num_tokens_to_cache, minimum=0, **limit))
        prompt = len(token_ids) if num_prompt_tokens is None else check_int(
            "num_prompt_tokens", num_prompt_tokens, minimum=1, **limit)
        needed = sum(self._blocks_to_allocate(g, n, hit, admission=False) for g in self.groups)
        if needed > self.num_free_blocks:
            raise OutOfBlocks(needed, self.num_free_blocks, f"allocate(seq_id={seq_id!r}, {n} tokens, "
                              f"{len(self.groups)} layer groups)")
        # Every group's hits first, then every group's new blocks: a new block never evicts a hit.
        caching = self.enable_prefix_caching
        for g in self.groups:
            hashes = block_hashes(token_ids[:n], self.block_size, g.name) if caching else []
            self.managers[g.name].adopt_hits(seq_id, token_ids[:n], hashes, hit.blocks[g.name], g.name,
                                             len(token_ids))
        for g in self.groups:
            m = self.managers[g.name]
            m.take_new_blocks(seq_id)
            if isinstance(m, SlidingWindowManager):  # where a later request's hit may stop
                m.set_boundaries(seq_id, (prompt - 1,) + ((hit.shared_prefix_boundary,)
                                                          if hit.shared_prefix_boundary else ()))
            m.cache_blocks(seq_id, to_cache)
        return self.block_tables(seq_id)

    def remove_skipped_blocks(self, seq_id, num_computed_tokens: int) -> None:
        """Give back every window group's blocks that hold only skipped tokens: the tokens before the
        window of the next token, once ``num_computed_tokens`` are computed. The Scheduler calls it before
        it asks for a step's new slots, as vLLM's ``allocate_slots`` does, so freed blocks are reused."""
        computed = check_int("num_computed_tokens", num_computed_tokens, minimum=0, error=InvalidArgument)
        for m in self.managers.values():  # (full attention: nothing; a window: SlidingWindowManager's)
            m.remove_skipped_blocks(seq_id, computed)

    def append_tokens(self, seq_id, token_ids: Sequence[int],
                      num_lookahead_tokens: int = 0) -> CowAction | None:
        """Slots for the next tokens in every group. All or nothing: raises OutOfBlocks, changing
        nothing, when the groups' new blocks together do not fit. No draft slots (speculative decoding runs
        on full-attention models here)."""
        if num_lookahead_tokens:
            raise InvalidArgument(f"num_lookahead_tokens must be 0 with sliding-window layer groups, got "
                                  f"{num_lookahead_tokens!r}")
        needed = sum(m.blocks_needed_to_append(seq_id, len(token_ids)) for m in self.managers.values())
        if needed > self.num_free_blocks:
            raise OutOfBlocks(needed, self.num_free_blocks, f"append_tokens(seq_id={seq_id!r}, "
                              f"{len(token_ids)} tokens) at {self.num_tokens(seq_id)} tokens in "
                              f"{len(self.groups)} layer groups")
        for m in self.managers.values():
            m.append_tokens(seq_id, token_ids)  # (never shared: no fork, no prefix hit -> no copy)
        return None

    def cache_blocks(self, seq_id, num_tokens: int) -> None:
        """Offer every group's full blocks among the first ``num_tokens`` tokens to the prefix cache (a
        window group only those a later hit can use: ``SlidingWindowManager``)."""
        for m in self.managers.values():
            m.cache_blocks(seq_id, num_tokens)

    def free(self, seq_id) -> None:
        """Drop every group's table, group by group in order (as vLLM's coordinator frees them)."""
        self.num_tokens(seq_id)  # (UnknownSequence before any change)
        for m in self.managers.values():
            m.free(seq_id)

    def reset_prefix_cache(self) -> int:
        """Forget every cached block of every group (vLLM's ``reset_prefix_cache``): later prompts are
        computed from scratch; blocks held by running sequences stay theirs. Every group's log records the
        evictions. Returns how many blocks were cached."""
        for m in self.managers.values():
            m.reset_prefix_cache(pool=False)
        return self.pool.reset_cache()

    def reset(self) -> None:
        """Every group's tables dropped and the shared pool as new (``BlockManager.reset``)."""
        self.pool.reset()
        for m in self.managers.values():
            m.reset(pool=False)

    def fork(self, parent_id, child_id) -> list[int]:
        raise InvalidArgument(f"fork(parent_id={parent_id!r}): a HybridBlockManager does not share blocks "
                              f"between sequences by fork yet (only through prefix-cache hits)")

    # -- inspection ------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Every group keeps the BlockManager's rules over the shared pool (refcounts count every
        group's tables) and all groups hold the same sequences and tokens. (A window group may still
        hold blocks the window has passed: the next step gives them back, ``remove_skipped_blocks``.)"""
        ms = list(self.managers.values())
        for m in ms:
            check_invariants(m, [o for o in ms if o is not m])
            if m.seq_ids != self.seq_ids or any(m.num_tokens(s) != self.num_tokens(s) for s in self.seq_ids):
                raise BlockManagerError("the layer groups disagree on the sequences or their tokens")


def blocks_held_over_time(groups: Sequence[KVCacheGroup], block_size: int, prompt_len: int,
                          max_tokens: int) -> dict[str, list[int]]:
    """Blocks one request holds in each group after each step of its life: its prompt prefilled in one
    step, then ``max_tokens - 1`` decode steps (the last sampled token is never stored). Computed by
    running a HybridBlockManager over a pool just big enough for the full-attention worst case."""
    groups = tuple(groups)
    prompt_len = check_int("prompt_len", prompt_len, minimum=1, error=InvalidArgument)
    max_tokens = check_int("max_tokens", max_tokens, minimum=1, error=InvalidArgument)
    num_blocks = len(groups) * cdiv(prompt_len + max_tokens, block_size)
    hm = HybridBlockManager(num_blocks, block_size, groups, record_events=False)
    hm.allocate("r", range(prompt_len))
    held = {g.name: [] for g in groups}
    for step in range(max_tokens):
        if step:  # the token sampled last step gets its slot; the window moves past old blocks first
            hm.remove_skipped_blocks("r", prompt_len + step - 1)
            hm.append_tokens("r", [prompt_len + step - 1])
        for name, n in hm.blocks_held("r").items():
            held[name].append(n)
    return held
