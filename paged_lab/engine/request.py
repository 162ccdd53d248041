"""Request: what the engine keeps of one prompt and its n completions while they run.

Each completion is a ``Sequence`` the Scheduler runs on its own; the Request ties the n of them back to
the prompt, their SamplingParams and their sampling RNGs, so that ``generate()`` can return one
``RequestOutput`` per prompt. ``engine.parallel_sampling`` makes the completions.
"""

from __future__ import annotations

import time

import torch

from paged_lab.engine.params import SamplingParams
from paged_lab.sched import Sequence


class Request:
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
