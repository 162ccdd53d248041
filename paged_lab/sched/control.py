"""What the engine asks of the Scheduler between steps (notebook 07): stop one sequence, abort them all,
fork one for parallel sampling.

A step -- who runs, who waits, who is preempted -- is ``scheduler.py``'s, notebook 05's lesson. These
calls are the same class's other half (``Scheduler`` inherits ``RequestControl``), kept in a file of
their own so that notebook 05's file shows the step alone. vLLM V1 keeps its engine-side stop in the
Scheduler too (``Scheduler.finish_requests``, ``vllm/v1/core/sched/scheduler.py:2649``, vllm 0.32.0).
"""

from __future__ import annotations

from collections import deque

from paged_lab.sched.sequence import Sequence, SequenceStatus
from paged_lab.sched.swap import CpuSwapSpace

RUNNING, WAITING, FINISHED = SequenceStatus.RUNNING, SequenceStatus.WAITING, SequenceStatus.FINISHED


class RequestControl:
    """The engine's calls on a ``Scheduler`` (whose queues, allocator and ``_finish`` they use)."""

    def finish(self, seq: Sequence, reason: str = "stop") -> None:
        """Engine-side stop (a stop string, an abort): free its blocks and drop it from every queue."""
        if seq.status is FINISHED:
            raise ValueError(f"seq {seq.seq_id!r} is already finished ({seq.finish_reason})")
        if seq.seq_id not in self._live:
            raise KeyError(f"seq {seq.seq_id!r} was never added to this scheduler")
        for q in (self.waiting, self.swapped):
            if seq in q:
                q.remove(seq)
        self.running = [s for s in self.running if s is not seq]
        self._finish(seq, reason, max(self.step_count - 1, 0))

    def abort_all(self) -> list[Sequence]:
        """Abort every sequence at once: each unfinished one is finished with reason "abort", the queues are
        emptied and the allocator gives every slot back (``allocator.reset()``: a prefix cache is dropped
        too). Whatever an exception cut half-way in a step, the scheduler and its allocator end as new ones
        (the counters kept). Returns the aborted sequences."""
        step = max(self.step_count - 1, 0)
        aborted = [s for s in self._live.values() if s.status is not FINISHED]
        for seq in aborted:
            seq.status, seq.finish_reason, seq.finish_step = FINISHED, "abort", step
        self.waiting, self.running, self.swapped = deque(), [], deque()
        self._live, self._last_out = {}, None
        moved, self.swap_space = self.swap_space.num_blocks_moved, CpuSwapSpace(self.num_cpu_blocks)
        self.swap_space.num_blocks_moved = moved
        self.allocator.reset()
        return aborted

    def fork(self, parent: Sequence, child: Sequence, last_token_id: int | None = None) -> None:
        """Parallel sampling: ``child`` (a new Sequence with the same prompt) shares every block of
        the running ``parent``. ``last_token_id`` replaces the child's copy of the parent's newest
        sampled token (it has no KV yet, so the two may differ without a copy)."""
        if parent.status is not RUNNING or parent.num_computed_tokens < parent.num_prefill_tokens:
            raise ValueError(f"parent {parent.seq_id!r} must be running with its prefill done to fork "
                             f"(status={parent.status.value})")
        if child.status is not WAITING or child.seq_id in self._live:
            raise ValueError(f"child {child.seq_id!r} must be a new Sequence with an unused seq_id")
        if child.prompt_token_ids != parent.prompt_token_ids:
            raise ValueError(f"child {child.seq_id!r} must have the same prompt as parent {parent.seq_id!r}")
        self._check_fits(child)
        pending = parent.num_computed_tokens < len(parent)  # its newest token has no KV yet
        self.allocator.fork(parent.seq_id, child.seq_id)
        child.token_ids = list(parent.token_ids)
        if last_token_id is not None and pending:
            child.token_ids[-1] = last_token_id
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_prefill_tokens = parent.num_prefill_tokens
        child.first_scheduled_step, child.first_token_step = (parent.first_scheduled_step,
                                                              parent.first_token_step)
        child.output_steps = list(parent.output_steps)
        child.status = RUNNING
        self._live[child.seq_id] = child
        self.running.append(child)
