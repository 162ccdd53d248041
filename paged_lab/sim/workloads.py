"""Seeded request workloads, and the two story presets.

A workload is a tuple of :class:`Request` (prompt token ids, ``max_tokens``, arrival step).
Prompt token ids are synthetic and unique per request (they never share a prefix by accident),
except in :func:`shared_prefix`, where requests of one group start with the same tokens on
purpose. Same arguments and seed -> the same workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from paged_lab._checks import check_int

# The locker story: 60 lockers, the old manager reserves 12 in a row for each traveller.
LOCKER_SLOTS = 60
LOCKER_RESERVATION = 12
LOCKER_LUGGAGE = (9, 6, 12, 8, 11, 7)  # A-F, 53 slots in all: fits in 60
LOCKER_LUGGAGE_OVERFLOW = (12, 11, 12, 10, 12, 11)  # 68 slots in all: more than 60
# The windows story: 3 windows; A needs 6 rounds, the others 2.
WINDOWS = 3
WINDOWS_ROUNDS = (6, 2, 2, 2, 2, 2)
TRAVELLERS = "ABCDEF"


@dataclass(frozen=True)
class Request:
    name: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    arrival_step: int = 0

    def __post_init__(self):
        if len(self.prompt_token_ids) == 0:
            raise ValueError(f"prompt_token_ids of request {self.name!r} must hold at least 1 token, got 0")
        check_int(f"max_tokens of request {self.name!r}", self.max_tokens, minimum=1)
        check_int(f"arrival_step of request {self.name!r}", self.arrival_step, minimum=0)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def max_num_slots(self) -> int:
        """KV slots it holds at its largest: prompt + max_tokens - 1 (the last token is never stored)."""
        return len(self.prompt_token_ids) + self.max_tokens - 1


@dataclass(frozen=True)
class Workload:
    name: str
    requests: tuple[Request, ...]
    description: str = ""

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        return iter(self.requests)

    def __getitem__(self, i):
        return self.requests[i]

    @property
    def total_slots(self) -> int:
        """Slots all requests hold at their largest, added up (the story's 'total luggage')."""
        return sum(r.max_num_slots for r in self.requests)


def _range(name: str, value) -> tuple[int, int]:
    lo, hi = (value, value) if isinstance(value, (int, np.integer)) else value
    lo, hi = check_int(f"{name} (low)", lo, minimum=1), check_int(f"{name} (high)", hi, minimum=1)
    if lo > hi:
        raise ValueError(f"{name} must be (low, high) with low <= high, got {value!r}")
    return lo, hi


def _arrivals(rng, n: int, requests_per_step: float | None) -> list[int]:
    """All at step 0, or a Poisson process with ``requests_per_step`` on average."""
    if requests_per_step is None:
        return [0] * n
    if not requests_per_step > 0:
        raise ValueError(f"requests_per_step must be > 0 (or None: all at step 0), got {requests_per_step!r}")
    return np.floor(np.cumsum(rng.exponential(1.0 / requests_per_step, n))).astype(int).tolist()


def poisson_arrivals(num_requests: int, rate: float, seed: int = 0) -> list[int]:
    """Arrival steps of a Poisson process: ``rate`` requests per step on average (gaps drawn from an
    exponential distribution, seeded). Non-decreasing; several requests may share a step."""
    n = check_int("num_requests", num_requests, minimum=0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ValueError(f"rate must be a number > 0 (requests per step), got {rate!r}")
    return _arrivals(np.random.default_rng(seed), n, float(rate))


def burst_arrivals(num_requests: int, burst_size: int, every: int) -> list[int]:
    """Bursts: ``burst_size`` requests arrive together every ``every`` steps (at 0, every, 2*every, ...)."""
    n = check_int("num_requests", num_requests, minimum=0)
    size, period = check_int("burst_size", burst_size, minimum=1), check_int("every", every, minimum=1)
    return [(i // size) * period for i in range(n)]


def with_arrivals(workload: Workload, arrival_steps, name: str | None = None) -> Workload:
    """The same requests, arriving at ``arrival_steps`` (one per request: a replayed trace, or
    :func:`poisson_arrivals` / :func:`burst_arrivals`)."""
    steps = list(arrival_steps)
    if len(steps) != len(workload):
        raise ValueError(f"arrival_steps has {len(steps)} entries but the workload has "
                         f"{len(workload)} requests")
    for i, a in enumerate(steps):
        check_int(f"arrival_steps[{i}]", a, minimum=0)
    reqs = tuple(Request(r.name, r.prompt_token_ids, r.max_tokens, int(a)) for r, a in zip(workload, steps))
    return Workload(name or workload.name, reqs,
                    f"{workload.description}; arrivals {steps[:3]}...".strip("; "))


def _build(name: str, prompt_lens, output_lens, arrivals, description: str, prefixes=None) -> Workload:
    reqs, next_id = [], 1
    for i, (p, o, a) in enumerate(zip(prompt_lens, output_lens, arrivals)):
        head = () if prefixes is None else prefixes[i]
        own = int(p) - len(head)
        # Fresh ids for every request's own tokens: no accidental prefix sharing.
        reqs.append(Request(f"r{i}", head + tuple(range(next_id, next_id + own)), int(o), int(a)))
        next_id += own
    return Workload(name, tuple(reqs), description)


def fixed(num_requests: int, prompt_len: int = 32, output_len: int = 32,
          requests_per_step: float | None = None, seed: int = 0) -> Workload:
    """Every request has the same prompt and output length."""
    n = check_int("num_requests", num_requests, minimum=0)
    check_int("prompt_len", prompt_len, minimum=1), check_int("output_len", output_len, minimum=1)
    rng = np.random.default_rng(seed)
    return _build("fixed", [prompt_len] * n, [output_len] * n, _arrivals(rng, n, requests_per_step),
                  f"{n} requests, prompt {prompt_len}, output {output_len}")


def uniform(num_requests: int, prompt_len=(16, 64), output_len=(8, 64),
            requests_per_step: float | None = None, seed: int = 0) -> Workload:
    """Prompt and output lengths drawn uniformly from ``(low, high)`` (both included)."""
    n = check_int("num_requests", num_requests, minimum=0)
    (pl, ph), (ol, oh) = _range("prompt_len", prompt_len), _range("output_len", output_len)
    rng = np.random.default_rng(seed)
    p, o = rng.integers(pl, ph + 1, n), rng.integers(ol, oh + 1, n)
    return _build("uniform", p, o, _arrivals(rng, n, requests_per_step),
                  f"{n} requests, prompt U[{pl},{ph}], output U[{ol},{oh}]")


def long_tail(num_requests: int, prompt_median: float = 160, output_median: float = 200,
              sigma: float = 1.0, max_seq_len: int = 2048, requests_per_step: float | None = None,
              seed: int = 0) -> Workload:
    """Lognormal prompt and output lengths (most short, a few very long), like chat traces.

    Each request is clipped so that prompt + output <= ``max_seq_len`` (as a server's
    max_model_len would).
    """
    n = check_int("num_requests", num_requests, minimum=0)
    msl = check_int("max_seq_len", max_seq_len, minimum=2)
    if not (prompt_median > 0 and output_median > 0):
        raise ValueError(f"prompt_median and output_median must be > 0, got {prompt_median!r}, "
                         f"{output_median!r}")
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    rng = np.random.default_rng(seed)
    p = np.clip(np.round(rng.lognormal(math.log(prompt_median), sigma, n)), 1, msl - 1).astype(int)
    o = np.round(rng.lognormal(math.log(output_median), sigma, n)).astype(int)
    o = np.clip(o, 1, msl - p + 1)  # prompt + output - 1 slots <= max_seq_len
    return _build("long_tail", p, o, _arrivals(rng, n, requests_per_step),
                  f"{n} requests, lognormal prompt (median {prompt_median}) and output (median "
                  f"{output_median}), sigma {sigma}, clipped to {msl} tokens")


def shared_prefix(num_requests: int, prefix_len: int = 64, suffix_len=(8, 32), output_len=(8, 64),
                  num_prefixes: int = 1, requests_per_step: float | None = None, seed: int = 0) -> Workload:
    """Requests in ``num_prefixes`` groups; a group's prompts start with the same ``prefix_len``
    tokens (a shared system prompt), followed by their own suffix."""
    n = check_int("num_requests", num_requests, minimum=0)
    check_int("prefix_len", prefix_len, minimum=1)
    g = check_int("num_prefixes", num_prefixes, minimum=1)
    (sl, sh), (ol, oh) = _range("suffix_len", suffix_len), _range("output_len", output_len)
    rng = np.random.default_rng(seed)
    s, o = rng.integers(sl, sh + 1, n), rng.integers(ol, oh + 1, n)
    group = rng.integers(0, g, n)
    # Prefix ids live far above the per-request ids, so they never collide with them.
    heads = [tuple(range(10**9 + k * prefix_len, 10**9 + (k + 1) * prefix_len)) for k in range(g)]
    return _build("shared_prefix", s + prefix_len, o, _arrivals(rng, n, requests_per_step),
                  f"{n} requests, {g} shared prefix(es) of {prefix_len} tokens, suffix U[{sl},{sh}], "
                  f"output U[{ol},{oh}]", prefixes=[heads[k] for k in group])


def locker_story(luggage=LOCKER_LUGGAGE) -> Workload:
    """Six travellers A-F, arriving in order. ``luggage[i]``: slots traveller i holds at the end.

    Half the luggage arrives with the traveller (the prompt), the rest grows one token per step
    (generated tokens), so ``prompt + max_tokens - 1 == luggage``.
    """
    luggage = tuple(luggage)
    if not 1 <= len(luggage) <= len(TRAVELLERS):
        raise ValueError(f"luggage must list 1..{len(TRAVELLERS)} travellers, got {len(luggage)}")
    reqs, next_id = [], 1
    for name, total in zip(TRAVELLERS, luggage):
        total = check_int(f"luggage[{name}]", total, minimum=1)
        prompt = (total + 1) // 2
        reqs.append(Request(name, tuple(range(next_id, next_id + prompt)), total - prompt + 1, 0))
        next_id += prompt
    return Workload("locker_story", tuple(reqs), f"luggage {dict(zip(TRAVELLERS, luggage))}, "
                                                 f"{sum(luggage)} slots in all")


def locker_story_overflow() -> Workload:
    """The locker story with more luggage (68) than lockers (60): Ah-Ye must make people wait too."""
    return locker_story(LOCKER_LUGGAGE_OVERFLOW)


def windows_story(rounds=WINDOWS_ROUNDS, prompt_len: int = 4) -> Workload:
    """Six travellers at the windows; traveller i needs ``rounds[i]`` rounds (= output tokens: the
    first is sampled in the prefill round)."""
    rounds = tuple(rounds)
    if not 1 <= len(rounds) <= len(TRAVELLERS):
        raise ValueError(f"rounds must list 1..{len(TRAVELLERS)} travellers, got {len(rounds)}")
    check_int("prompt_len", prompt_len, minimum=1)
    reqs = [Request(name, tuple(range(1 + i * prompt_len, 1 + (i + 1) * prompt_len)),
                    check_int(f"rounds[{name}]", r, minimum=1), 0)
            for i, (name, r) in enumerate(zip(TRAVELLERS, rounds))]
    return Workload("windows_story", tuple(reqs), f"rounds {dict(zip(TRAVELLERS, rounds))}")
