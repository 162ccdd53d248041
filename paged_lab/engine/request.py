"""EngineRequest: what the engine keeps of one prompt and its n completions while they run;
RequestTable: the one owner of the running requests.

Each completion is a ``Sequence`` the Scheduler runs on its own; the EngineRequest ties the n of them back
to the prompt, their SamplingParams and their sampling RNGs, so that ``generate()`` can return one
``RequestOutput`` per prompt. ``engine.parallel_sampling`` makes the completions; the ``RequestTable``
holds them, finds a completion's request, and lets every request go when the call ends.

Two other things are called a request: ``sim.workloads.Request``, one line of a simulated workload, and
vLLM V1's ``Request``, which is one completion (here a ``Sequence``); vLLM ties the n completions of one
prompt together in a ``ParentRequest`` (``vllm/v1/engine/parallel_sampling.py``:13), as the EngineRequest
does here.
"""

from __future__ import annotations

import time

import torch

from paged_lab.engine.params import SamplingParams
from paged_lab.sched import Sequence, SequenceStatus


class EngineRequest:
    """One prompt of a ``generate()`` call and its completions.

    max_tokens: output tokens one completion may produce (``params.max_tokens``, cut where the model
        context ends). arrival_step: the scheduler step at which it joined.
    """

    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
                 params: SamplingParams, max_tokens: int, arrival_step: int):
        self.request_id, self.prompt, self.prompt_token_ids = request_id, prompt, prompt_token_ids
        self.params, self.max_tokens, self.arrival_step = params, max_tokens, arrival_step
        self.seqs: list[Sequence] = []  # completion i is seqs[i]
        self.generators: dict[str, torch.Generator | None] = {}  # seq_id -> its sampling RNG (None: greedy)
        self.num_cached_tokens: int | None = None  # prompt tokens its first prefill found in the prefix cache
        self.arrival_time = time.perf_counter()  # seconds, the clock of RequestMetrics

    @property
    def num_pending(self) -> int:
        """Completions not made yet: in "fork" mode the n - 1 children wait for the first one's prefill."""
        return self.params.n - len(self.seqs)

    @property
    def finished(self) -> bool:
        return self.num_pending == 0 and all(s.is_finished for s in self.seqs)


class RequestTable:
    """The engine's running requests, by the seq_id of each of their completions: ``table[seq_id]``.

    Requests are numbered "0", "1", ... over the engine's life; ``engine.parallel_sampling`` makes their
    completions and ``add``s them here; none outlives the ``generate()`` call that made it (``release``,
    ``abort``).
    """

    def __init__(self):
        self._by_seq: dict[str, EngineRequest] = {}  # seq_id -> its request
        self._next_id = 0

    def __getitem__(self, seq_id: str) -> EngineRequest:
        return self._by_seq[seq_id]

    def __len__(self) -> int:
        return len(self._by_seq)

    def new(self, prompt: str | None, ids: list[int], params: SamplingParams, max_tokens: int,
            arrival_step: int) -> EngineRequest:
        """A request with the next id, no completion yet."""
        req = EngineRequest(str(self._next_id), prompt, ids, params, max_tokens, arrival_step)
        self._next_id += 1
        return req

    def add(self, req: EngineRequest, seq: Sequence, generator: torch.Generator | None) -> None:
        """``seq`` joins ``req`` as its next completion, sampling with ``generator`` (None: greedy)."""
        req.seqs.append(seq)
        req.generators[seq.seq_id] = generator
        self._by_seq[seq.seq_id] = req

    def note_cached_tokens(self, scheduled, allocator, connector=None) -> None:
        """Each request whose first prefill chunk is ``scheduled`` records the prompt tokens it skipped: its
        prefix-cache hit, and what a second tier (``connector``) gave it (vLLM's PrefillStats adds both)."""
        for s in scheduled:
            req = self._by_seq[s.seq.seq_id]
            if s.is_prefill and req.num_cached_tokens is None and s.seq is req.seqs[0]:
                req.num_cached_tokens = allocator.num_cached_tokens(s.seq.seq_id) + (
                    connector.num_external_tokens(s.seq.seq_id) if connector else 0)

    def release(self) -> None:
        """The call is over: the engine keeps no request."""
        self._by_seq.clear()

    def abort(self, requests: list[EngineRequest | None]
              ) -> tuple[list[EngineRequest], list[EngineRequest]]:
        """After an exception escaped a call: every completion of ``requests`` (the call's, None: not
        arrived) and of the table not finished yet is finished as "abort" (the Scheduler has dropped
        them); returns (the requests that had finished, the aborted ones) and lets all of them go."""
        reqs = {id(r): r for r in [*requests, *self._by_seq.values()] if r is not None}
        for seq in (s for r in reqs.values() for s in r.seqs if not s.is_finished):  # (never scheduled)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "abort"
        aborted = [r for r in reqs.values()
                   if r.num_pending or any(s.finish_reason == "abort" for s in r.seqs)]
        self.release()
        return [r for r in reqs.values() if r not in aborted], aborted
