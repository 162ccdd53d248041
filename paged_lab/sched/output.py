"""What one scheduler step computes: a SchedulerOutput of ScheduledSeq entries (as vLLM's
``vllm/v1/core/sched/output.py``). The engine reads it to build the batch; ``simulate()`` reads it to
draw the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paged_lab.sched.sequence import Sequence


@dataclass(slots=True)
class ScheduledSeq:
    """Compute the KV of ``seq.token_ids[start:end]`` this step."""

    seq: Sequence
    start: int
    end: int
    is_prefill: bool
    samples: bool = True  # end reaches the last token: sample one token from the last position
    # draft tokens after the sequence's tokens that this step verifies: positions [end - len, end) (vLLM's
    # ``scheduled_spec_decode_tokens``); the step samples at each of them and at the token before them
    spec_token_ids: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        return self.end - self.start

    @property
    def token_ids(self) -> list[int]:
        """The query tokens of this step: ``seq.token_ids[start:end]``, then the drafts."""
        return self.seq.token_ids[self.start:self.end - len(self.spec_token_ids)] + list(self.spec_token_ids)


@dataclass
class SchedulerOutput:
    """What one step computes. Engine order: swap_out, swap_in, cow_copies, then the forward."""

    step: int
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    cow_copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) block copies
    preempted: list[Sequence] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)  # (gpu_block, cpu_block)
    swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu_block, gpu_block)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.end - s.start for s in self.scheduled)

    @property
    def num_prefill_tokens(self) -> int:
        return sum([s.end - s.start for s in self.scheduled if s.is_prefill])

    @property
    def num_decode_tokens(self) -> int:
        return sum([s.end - s.start for s in self.scheduled if not s.is_prefill])  # 1 (+ drafts) per decode

    @property
    def sampling(self) -> list[ScheduledSeq]:
        """The scheduled entries that sample a token, in the order ``update`` expects their ids."""
        return [s for s in self.scheduled if s.samples]
