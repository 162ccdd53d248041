"""The Scheduler with a second KV tier (notebook 09): hits looked up at admission, loaded while the
request waits, stores offered every step.

``TieredScheduler`` is notebook 05's ``Scheduler`` plus the calls vLLM V1's ``Scheduler`` makes on its
KV connector (``vllm/v1/core/sched/scheduler.py``, vllm 0.32.0; the connector here is
``memory/offload/connector.OffloadingConnector``):

* **admission** (``get_num_new_matched_tokens``): after its GPU prefix-cache hit, how many tokens the head
  of the queue can load from the tier. It gets blocks for them, and waits in ``loading`` (vLLM's
  ``WAITING_FOR_REMOTE_KVS``) until the load is done; the sequences behind it go on being admitted. One
  that must wait (its load, or a tier block it hits, still in flight) is skipped this step.
* **each step** (``build_connector_meta``): the loads planned at admission and the stores of the full
  prompt blocks this step computes, for the engine's worker (``memory/offload/worker.py``) to copy.
* **after the forward** (``update_connector_output``) the worker's report; **a finished request**
  (``request_finished``) makes its last offer next step.

A second tier follows vLLM V1: ``allocation="v1"``, ``preemption="recompute"``, ``mode="continuous"``.
"""

from __future__ import annotations

from collections import deque

from paged_lab.memory.errors import OutOfBlocks
from paged_lab.sched.output import SchedulerOutput
from paged_lab.sched.scheduler import Scheduler
from paged_lab.sched.sequence import Sequence


class TieredScheduler(Scheduler):
    """A ``Scheduler`` whose blocks also live in a second tier, through ``connector`` (the rest of the
    arguments are ``Scheduler``'s)."""

    def __init__(self, allocator, max_num_seqs: int, connector, **kwargs):
        super().__init__(allocator, max_num_seqs, **kwargs)  # (its arguments checked, its defaults taken)
        if (self.allocation, self.preemption, self.mode) != ("v1", "recompute", "continuous"):
            raise ValueError("connector: a second tier follows vLLM V1: allocation='v1', preemption="
                             "'recompute', mode='continuous'")
        self.connector = connector
        self.loading: deque[Sequence] = deque()  # holding blocks while their tier hit loads

    @property
    def num_unfinished(self) -> int:
        return super().num_unfinished + len(self.loading)

    def schedule(self) -> SchedulerOutput:
        out = super().schedule()
        out.kv_meta = self.connector.build_connector_meta(out.scheduled, self.allocator)  # its copies
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        """Step 3, with a tier: those whose load is done go first; one that must wait is skipped, and the
        skipped ones keep their order, in front (vLLM)."""
        skipped = {id(self.loading): deque(), id(self.waiting): deque()}
        while (self.loading or self.waiting) and len(self.running) < self.max_num_seqs and budget > 0:
            queue = self.loading or self.waiting
            seq = queue[0]
            external = self.connector.admission(seq, self.allocator)  # tokens to load after its GPU hit
            if external is None:  # its load, or a tier block it hits, is still in flight
                skipped[id(queue)].appendleft(queue.popleft())
                continue
            if not self._allocate_tiered(seq, budget, external):
                break  # first come, first served: nobody overtakes the head
            queue.popleft()
            if external:  # its hit is loaded from the tier: it waits in ``loading`` until then
                self.connector.after_alloc(seq, self.allocator, external)
                skipped[id(self.loading)].appendleft(seq)
                continue
            self._start_running(seq, out)
            budget -= self._schedule_tokens(seq, self._num_new_tokens(seq, budget), out)
        self.loading.extendleft(skipped[id(self.loading)])
        self.waiting.extendleft(skipped[id(self.waiting)])

    def _allocate_tiered(self, seq: Sequence, budget: int, external: int) -> bool:
        """A new ``seq``'s blocks (slots for ``external`` tokens to load, when it has a tier hit: they get
        blocks, nothing computes now), or the rest of one that holds blocks for its finished load."""
        if seq.seq_id not in self.allocator:
            return self._allocate_prompt(seq, external or budget)
        held = self.allocator.num_tokens(seq.seq_id)
        if not self.allocator.can_append(seq.seq_id, len(seq) - held):  # (the whole sequence must fit)
            return False
        end = seq.num_computed_tokens + self._num_new_tokens(seq, budget)
        try:
            self.allocator.append_tokens(seq.seq_id, seq.token_ids[held:end])
        except OutOfBlocks:  # (nothing changed)
            return False
        return True

    def _start_running(self, seq: Sequence, out: SchedulerOutput) -> None:
        loaded = seq.num_computed_tokens  # its GPU hit and the tokens loaded (0: no load)
        super()._start_running(seq, out)
        if loaded:
            seq.num_computed_tokens = loaded
        else:  # the lookup counts, with no tier hit
            self.connector.after_alloc(seq, self.allocator, 0)

    def update(self, out: SchedulerOutput, sampled_token_ids) -> list[Sequence]:
        finished = super().update(out, sampled_token_ids)
        self.connector.update_connector_output(out.kv_meta)  # the worker's report: loads, last step's stores
        return finished

    def _finish(self, seq: Sequence, reason: str, step: int) -> None:
        super()._finish(seq, reason, step)
        self.connector.request_finished(seq)

    def finish(self, seq: Sequence, reason: str = "stop") -> None:
        if seq in self.loading:  # (a sequence waiting for its load is live and unfinished)
            self.loading.remove(seq)
        super().finish(seq, reason)

    def abort_all(self) -> list[Sequence]:
        aborted = super().abort_all()
        self.loading = deque()
        self.connector.reset()  # the tier forgets everything: nothing half-copied is found
        return aborted
