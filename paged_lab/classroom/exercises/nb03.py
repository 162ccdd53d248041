"""Notebook 03's exercises: blocks for n tokens, a token's slot, and the table after one more token."""

from __future__ import annotations

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.memory.block_manager import BlockManager
from paged_lab.memory.block_tables import slot_for


def _st_blocks_needed():
    from hypothesis import strategies as st

    return st.tuples(st.integers(0, 200), st.integers(1, 32))


def _expect_blocks_needed(n_tokens, block_size):
    return BlockManager(1, block_size).blocks_for(n_tokens)


def _st_slot_for():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size = draw(st.integers(1, 8))
        table = draw(st.lists(st.integers(0, 20), min_size=1, max_size=5, unique=True))
        return draw(st.integers(0, len(table) * block_size - 1)), table, block_size
    return args()


def _pool_after(num_blocks, block_size, n_tokens, churn):
    """A real BlockManager holding sequence "s" of ``n_tokens``, after ``churn`` other sequences came
    and went (so the free queue is not in id order)."""
    bm = BlockManager(num_blocks, block_size)
    for i, n in enumerate(churn):
        if bm.can_allocate(n):
            bm.allocate(("churn", i), [0] * n)
    for i in [*range(0, len(churn), 2), *range(1, len(churn), 2)]:  # evens first: a shuffled free queue
        if ("churn", i) in bm:
            bm.free(("churn", i))
    bm.allocate("s", [0] * n_tokens)
    return bm


def _st_append():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size = draw(st.integers(1, 4))
        num_blocks = draw(st.integers(2, 8))
        n = draw(st.integers(1, (num_blocks - 1) * block_size))
        churn = draw(st.lists(st.integers(1, 2 * block_size), max_size=3))
        bm = _pool_after(num_blocks, block_size, n, churn)
        return bm.block_table("s"), n, list(bm.pool.free_queue), block_size
    return args()


def _expect_append(block_table, num_tokens, free_blocks, block_size):
    bm = BlockManager(len(block_table) + len(free_blocks), block_size)
    bm.allocate("s", [0] * num_tokens)  # a fresh pool: rename its blocks to the ones given
    rename = dict(zip(bm.block_table("s") + list(bm.pool.free_queue), list(block_table) + list(free_blocks)))
    bm.append_token("s", 0)
    return [rename[b] for b in bm.block_table("s")]


BLOCKS_NEEDED = Exercise(
    "blocks_needed", ("n_tokens", "block_size"), _expect_blocks_needed,
    cases=((0, 4), (4, 4), (5, 4)), strategy=_st_blocks_needed,
    hint="round up: a block that holds one token is still a whole block. 0 tokens need 0 blocks.",
    real="paged_lab.memory.block_tables:BlockTables.blocks_for")

SLOT_FOR = Exercise(
    "slot_for", ("pos", "block_table", "block_size"), slot_for,
    cases=((0, [7], 4), (5, [7, 2], 4)), strategy=_st_slot_for,
    hint="which entry of the table holds position pos (pos // block_size), and which row inside "
         "that block (pos % block_size)? The table gives the physical block.",
    real="paged_lab.memory.block_tables:slot_for")

APPEND_TOKEN = Exercise(
    "append_token", ("block_table", "num_tokens", "free_blocks", "block_size"), _expect_append,
    cases=(([3], 2, [0, 1], 4), ([3], 4, [0, 1], 4)), strategy=_st_append,
    hint="only a token that finds the last block full takes a new block: the first one of "
         "free_blocks (the oldest free). Otherwise the table does not change.",
    real="paged_lab.memory.block_manager:BlockManager.append_token")

EXERCISES = (BLOCKS_NEEDED, SLOT_FOR, APPEND_TOKEN)
