"""Notebook 10's exercises: the drafts a greedy step accepts, and the blocks a step with drafts takes
before it runs. The answers are the engine's own (``paged_lab.engine.spec_decode.verify``)."""

from __future__ import annotations

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.engine.spec_decode.verify import accepted_prefix, blocks_to_allocate_ahead


def _st_prefix():
    """Drafts and the target's tokens (one more: the row after the last draft), over a small vocabulary
    so that drafts often agree, sometimes only after a disagreement (which must not count)."""
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        target = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
        draft = [t if draw(st.booleans()) else draw(st.integers(0, 3)) for t in target[:-1]]
        return draft, target
    return args()


def _st_ahead():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size = draw(st.sampled_from([1, 2, 4, 16]))
        num_tokens = draw(st.integers(1, 200))
        held = draw(st.integers(-(-num_tokens // block_size), -(-(num_tokens + 8) // block_size)))
        return num_tokens, draw(st.integers(0, 8)), held, block_size
    return args()


ACCEPTED_PREFIX = Exercise(
    "accepted_prefix", ("draft_token_ids", "target_token_ids"), accepted_prefix,
    cases=(([5, 7, 9], [5, 7, 2, 4]), ([5, 7, 9], [1, 7, 9, 4]), ([], [3]), ([2, 2], [2, 2, 2])),
    strategy=_st_prefix,
    hint="walk the drafts from the first one and stop at the first draft that differs from the target's "
         "token at its position; an agreement after that point does not count.",
    real="paged_lab.engine.spec_decode.verify:accepted_prefix")

BLOCKS_TO_ALLOCATE_AHEAD = Exercise(
    "blocks_to_allocate_ahead", ("num_tokens", "num_draft_tokens", "num_blocks_held", "block_size"),
    blocks_to_allocate_ahead,
    cases=((14, 3, 4, 4), (16, 3, 5, 4), (1, 0, 1, 16), (61, 5, 4, 16)), strategy=_st_ahead,
    hint="every known token and every draft needs a slot: round their count up to whole blocks, take away "
         "the blocks the request already holds, and never go below zero (blocks kept after a roll-back "
         "are used again).",
    real="paged_lab.engine.spec_decode.verify:blocks_to_allocate_ahead")

EXERCISES = (ACCEPTED_PREFIX, BLOCKS_TO_ALLOCATE_AHEAD)
