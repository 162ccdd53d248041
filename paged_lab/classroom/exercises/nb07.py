"""Notebook 07's exercises: the engine's flat batch of one step, its slots and its query_start_loc."""

from __future__ import annotations

from itertools import accumulate

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.memory.block_manager import BlockManager
from paged_lab.memory.block_tables import slot_for


def _scheduled_chunks(chunks):
    """Real ScheduledSeq entries for ``chunks`` ((block table, start, end) per sequence, in schedule
    order), each paired with its chunk."""
    from paged_lab.sched import ScheduledSeq, Sequence

    out = []
    for i, (table, start, end) in enumerate(chunks):
        entry = ScheduledSeq(Sequence(i, [0] * end, max_tokens=1), start, end, end - start > 1)
        out.append((entry, (table, start, end)))
    return out


def _batch_order(chunks):
    """``chunks`` in the order the engine lays out its batch (``decodes_first``, the engine's own)."""
    from paged_lab.engine.batch import decodes_first

    entries = _scheduled_chunks(chunks)
    by_seq = {s.seq.seq_id: chunk for s, chunk in entries}
    return [by_seq[s.seq.seq_id] for s in decodes_first([s for s, _ in entries])]


def _st_chunks():
    """Chunks whose tables a real BlockManager handed out (a filler between sequences leaves gaps)."""
    from hypothesis import strategies as st

    @st.composite
    def chunk(draw):
        n = draw(st.integers(1, 9))
        start = draw(st.integers(0, n - 1))
        end = n if draw(st.booleans()) else draw(st.integers(start + 1, n))
        return n, start, end

    @st.composite
    def args(draw):
        bm, out = BlockManager(64, 2), []
        for i, (n, start, end) in enumerate(draw(st.lists(chunk(), min_size=1, max_size=4))):
            bm.allocate(("filler", i), [0])  # leaves a gap: tables are not consecutive
            bm.allocate(i, [0] * n)
            out.append((bm.block_table(i), start, end))
        return out, 2
    return args()


def _expect_slots(chunks, block_size):
    # what prepare_batch concatenates: per chunk, BlockManager.slot_mapping(seq, start, end), which is
    # slot_for(pos, its table, block_size) for each position start..end-1
    return [slot_for(pos, table, block_size) for table, start, end in _batch_order(chunks)
            for pos in range(start, end)]


def _expect_qsl(chunks, block_size):
    return [0, *accumulate(end - start for _, start, end in _batch_order(chunks))]


BATCH_SLOTS = Exercise(
    "batch_slots", ("chunks", "block_size"), _expect_slots,
    cases=(([([5, 9], 0, 3), ([4], 1, 2)], 2),), strategy=_st_chunks,
    hint="the same decodes-first order as query_start_loc; a chunk's slots are those of positions "
         "start..end-1, each through that chunk's own block table (slot_for of notebook 03).",
    real="paged_lab.engine.batch:prepare_batch")

QUERY_START_LOC = Exercise(
    "query_start_loc", ("chunks", "block_size"), _expect_qsl,
    cases=(([([5, 9], 0, 3), ([4], 1, 2)], 2),), strategy=_st_chunks,
    hint="decodes (one-token chunks) first, then the rest, each group in the given order (sorted() "
         "with a key keeps it); start at 0 and add each chunk's end - start.",
    real="paged_lab.engine.batch:prepare_batch")

EXERCISES = (BATCH_SLOTS, QUERY_START_LOC)
