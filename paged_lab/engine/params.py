"""Request-side types in vLLM's shape: SamplingParams in, RequestOutput / CompletionOutput out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real

from paged_lab._checks import check_int

MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes an unsigned 64-bit seed


@dataclass
class SamplingParams:
    """How to sample one request (the vLLM names and defaults).

    temperature: 0 means greedy (argmax); otherwise logits are divided by it before softmax.
    top_p: keep the smallest set of tokens whose probability mass reaches top_p (1.0 = off).
    top_k: keep the k most likely tokens (0 or -1 = off).
    max_tokens: output tokens at most (finish_reason "length").
    n: completions per prompt; they share the prompt's KV blocks (fork + copy-on-write).
    seed: makes sampling reproducible per request (a torch.Generator per completion; completion i uses
        seed + i), an integer in [0, 2**64 - n].
    stop: strings that end a completion (finish_reason "stop"); the stop string is not returned.
    ignore_eos: keep generating past the end-of-sequence token.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    seed: int | None = None
    stop: list[str] | str | None = None
    ignore_eos: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field and its limit; the engine calls it again for every request, so
        fields edited after creation are checked too. Valid fields are normalised on the way: numpy
        integers become ``int`` and a single stop string becomes a one-element list."""
        self.n = check_int("n", self.n, minimum=1)
        self.max_tokens = check_int("max_tokens", self.max_tokens, minimum=1)
        _check_real("temperature", self.temperature)
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        _check_real("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        self.top_k = check_int("top_k", self.top_k, minimum=-1)  # 0 or -1: off
        if self.seed is not None:  # completion i draws with seed + i: all n of them must be valid torch seeds
            self.seed = check_int("seed", self.seed, minimum=0, maximum=MAX_SEED - (self.n - 1))
        self.stop = _stop_list(self.stop)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _check_real(name: str, value) -> None:
    """A finite real number: not a string ("0.5"), not a bool, not inf (the caller checks the limits)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def _stop_list(stop) -> list[str]:
    """``stop`` as a list of non-empty strings: None -> [], "x" -> ["x"]; anything else raises."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)) or any(not isinstance(s, str) or not s for s in stop):
        raise ValueError(f"stop must be a string or a list of non-empty strings, got {stop!r}")
    return list(stop)


@dataclass
class CompletionOutput:
    """One completion of a request."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None  # "stop" (EOS or a stop string), "length" (max_tokens) or None while running

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """When things happened to one request: vLLM V0's ``RequestMetrics`` fields (V1 keeps arrival, scheduling
    and first and last token in ``RequestStateStats``, ``vllm/v1/metrics/stats.py``), in seconds on
    ``time.perf_counter``'s clock, and the same moments in engine steps (to compare with
    ``simulate()``, which counts only steps). A step's time is when its forward ended.

    TTFT = first_token_time - arrival_time; end-to-end = finished_time - arrival_time. With n > 1
    the first token is the earliest of the completions and finished the latest.
    """

    arrival_time: float
    last_token_time: float | None
    first_scheduled_time: float | None
    first_token_time: float | None
    time_in_queue: float | None  # first_scheduled_time - arrival_time
    finished_time: float | None
    arrival_step: int = 0
    first_scheduled_step: int | None = None
    first_token_step: int | None = None
    finished_step: int | None = None

    @property
    def ttft(self) -> float | None:
        """Time to first token, in seconds."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def e2e_latency(self) -> float | None:
        """Arrival to the last token, in seconds."""
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass
class RequestOutput:
    """The prompt and its ``n`` completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    metrics: RequestMetrics | None = None  # arrival, first scheduled, first token, finished

    @property
    def finished(self) -> bool:
        return all(o.finished for o in self.outputs)
