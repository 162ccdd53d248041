"""Latency of a serving run: time to first token (TTFT), inter-token latency (ITL), end-to-end.

The three numbers a serving engineer is judged by, per request (vLLM's names):

* **TTFT** -- from arrival to the first output token: queueing + the prefill.
* **ITL** -- the gap between two consecutive output tokens of one request (a decode step, or longer
  when the request was preempted or a step skipped it). TPOT is one request's mean ITL.
* **end-to-end** -- from arrival to the last token.

The simulator counts time in steps (``Sequence.output_steps``); the engine also in seconds (the end
of each step on ``time.perf_counter``'s clock). Both feed :func:`latency_summary`, which reports
p50 / p90 / p99 the way ``vllm bench serve`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

import numpy as np

PERCENTILES = (50, 90, 99)


def percentiles(values, ps=PERCENTILES) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "p99": ...}`` of ``values`` (linear interpolation; zeros when empty)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {f"p{p}": 0.0 for p in ps}
    return {f"p{p}": float(v) for p, v in zip(ps, np.percentile(arr, ps))}


def token_gaps(output_times: Iterable[list]) -> np.ndarray:
    """Every inter-token gap of every request: the differences between consecutive entries of each
    request's output times (in steps or seconds). One flat array; requests with one token add none."""
    lists = [t for t in output_times if len(t) > 1]
    if not lists:
        return np.zeros(0)
    flat = np.fromiter(chain.from_iterable(lists), dtype=float)
    gaps = np.diff(flat)
    # Drop the differences across a request boundary: the first entry of each request but the first.
    starts = np.cumsum([len(t) for t in lists])[:-1]
    return np.delete(gaps, starts - 1)


def latency_summary(ttft, itl_gaps, e2e, unit: str) -> dict[str, float]:
    """``ttft_<unit>_p50 ... e2e_<unit>_p99``: p50 / p90 / p99 of TTFT, ITL and end-to-end latency."""
    out = {}
    for name, values in (("ttft", ttft), ("itl", itl_gaps), ("e2e", e2e)):
        for key, v in percentiles(values).items():
            out[f"{name}_{unit}_{key}"] = v
    return out
