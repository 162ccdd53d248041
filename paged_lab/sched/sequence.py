"""Sequence: one request as the scheduler sees it -- its tokens, how many have KV, and its status.

``token_ids`` is the prompt followed by every sampled token. ``num_computed_tokens`` counts the
leading tokens whose K and V are in the cache; the rest are what the next step computes. After a
prefill or decode step the newest sampled token is always one ahead: it has no KV yet, and the
next decode step computes it (and samples the token after it).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable

from paged_lab._checks import check_int


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # in the queue: no blocks (new, or preempted by recompute)
    RUNNING = "running"  # holds blocks; scheduled every step it gets a token budget
    SWAPPED = "swapped"  # preempted by swap: its blocks wait in the CPU pool
    FINISHED = "finished"


class Sequence:
    """A request: ``prompt_token_ids`` in, at most ``max_tokens`` sampled tokens out.

    >>> s = Sequence("A", [1, 2, 3], max_tokens=2)
    >>> s.num_prompt_tokens, s.num_output_tokens, s.status.value
    (3, 0, 'waiting')
    """

    def __init__(self, seq_id: Hashable, prompt_token_ids: Iterable[int], max_tokens: int,
                 eos_token_id: int | None = None, ignore_eos: bool = False, arrival_step: int = 0,
                 name: str | None = None):
        prompt = list(prompt_token_ids)
        if not prompt:
            raise ValueError(f"prompt_token_ids of seq {seq_id!r} must hold at least 1 token, got 0")
        self.seq_id = seq_id
        self.name = str(seq_id) if name is None else name  # label in figures ("A".."F")
        self.token_ids: list[int] = prompt
        self.num_prompt_tokens = len(prompt)
        self.max_tokens = check_int("max_tokens", max_tokens, minimum=1)
        self.eos_token_id = eos_token_id
        self.ignore_eos = bool(ignore_eos)
        self.num_computed_tokens = 0  # leading tokens whose KV is in the cache
        # Leading tokens the current prefill computes: the prompt, plus the outputs so far when a recompute
        # preemption dropped their KV (set by the scheduler on admission). Tokens past it are decoded.
        self.num_prefill_tokens = 0
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None  # "length" | "stop" | "abort" | engine's reason
        # Timing, in scheduler steps (one step = one round of the windows story).
        self.arrival_step = check_int("arrival_step", arrival_step, minimum=0)
        self.first_scheduled_step: int | None = None
        self.first_token_step: int | None = None
        self.finish_step: int | None = None
        self.output_steps: list[int] = []  # the step that sampled each output token (ITL = its gaps)
        self.num_preemptions = 0
        # Draft tokens to verify in its next step (speculative decoding, ``engine/spec_decode``): they follow
        # ``token_ids`` but are not part of it; the scheduler schedules them and clears the list (vLLM's
        # ``Request.spec_token_ids``).
        self.spec_token_ids: list[int] = []

    def append_token(self, token_id: int, step: int | None = None) -> None:
        """Record a token sampled at scheduler ``step`` (its KV is computed by the next step)."""
        self.token_ids.append(token_id)
        if step is not None:
            self.output_steps.append(step)
            if self.first_token_step is None:
                self.first_token_step = step

    # -- views ---------------------------------------------------------------------------------
    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[:self.num_prompt_tokens]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def max_num_slots(self) -> int:
        """KV slots this request can ever hold: prompt + max_tokens - 1 (the last sampled token is
        returned to the user and never stored)."""
        return self.num_prompt_tokens + self.max_tokens - 1

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def latency_steps(self) -> int | None:
        """End-to-end latency: steps from arrival to the step that produced the last token, both included."""
        return None if self.finish_step is None else self.finish_step - self.arrival_step + 1

    @property
    def ttft_steps(self) -> int | None:
        """Time to first token: steps from arrival to the step that sampled the first token, both
        included (admitted and prefilled in its arrival step -> 1)."""
        return None if self.first_token_step is None else self.first_token_step - self.arrival_step + 1

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return (f"Sequence({self.seq_id!r}, status={self.status.value}, prompt={self.num_prompt_tokens}, "
                f"output={self.num_output_tokens}/{self.max_tokens}, computed={self.num_computed_tokens})")
