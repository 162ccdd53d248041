"""Parallel sampling: the n completions of one request (``SamplingParams(n > 1)``), two ways.

* ``"prefix"`` (vLLM V1, the default): the n completions join the queue together, as sequences of their
  own with the same prompt, as V1 fans a request out into n child requests
  (``vllm/v1/engine/parallel_sampling.py``, ``ParentRequest.get_child_info``), added in one loop
  (``vllm/v1/engine/llm_engine.py``, ``LLMEngine.add_request``). Admitted in the same step, the others
  find the full prompt blocks the first one computes in the prefix cache (those blocks are cached as
  they are scheduled, and stored before anyone attends); each computes the partly filled last block
  itself. No copy-on-write.
* ``"fork"`` (the PagedAttention paper, vLLM V0): once the prompt is prefilled, the n - 1 children fork
  the parent's block table (refcounts) and draw their first token from its logits. The first write into
  a shared, partly filled block is a copy-on-write.

Both give the same tokens: completion i samples with its own RNG, seeded ``seed + i`` (as V1 gives child
i ``seed + index``, ``ParentRequest._get_child_sampling_params``).
"""

from __future__ import annotations

import torch

from paged_lab.engine.request import EngineRequest, RequestTable
from paged_lab.engine.sampling import make_generator, sample
from paged_lab.sched import Scheduler, Sequence, SequenceStatus

PARALLEL_SAMPLING = ("fork", "prefix")  # V0 (the paper) / V1


class ParallelSampling:
    """Makes every request's completions, the way ``mode`` says, and gives them to ``scheduler``.

    requests: the engine's ``RequestTable``; every new completion is added there. eos_token_ids: the
    model's end-of-sequence ids (the first is the one the Scheduler stops on). device: where the
    sampling RNGs live (the device of the logits they sample).
    """

    def __init__(self, mode: str, scheduler: Scheduler, requests: RequestTable,
                 eos_token_ids: list[int], device: torch.device):
        self.mode, self.scheduler, self.requests = mode, scheduler, requests
        self.eos_token_ids, self.device = eos_token_ids, device

    def new_completion(self, req: EngineRequest) -> Sequence:
        """Completion i = len(req.seqs) of ``req``: a Sequence of its prompt and limits (id
        "<request_id>" for the first, "<request_id>.<i>" for the others) and its sampling RNG, seeded
        ``seed + i``. It joins ``req`` (``RequestTable.add``); the caller queues or forks it."""
        i, sp = len(req.seqs), req.params
        eos = self.eos_token_ids[0] if self.eos_token_ids else None  # the Scheduler stops on this one
        seq = Sequence(req.request_id if i == 0 else f"{req.request_id}.{i}", req.prompt_token_ids,
                       max_tokens=req.max_tokens, eos_token_id=eos, ignore_eos=sp.ignore_eos,
                       arrival_step=req.arrival_step)
        self.requests.add(req, seq, None if sp.greedy else make_generator(
            None if sp.seed is None else sp.seed + i, self.device))
        return seq

    # ------------------------------------------------------------------------------------ "prefix" (V1)
    def add_siblings(self, req: EngineRequest) -> None:
        """"prefix" mode: queue the n - 1 other completions of ``req`` right behind its first one."""
        if self.mode != "prefix":
            return
        while req.num_pending:
            self.scheduler.add_request(self.new_completion(req))

    # ------------------------------------------------------------------------------------ "fork" (V0)
    def fork_children(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[Sequence]:
        """"fork" mode: a parent that just sampled its first token (``seqs[row]``, from ``logits[row]``,
        ``[num_sampled, vocab]``) forks its n - 1 children, each drawing its own first token from the
        same logits row. Returns the children that finished at once."""
        if self.mode != "fork":
            return []
        finished = []
        for row, parent in enumerate(seqs):
            req = self.requests[parent.seq_id]
            if not req.num_pending or parent.num_output_tokens != 1:
                continue
            while req.num_pending:
                child = self.new_completion(req)
                token = sample(logits[row : row + 1], [req.params], [req.generators[child.seq_id]])[0]
                if self._place_child(parent, child, token, self._first_token_stop(req, token)):
                    finished.append(child)
        return finished

    def _first_token_stop(self, req: EngineRequest, token: int) -> str | None:
        """The finish reason of a child whose first token is ``token`` (the Scheduler's rule: EOS, then
        max_tokens), or None when it goes on."""
        if token in self.eos_token_ids and not req.params.ignore_eos:
            return "stop"
        return "length" if req.max_tokens == 1 else None

    def _place_child(self, parent: Sequence, child: Sequence, token: int, stop: str | None) -> bool:
        """Give a new child to the scheduler (or finish it); True when it finished at once.

        It shares the running parent's blocks when a window is free (``max_num_seqs``); otherwise it
        waits in the queue with its first token, and is prefilled anew once admitted, like a preempted
        sequence (with prefix caching, its full prompt blocks are cache hits)."""
        sched = self.scheduler
        if parent.status is SequenceStatus.RUNNING and len(sched.running) < sched.max_num_seqs:
            sched.fork(parent, child, last_token_id=token)
            if stop:
                sched.finish(child, stop)
            return stop is not None
        child.token_ids.append(token)
        child.output_steps = list(parent.output_steps[:1])  # its first token came with the parent's
        child.first_scheduled_step = parent.first_scheduled_step
        child.first_token_step = parent.first_token_step
        if stop:  # the parent already finished (and freed its blocks): the child needs none
            child.status, child.finish_reason = SequenceStatus.FINISHED, stop
            child.finish_step = parent.first_token_step
            return True
        sched.add_request(child)  # the parent stopped, or no window is free: prefill the child anew
        return False

    def with_new_children(self, seqs: list[Sequence]) -> list[Sequence]:
        """``seqs`` and, after each parent that just sampled its first token, its children (forked this
        step: their first token may hit a stop string too). In "prefix" mode every completion samples
        as a sequence of its own, so ``seqs`` already holds them all."""
        if self.mode != "fork":
            return seqs
        out = []
        for seq in seqs:
            out.append(seq)
            req = self.requests[seq.seq_id]
            if req.seqs[0] is seq and seq.num_output_tokens == 1:
                out.extend(req.seqs[1:])
        return out
