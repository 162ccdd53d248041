"""From steps to seconds: a step-time model, and what chunked prefill does to inter-token latency.

The simulator counts steps, but a step does not cost a fixed time: a step that prefills a
2,000-token prompt computes 2,000 tokens, a pure decode step of 8 requests only 8. ``StepTime`` is the
simplest model that shows it -- a fixed cost per step (reading the weights once, launching the
kernels) plus a cost per token computed -- and :func:`timed_latency` replays a ``SimResult``'s
timeline through it to get TTFT, ITL and end-to-end latency in seconds.

``StepTime`` is illustrative: two round numbers that give notebook 05's latency curves seconds on their
axis. It predicts no machine. What a real model's step costs on this machine, from the bytes it moves and
the FLOPs it does, is ``engine.step_model``'s roofline (notebook 07), which ``tools.decode_steps``
measures against the engine's own steps.

Chunked prefill (``max_num_batched_tokens``) caps the tokens one step computes. The running decodes
are scheduled first, so they get a token every step; a long prompt that arrives takes what is left of
the budget, over several steps. Without the cap, the step that prefills it stalls every decode for as
long as the whole prefill takes: one long inter-token gap for everyone.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from paged_lab.sim.latency import latency_summary, token_gaps
from paged_lab.sim.simulate import SimResult, paged, simulate
from paged_lab.sim.workloads import Request, Workload


class StepTime(NamedTuple):
    """seconds(step) = ``fixed`` + ``per_token`` x tokens computed in the step (prefill + decode)."""

    fixed: float = 0.020  # s: weights read once per step, kernel launches
    per_token: float = 0.0002  # s per token computed: the matmuls

    def seconds(self, num_tokens) -> np.ndarray:
        return self.fixed + self.per_token * np.asarray(num_tokens, dtype=float)


DEFAULT_STEP_TIME = StepTime()  # illustrative figures; notebook 07 measures a real engine's steps


def step_end_times(result: SimResult, step_time: StepTime = DEFAULT_STEP_TIME) -> np.ndarray:
    """When each step's forward ended, in seconds from the start (idle steps cost ``fixed`` too:
    a server polls its queue)."""
    t = result.timeline
    tokens = np.asarray(t["prefill_tokens"], dtype=float) + np.asarray(t["decode_tokens"], dtype=float)
    return np.cumsum(step_time.seconds(tokens))


def timed_latency(result: SimResult, step_time: StepTime = DEFAULT_STEP_TIME, names=None) -> dict[str, float]:
    """TTFT, ITL and end-to-end latency in seconds (``ttft_s_p90`` ...) of the finished requests, or of
    those named in ``names``, and ``itl_s_max``: the longest stall. A request arrives when its
    arrival step starts."""
    end = step_end_times(result, step_time)
    start = np.concatenate([[0.0], end[:-1]])
    rows = [r for r in result.requests if r["status"] == "finished" and (names is None or r["name"] in names)]
    gaps = token_gaps(end[r["output_steps"]] for r in rows)
    out = latency_summary([end[r["first_token_step"]] - start[r["arrival_step"]] for r in rows], gaps,
                          [end[r["finish_step"]] - start[r["arrival_step"]] for r in rows], "s")
    out["itl_s_max"] = float(gaps.max()) if gaps.size else 0.0
    return out


def long_prompt_workload(num_decoders: int = 8, decode_tokens: int = 40, long_prompt: int = 2048,
                         arrives_at: int = 10) -> Workload:
    """``num_decoders`` short chats decoding from step 0, and one long prompt (a document to
    summarise) arriving at step ``arrives_at``."""
    chats = [Request(f"chat{i}", tuple(range(1 + 16 * i,
                                             17 + 16 * i)), decode_tokens) for i in range(num_decoders)]
    doc = Request("document", tuple(range(10_000, 10_000 + long_prompt)), 8, arrives_at)
    return Workload("long_prompt", tuple(chats) + (doc,), f"{num_decoders} chats + one "
                                                          f"{long_prompt}-token prompt")


def chunked_prefill_runs(budgets=(None, 256), workload: Workload | None = None, num_blocks: int = 512,
                         block_size: int = 16) -> dict[int | None, SimResult]:
    """The long-prompt workload under each token budget (None: no cap, the prompt in one step)."""
    wl = long_prompt_workload() if workload is None else workload
    return {b: simulate(wl, paged(num_blocks, block_size), {"max_num_seqs": 16, "max_num_batched_tokens": b})
            for b in budgets}


PREEMPTION_MODES = {  # name -> (preemption, enable_prefix_caching)
    "recompute": ("recompute", False),
    "recompute + prefix cache": ("recompute", True),
    "swap": ("swap", False),
}


def preemption_costs(workload: Workload, num_blocks: int, block_size: int = 16, max_num_seqs: int = 8,
                     roomy_blocks: int | None = None) -> dict[str, dict[str, int]]:
    """What preemption costs under each mode (vLLM V0 offers all three; V1 only recompute, with the
    prefix cache on by default), against a pool of ``roomy_blocks`` where nobody is preempted:
    preemptions, blocks copied to the CPU and back, tokens computed again, and steps lost."""
    roomy_blocks = 16 * num_blocks if roomy_blocks is None else roomy_blocks
    sched = {"max_num_seqs": max_num_seqs}
    base = simulate(workload, paged(roomy_blocks, block_size), sched).summary
    if base["num_preemptions"]:
        raise ValueError(f"roomy_blocks={roomy_blocks} still preempts; give the baseline pool more blocks")
    out = {}
    for name, (preemption, caching) in PREEMPTION_MODES.items():
        s = simulate(workload, paged(num_blocks, block_size, enable_prefix_caching=caching),
                     {**sched, "preemption": preemption}).summary
        out[name] = {"preemptions": s["num_preemptions"], "blocks_swapped": s["blocks_swapped"],
                     "tokens_recomputed": s["prefill_tokens"] - base["prefill_tokens"],
                     "steps_lost": s["makespan"] - base["makespan"]}
    return out
