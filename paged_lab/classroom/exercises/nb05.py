"""Notebook 05's exercises: which waiting requests a step admits, and which running ones it preempts."""

from __future__ import annotations

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.kv_math import cdiv
from paged_lab.memory.block_manager import BlockManager


def _st_admit():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size, num_blocks = draw(st.integers(1, 4)), draw(st.integers(1, 8))
        lens = draw(st.lists(st.integers(1, num_blocks * block_size), min_size=1, max_size=5))
        return lens, num_blocks, draw(st.integers(1, 4)), block_size
    return args()


def _expect_admit(prompt_lens, num_free_blocks, max_num_seqs, block_size):
    from paged_lab.sched import Scheduler, Sequence

    sched = Scheduler(BlockManager(num_free_blocks, block_size), max_num_seqs)
    for i, n in enumerate(prompt_lens):
        sched.add_request(Sequence(i, [0] * n, max_tokens=1))
    return [s.seq.seq_id for s in sched.schedule().scheduled]


def _st_preempt():
    from hypothesis import strategies as st

    running = st.lists(st.integers(1, 12), min_size=1, max_size=5)  # tokens of each running sequence
    return st.tuples(running, st.integers(0, 2), st.integers(1, 4))


def _expect_preempt(running, free_blocks, block_size):
    """A real Scheduler whose running sequences hold ``running`` tokens each and just sampled one more."""
    from paged_lab.sched import Scheduler, Sequence, SequenceStatus

    used = sum(cdiv(n, block_size) for n in running)
    sched = Scheduler(BlockManager(used + free_blocks, block_size), max_num_seqs=len(running))
    for i, n in enumerate(running):
        seq = Sequence(i, [0] * n, max_tokens=10**6)
        sched.allocator.allocate(i, seq.token_ids)
        seq.num_computed_tokens = seq.num_prefill_tokens = n
        seq.status = SequenceStatus.RUNNING
        seq.append_token(0)  # the token sampled last step: it needs a slot now
        sched.running.append(seq)
    return [s.seq_id for s in sched.schedule().preempted]


ADMIT = Exercise(
    "admit", ("prompt_lens", "num_free_blocks", "max_num_seqs", "block_size"), _expect_admit,
    cases=(([4, 4], 2, 4, 4), ([4, 8, 1], 2, 4, 4)), strategy=_st_admit,
    hint="first come, first served: when the head of the queue does not fit, nobody behind it "
         "overtakes; stop also when max_num_seqs windows are taken.",
    real="paged_lab.sched.scheduler:Scheduler._admit")

PREEMPT = Exercise(
    "preempt", ("running", "free_blocks", "block_size"), _expect_preempt,
    cases=(([4, 4], 0, 4), ([3, 4], 0, 4)), strategy=_st_preempt,
    hint="go oldest first; a sequence whose last block is full needs one block. While none is free, "
         "preempt the NEWEST running sequence (its blocks come back), possibly the one asking.",
    real="paged_lab.sched.scheduler:Scheduler._reserve_slots")

EXERCISES = (ADMIT, PREEMPT)
