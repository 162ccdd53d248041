"""The throughput-latency curve: sweep the arrival rate, measure tokens per step and latency.

Three designs share one KV pool of ``num_slots`` token slots and one workload (seeded Poisson
arrivals, prompts 16-64 and outputs 8-64 tokens, as notebook 05's other runs):

* ``static`` -- static batching over contiguous reservations (every request reserves
  ``max_seq_len`` slots; a new batch starts only when the last one has finished): the pre-Orca way;
* ``contiguous`` -- continuous batching over the same reservations (Orca without paging);
* ``paged`` -- continuous batching over a paged BlockManager (vLLM).

At a low rate every design keeps up: throughput is the arrival rate times the mean output, and TTFT
is one step. Past its *saturation* throughput a design cannot keep up: the queue grows for as long
as requests arrive, and TTFT with it. Paging lifts the saturation point because more requests fit
in the same memory at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from paged_lab._checks import check_int
from paged_lab.memory.contiguous import ContiguousAllocator
from paged_lab.sim.simulate import paged, simulate
from paged_lab.sim.workloads import uniform

DESIGNS = ("static", "contiguous", "paged")  # in the order of the story
LABELS = {"static": "static batching, contiguous", "contiguous": "continuous batching, contiguous",
          "paged": "continuous batching, paged"}
RATES = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)  # requests per step
MAX_SEQ_LEN = 128  # the contiguous reservation: the longest request (64 + 64 - 1 slots) fits


@dataclass(frozen=True)
class CurvePoint:
    """One design at one arrival rate (latency in steps)."""

    design: str
    rate: float
    max_num_seqs: int
    tokens_per_step: float  # output tokens / steps until the last request finished
    ttft_p90: float
    itl_p90: float
    itl_p99: float
    e2e_p90: float
    num_preemptions: int
    peak_running: int


def run_point(design: str, rate: float, num_requests: int = 150, block_size: int = 16, num_slots: int = 1024,
              max_num_seqs: int = 32, max_num_batched_tokens: int | None = 256, seed: int = 0) -> CurvePoint:
    """Simulate one design at one arrival rate (``rate`` requests per step, Poisson, seeded)."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ValueError(f"rate must be a number > 0 (requests per step), got {rate!r}")
    block_size = check_int("block_size", block_size, minimum=1)
    if design != "paged":
        block_size = 16  # (unused: contiguous runs share one cache entry whatever the block size)
    return _run_point(design, float(rate), check_int("num_requests", num_requests, minimum=1), block_size,
                      check_int("num_slots", num_slots, minimum=MAX_SEQ_LEN),
                      check_int("max_num_seqs", max_num_seqs, minimum=1), max_num_batched_tokens, seed)


@lru_cache(maxsize=512)  # a slider that comes back to a value redraws at once
def _run_point(design, rate, num_requests, block_size, num_slots, max_num_seqs, max_num_batched_tokens,
               seed) -> CurvePoint:
    wl = uniform(num_requests, prompt_len=(16, 64), output_len=(8, 64), requests_per_step=rate, seed=seed)
    alloc = (paged(num_slots // block_size, block_size) if design == "paged"
             else ContiguousAllocator(num_slots, MAX_SEQ_LEN))
    s = simulate(wl, alloc, {"max_num_seqs": max_num_seqs,
                             "mode": "static" if design == "static" else "continuous",
                             "max_num_batched_tokens": max_num_batched_tokens}).summary
    return CurvePoint(design, rate, max_num_seqs, s["tokens_per_step"], s["ttft_steps_p90"],
                      s["itl_steps_p90"],
                      s["itl_steps_p99"], s["e2e_steps_p90"], s["num_preemptions"], s["peak_running"])


def latency_sweep(rates=RATES, designs=DESIGNS, **kw) -> list[CurvePoint]:
    """Every design at every rate (keyword arguments: see :func:`run_point`)."""
    rates = sorted(set(rates))
    if not rates or any(not r > 0 for r in rates):
        raise ValueError(f"rates must hold numbers > 0 (requests per step), got {rates!r}")
    return [run_point(d, r, **kw) for d in designs for r in rates]


def saturation(points: list[CurvePoint]) -> dict[str, float]:
    """The highest throughput (output tokens per step) each design reached in the sweep."""
    out: dict[str, float] = {}
    for p in points:
        out[p.design] = max(out.get(p.design, 0.0), p.tokens_per_step)
    return out
