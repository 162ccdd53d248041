"""What the engine measures: each step's time and timeline row, each request's ``RequestMetrics``, the
latency percentiles, ``LLM.stats()``, and ``generate()``'s progress bar.

vLLM V1 keeps the same moments in ``vllm/v1/metrics/stats.py`` (``RequestStateStats`` per request,
``IterationStats`` per step). Seconds are on ``time.perf_counter``'s clock; every moment is also counted
in engine steps, to compare with ``simulate()``, which counts only steps.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from paged_lab.engine.params import RequestMetrics
from paged_lab.engine.request import EngineRequest
from paged_lab.sim.latency import latency_summary, token_gaps

if TYPE_CHECKING:
    from paged_lab.engine.engine import LLM


class EngineMetrics:
    """What the engine keeps of its steps and finished requests: a bounded window of recent records, so a
    long-lived engine's memory and its ``stats()`` cost do not grow with the requests it has served
    (vLLM's stat loggers keep counters and histograms, ``vllm/v1/metrics/loggers.py``, not the requests).

    * ``timeline``: one row per step, the latest ``TIMELINE_ROWS`` (each row names its ``"step"``);
    * the (start, end) time of every step of the ``generate()`` call in progress (``time_of``), which its
      requests' ``RequestMetrics`` read;
    * the latencies of the latest ``REQUESTS_KEPT`` finished requests (``latency()``), and counters over
      every request served (``counters``).

    ``peak_usage``: the largest KV usage any step ended with. With ``layer_groups``
    (``engine.kv_groups.LayerGroups``) each row also has ``blocks_per_group`` (blocks each group holds
    at the step's end) and ``peak_blocks_per_group`` keeps the largest of each.
    """

    TIMELINE_ROWS = 1024  # timeline rows kept (the latest)
    REQUESTS_KEPT = 1024  # finished requests whose latencies latency() summarises (the latest)
    EVENTS_KEPT = 4096  # block events each BlockManager log keeps, at least (``BlockManager.trim_events``)

    def __init__(self, scheduler, block_manager, layer_groups=None):
        self.scheduler, self.block_manager, self.layer_groups = scheduler, block_manager, layer_groups
        self.timeline: deque[dict] = deque(maxlen=self.TIMELINE_ROWS)  # one row per step
        self._times: list[tuple[float, float]] = []  # (start, end) of steps _first_step, _first_step + 1, ...
        self._first_step = 0
        self.peak_usage = 0.0
        self.peak_blocks_per_group: dict[str, int] = {}
        self._latencies = {k: deque(maxlen=self.REQUESTS_KEPT) for k in _LATENCY_SAMPLES}  # one per request
        self.counters = {"num_finished_requests": 0, "num_aborted_requests": 0, "num_prompt_tokens": 0,
                         "num_generation_tokens": 0}

    def record_step(self, out, num_tokens: int, t0: float, interrupted: bool = False) -> None:
        """Close the step that started at ``t0``: its times and its timeline row. Only what is missing is
        added, so that every step schedule() counted has both, even one interrupted before schedule()
        returned (``out`` None)."""
        t1 = time.perf_counter()
        step = self.scheduler.step_count
        if self._first_step + len(self._times) < step:
            self._times.append((t0, t1))
        if self.timeline and self.timeline[-1]["step"] >= step:
            return
        bm = self.block_manager
        self.peak_usage = max(self.peak_usage, bm.usage)
        scheduled, preempted = (out.scheduled, out.preempted) if out is not None else ([], [])
        row = {
            "step": step,
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_prefill": sum(1 for s in scheduled if s.is_prefill),
            "num_decode": sum(1 for s in scheduled if not s.is_prefill),
            "num_batched_tokens": num_tokens,
            "num_context_tokens": sum(e.end for e in scheduled),  # K/V read by attention this step
            "num_preempted": len(preempted),
            "kv_usage": bm.usage,
            "num_free_blocks": bm.num_free_blocks,
            "seconds": t1 - t0,
            "interrupted": interrupted,  # an exception stopped it: its tokens were dropped
        }
        if self.layer_groups is not None:
            row["blocks_per_group"] = held = self.layer_groups.blocks_held(bm)
            for name, n in held.items():
                self.peak_blocks_per_group[name] = max(self.peak_blocks_per_group.get(name, 0), n)
        self.timeline.append(row)
        for m in getattr(bm, "managers", {"": bm}).values():  # (layer groups: one log per group)
            m.trim_events(self.EVENTS_KEPT)  # a long-lived engine keeps the latest block events

    def time_of(self, step: int | None, end: bool = True) -> float | None:
        """When step ``step`` (of the call in progress) ended (``end``) or started."""
        return None if step is None else self._times[step - self._first_step][end]

    def request_metrics(self, req: EngineRequest) -> RequestMetrics:
        """vLLM V0's RequestMetrics of ``req``: its steps from the scheduler, their times from the steps'.
        With n > 1 the first token is the earliest of the completions and finished the latest."""
        seqs = req.seqs
        first_sched = seqs[0].first_scheduled_step
        first_token = min((s.first_token_step for s in seqs if s.first_token_step is not None), default=None)
        finished = max(s.finish_step for s in seqs) if all(s.finish_step is not None for s in seqs) else None
        last = max((s.output_steps[-1] for s in seqs if s.output_steps), default=None)
        sched_time = self.time_of(first_sched, end=False)
        return RequestMetrics(
            arrival_time=req.arrival_time, last_token_time=self.time_of(last),
            first_scheduled_time=sched_time, first_token_time=self.time_of(first_token),
            time_in_queue=None if sched_time is None else sched_time - req.arrival_time,
            finished_time=self.time_of(finished), arrival_step=seqs[0].arrival_step,
            first_scheduled_step=first_sched, first_token_step=first_token, finished_step=finished)

    def retire(self, requests: Iterable[EngineRequest], aborted: int = 0) -> None:
        """The end of a ``generate()`` call: record the latencies of its finished ``requests`` and count them
        (and ``aborted`` others); the times of its steps are dropped."""
        lat = self._latencies
        for req in requests:
            m = self.request_metrics(req)
            lat["ttft_s"].append(m.ttft)
            lat["e2e_s"].append(m.e2e_latency)
            lat["ttft_steps"].append(m.first_token_step - m.arrival_step + 1)
            lat["e2e_steps"].append(m.finished_step - m.arrival_step + 1)
            lat["itl_s"].append(token_gaps([self.time_of(t) for t in s.output_steps] for s in req.seqs))
            lat["itl_steps"].append(token_gaps(s.output_steps for s in req.seqs))
            self.counters["num_finished_requests"] += 1
            self.counters["num_prompt_tokens"] += len(req.prompt_token_ids)
            self.counters["num_generation_tokens"] += sum(s.num_output_tokens for s in req.seqs)
        self.counters["num_aborted_requests"] += aborted
        self._first_step, self._times = self.scheduler.step_count, []

    def latency(self) -> dict[str, float]:
        """TTFT, ITL and end-to-end latency of the latest ``REQUESTS_KEPT`` finished requests, p50 / p90 /
        p99, in seconds (``ttft_s_p90`` ...) and in steps (``ttft_steps_p90`` ...). ITL counts every gap
        between consecutive tokens of one completion."""
        lat = self._latencies
        out = latency_summary(lat["ttft_s"], _concat(lat["itl_s"]), lat["e2e_s"], "s")
        out.update(latency_summary(lat["ttft_steps"], _concat(lat["itl_steps"]), lat["e2e_steps"], "steps"))
        return out


_LATENCY_SAMPLES = ("ttft_s", "itl_s", "e2e_s", "ttft_steps", "itl_steps", "e2e_steps")


def _concat(arrays) -> np.ndarray:
    return np.concatenate(list(arrays)) if arrays else np.zeros(0)


def engine_stats(llm: LLM) -> dict[str, Any]:
    """``LLM.stats()``: the attention backends that ran, the KV pool and prefix cache, the scheduler's
    counts (also under vLLM's metric names, ``vllm_metric_names``), the latency percentiles, the event
    log and the timeline."""
    bm, ks, groups = llm.block_manager, llm.kernel_stats, llm.layer_groups
    # a HybridBlockManager keeps one BlockManager per group: its counts and events are per group
    first = bm.managers[groups.groups[0].name] if groups.hybrid else bm
    return {
        "attention_backend": llm.attention_backend,
        "attention_backend_ran": ", ".join(name for name, _ in Counter(ks.calls).most_common()) or None,
        "attention_calls": dict(ks.calls),
        "attention_failures": dict(ks.failures),
        "attention_errors": dict(ks.last_error),
        "attention_backend_skipped": dict(llm.attention.backend.skipped),  # "auto": backend -> why not
        "num_blocks": llm.num_blocks,
        "block_size": llm.block_size,
        "kv_cache_dtype": llm.cache_dtype,  # "auto" resolved: the model's dtype, or "fp8"
        "kv_cache_bytes": llm.kv.bytes,
        "kv_cache_tensors": llm.kv.num_tensors,  # one per layer, or per layer position in a group
        "kv_cache_groups": {g.name: {"layers": groups.layers[g.name], "sliding_window": g.sliding_window,
                                     "peak_blocks": llm.metrics.peak_blocks_per_group.get(g.name, 0)}
                            for g in groups.groups},
        "kv_usage": bm.usage,
        "peak_kv_usage": llm.metrics.peak_usage,
        "num_free_blocks": bm.num_free_blocks,
        "enable_prefix_caching": llm.enable_prefix_caching,  # what runs (see LLM's enable_prefix_caching)
        "prefix_cache_queries": first.stats.prefix_cache_queries,
        "prefix_cache_hits": first.stats.prefix_cache_hits,
        "prefix_cache_hit_rate": first.stats.hit_rate,
        "num_preemptions": llm.scheduler.num_preemptions,
        "num_steps": llm.scheduler.step_count,
        "num_cow": first.stats.num_cow,
        **vllm_metric_names(bm.usage, first.stats, llm.scheduler.num_preemptions),
        **llm.metrics.counters,  # every request served: finished, aborted, prompt and generated tokens
        **llm.latency(),  # the latest EngineMetrics.REQUESTS_KEPT finished requests
        # the latest EngineMetrics.EVENTS_KEPT events of the block log(s), the latest TIMELINE_ROWS steps
        "events": ({g: list(e) for g, e in bm.events.items()} if groups.hybrid  # layer groups: per group
                   else list(bm.events)),
        "timeline": list(llm.metrics.timeline),
    }


def vllm_metric_names(kv_usage: float, prefix_stats, num_preemptions: int) -> dict[str, float]:
    """The same quantities under the names vLLM's Prometheus logger exports them
    (``PrometheusStatLogger`` in ``vllm/v1/metrics/loggers.py``, vllm 0.32.0): ``vllm:kv_cache_usage_perc``
    (a gauge, "1 means 100 percent usage": the fraction of the pool's blocks in use), the counters
    ``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits`` (in tokens) and ``vllm:num_preemptions``
    (Prometheus shows a counter with ``_total`` appended)."""
    return {"vllm:kv_cache_usage_perc": kv_usage,
            "vllm:prefix_cache_queries": prefix_stats.prefix_cache_queries,
            "vllm:prefix_cache_hits": prefix_stats.prefix_cache_hits,
            "vllm:num_preemptions": num_preemptions}


# ------------------------------------------------------------------------------------ progress output
def progress_bar(use_tqdm, total: int):
    """generate()'s progress bar over ``total`` output tokens: tqdm, made by the callable ``use_tqdm``
    when it is one, and disabled (it prints nothing) when ``use_tqdm`` is False."""
    from tqdm.auto import tqdm

    make = use_tqdm if callable(use_tqdm) else tqdm
    return make(total=total, desc="generate", unit="tok", disable=not use_tqdm)


def show_progress(bar, requests: list[EngineRequest | None]) -> None:
    """Move ``bar`` to the output tokens of the arrived ``requests`` and name how many finished."""
    live = [r for r in requests if r is not None]
    bar.update(sum(map(tokens_done, live)) - bar.n)
    finished = sum(r.finished for r in live)
    bar.set_postfix_str(f"{finished}/{len(requests)} requests", refresh=False)  # (drawn by update)


def tokens_done(req: EngineRequest) -> int:
    """Progress of ``req`` in output tokens: what its completions produced so far, or all it could
    produce (n x max_tokens) once it finished, so that early stops do not leave the bar short."""
    if req.finished:
        return req.params.n * req.max_tokens
    return sum(s.num_output_tokens for s in req.seqs)
