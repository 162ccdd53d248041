"""Notebook 04's exercises: block hashes, the cached prefix a prompt reuses, and copy-on-write."""

from __future__ import annotations

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.memory import prefix_cache
from paged_lab.memory.block_manager import BlockManager


def _st_tokens(max_size=14):
    from hypothesis import strategies as st

    return st.lists(st.integers(0, 3), min_size=1, max_size=max_size)  # few token ids: prefixes repeat


def _st_block_hashes():
    from hypothesis import strategies as st

    return st.tuples(_st_tokens(), st.integers(1, 5))


def _st_cached_prefix():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        tokens, block_size = draw(_st_tokens()), draw(st.integers(1, 4))
        hashes = prefix_cache.block_hashes(tokens, block_size)
        kept = draw(st.lists(st.booleans(), min_size=len(hashes), max_size=len(hashes)))
        cached = {h: 10 + i for i, (h, keep) in enumerate(zip(hashes, kept)) if keep}
        return cached, tokens, block_size
    return args()


def _expect_cached_prefix(cached, token_ids, block_size):
    return prefix_cache.find_cached_prefix(cached, token_ids, block_size)[0]


def _st_append_action():
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 20), st.integers(1, 4), st.integers(1, 3))


def _expect_append_action(num_tokens, block_size, refcount):
    """Ask a real BlockManager: a sequence of ``num_tokens`` whose last block ``refcount`` tables hold."""
    bm = BlockManager(2 * (num_tokens + 1), block_size)
    bm.allocate(0, [0] * num_tokens)
    for child in range(1, refcount):
        bm.fork(0, child)
    before = bm.block_table(0)
    cow = bm.append_token(0, 0)
    if cow is not None:
        return "copy"
    return "new block" if len(bm.block_table(0)) > len(before) else "write in place"


BLOCK_HASHES = Exercise(
    "block_hashes", ("token_ids", "block_size"), prefix_cache.block_hashes,
    cases=(([1, 2, 3, 4, 5], 2), ([1], 2)), strategy=_st_block_hashes,
    hint="hash only full blocks, and pass each block's hash as the parent of the next "
         "(None for the first): hash_block(parent, tokens_of_this_block).",
    real="paged_lab.memory.prefix_cache:block_hashes")

CACHED_PREFIX = Exercise(
    "cached_prefix", ("cached", "token_ids", "block_size"), _expect_cached_prefix,
    cases=(({}, [1, 2], 2),), strategy=_st_cached_prefix,
    hint="stop at the first block whose hash is not cached, and never reuse the block that holds "
         "the last prompt token: at most (len(token_ids) - 1) // block_size blocks.",
    real="paged_lab.memory.prefix_cache:find_cached_prefix")

APPEND_ACTION = Exercise(
    "append_action", ("num_tokens", "block_size", "refcount"), _expect_append_action,
    cases=((4, 4, 1), (3, 4, 1), (3, 4, 2)), strategy=_st_append_action,
    hint="a full last block means a new block, shared or not; a partly filled block that another "
         "table also holds (refcount > 1) must be copied before it is written.",
    real="paged_lab.memory.block_manager:BlockManager.append_token")

EXERCISES = (BLOCK_HASHES, CACHED_PREFIX, APPEND_ACTION)
