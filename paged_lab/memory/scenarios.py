"""Small, named runs of the real BlockManager that the notebooks and figures share.

Each function builds a fresh BlockManager, drives it with a few requests and returns it (its
``events`` hold the whole story) or a summary computed from it. Nothing here is a second model of
the allocator: every number comes from the BlockManager itself.
"""

from __future__ import annotations

import random

from paged_lab.kv_math import cdiv
from paged_lab.memory.block_manager import BlockManager


def system_prompt(system_len: int) -> list[int]:
    """Token ids of a shared "system prompt" (ids 1000, 1001, ...)."""
    return list(range(1000, 1000 + system_len))


def shared_system_prompt(k: int, system_len: int, user_len: int, block_size: int,
                  enable_prefix_caching: bool = True, num_blocks: int | None = None) -> BlockManager:
    """``k`` requests that share a ``system_len``-token system prompt, each followed by its own
    ``user_len`` tokens, allocated one after another (as in one scheduler step). The pool is big
    enough for all of them without sharing, unless ``num_blocks`` says otherwise."""
    if k < 1 or system_len < 0 or user_len < 0 or system_len + user_len < 1:
        raise ValueError(f"need k >= 1 and system_len + user_len >= 1, got k={k}, "
                         f"system_len={system_len}, user_len={user_len}")
    need = k * cdiv(system_len + user_len, block_size)
    bm = BlockManager(num_blocks or need, block_size, enable_prefix_caching=enable_prefix_caching)
    system = system_prompt(system_len)
    for i in range(k):
        bm.allocate(f"req-{i}", system + [i * 1000 + j for j in range(1, user_len + 1)])
    return bm


def prefix_sharing_summary(k: int, system_len: int, user_len: int, block_size: int) -> dict:
    """Blocks used by the same ``k`` requests with and without prefix caching, and the hit rate."""
    off = shared_system_prompt(k, system_len, user_len, block_size, enable_prefix_caching=False)
    on = shared_system_prompt(k, system_len, user_len, block_size, enable_prefix_caching=True)
    return {
        "k": k, "system_len": system_len, "user_len": user_len, "block_size": block_size,
        "blocks_without_sharing": off.num_used_blocks,
        "blocks_with_sharing": on.num_used_blocks,
        "shared_blocks": sum(1 for b in range(on.num_blocks) if on.refcount(b) > 1),
        "prefix_cache_queries": on.stats.prefix_cache_queries,
        "prefix_cache_hits": on.stats.prefix_cache_hits,
        "hit_rate": on.stats.hit_rate,
    }


def parallel_sampling(n: int, prompt: list[int], new_tokens: int, block_size: int,
                      num_blocks: int | None = None) -> BlockManager:
    """One prompt, ``n`` samples: sample 0 owns the prompt's blocks, samples 1..n-1 are forks of it;
    then every sample generates ``new_tokens`` tokens, round robin (sample ``s`` writes token
    ``100 * (s + 1) + t``, so the samples diverge at once)."""
    if n < 1 or new_tokens < 0:
        raise ValueError(f"need n >= 1 and new_tokens >= 0, got n={n}, new_tokens={new_tokens}")
    need = cdiv(len(prompt), block_size) + n * (cdiv(new_tokens, block_size) + 1)
    bm = BlockManager(num_blocks or need, block_size)
    bm.allocate("sample-0", prompt)
    for s in range(1, n):
        bm.fork("sample-0", f"sample-{s}")
    for t in range(new_tokens):
        for s in range(n):
            bm.append_token(f"sample-{s}", 100 * (s + 1) + t)
    return bm


def random_requests(num_requests: int, block_size: int, num_blocks: int = 48, seed: int = 0,
                    max_len: int = 24, finish_every: int = 3) -> tuple[BlockManager, int]:
    """Requests of 1..``max_len`` tokens arrive one by one; after every ``finish_every``-th arrival
    the oldest running request finishes. A request that does not fit is turned away. Returns the
    manager in its final state and how many requests were turned away."""
    rng = random.Random(seed)
    bm = BlockManager(num_blocks, block_size)
    running: list[str] = []
    turned_away = 0
    for i in range(num_requests):
        n = rng.randint(1, max_len)
        if bm.can_allocate(n):
            bm.allocate(f"r{i}", [rng.randrange(50_000) for _ in range(n)])
            running.append(f"r{i}")
        else:
            turned_away += 1
        if finish_every and (i + 1) % finish_every == 0 and running:
            bm.free(running.pop(0))
    return bm, turned_away
