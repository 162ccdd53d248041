"""Request-side types in vLLM's shape: SamplingParams in, RequestOutput / CompletionOutput out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    """How to sample one request (the vLLM names and defaults).

    temperature: 0 means greedy (argmax); otherwise logits are divided by it before softmax.
    top_p: keep the smallest set of tokens whose probability mass reaches top_p (1.0 = off).
    top_k: keep the k most likely tokens (0 or -1 = off).
    max_tokens: output tokens at most (finish_reason "length").
    n: completions per prompt; they share the prompt's KV blocks (fork + copy-on-write).
    seed: makes sampling reproducible per request (a torch.Generator per completion).
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
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field and its limit."""
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(f"top_k must be an integer >= 1, or 0 / -1 for off, got {self.top_k!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must hold non-empty strings, got {self.stop!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


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
    """When things happened to one request: vLLM's ``RequestMetrics`` fields, in seconds on
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
