"""From steps to seconds: the step-time model, and chunked prefill keeping decodes at their pace."""

import numpy as np
import pytest

from paged_lab.sim import paged, simulate, workloads
from paged_lab.sim.timing import StepTime, chunked_prefill_runs, step_end_times, timed_latency
from paged_lab.viz.latency import fig_chunked_prefill

CHATS = [f"chat{i}" for i in range(8)]


@pytest.fixture(scope="module")
def runs():
    return chunked_prefill_runs(budgets=(None, 256))


def test_step_times_follow_the_tokens_each_step_computes():
    res = simulate(workloads.fixed(2, prompt_len=10, output_len=3), paged(16, 4), {"max_num_seqs": 2})
    # step 0: two prefills of 10 tokens; steps 1-2: two decodes
    end = step_end_times(res, StepTime(fixed=1.0, per_token=0.5))
    assert end.tolist() == [11.0, 13.0, 15.0]
    lat = timed_latency(res, StepTime(fixed=1.0, per_token=0.5))
    assert lat["ttft_s_p50"] == 11.0 and lat["itl_s_p99"] == 2.0 and lat["e2e_s_p90"] == 15.0


def test_chunked_prefill_keeps_decodes_at_their_pace(runs):
    whole, chunked = runs[None], runs[256]
    # the 2,048-token prompt: one step without a budget, chunks of <= 256 tokens with it
    assert max(whole.timeline["prefill_tokens"]) == 2048
    assert max(np.add(chunked.timeline["prefill_tokens"], chunked.timeline["decode_tokens"])) <= 256
    # in steps the chats never notice; in seconds the unchunked step stalls them all at once
    assert whole.summary["itl_steps_p99"] == chunked.summary["itl_steps_p99"] == 1
    w, c = timed_latency(whole, names=CHATS), timed_latency(chunked, names=CHATS)
    assert w["itl_s_max"] > 5 * c["itl_s_max"]
    assert w["itl_s_max"] == pytest.approx(StepTime().seconds(2048 + 8))  # the prefill step, plus 8 decodes
    assert w["itl_s_p50"] == pytest.approx(c["itl_s_p50"])  # a normal decode step is the same
    # the price: the long prompt's own first token comes later
    doc_w, doc_c = timed_latency(whole, names=["document"]), timed_latency(chunked, names=["document"])
    assert doc_c["ttft_s_p50"] > doc_w["ttft_s_p50"]


def test_chunked_prefill_figure_has_a_line_per_budget_and_panel(runs):
    fig = fig_chunked_prefill(runs)
    assert len(fig.data) == 4
    gaps = fig.data[1].y  # chat0's gaps without a budget: one stall of the whole prefill
    assert max(gaps) == pytest.approx(1e3 * StepTime().seconds(2048 + 8))


def test_preemption_costs_recompute_vs_prefix_cache_vs_swap():
    from paged_lab.sim.timing import preemption_costs

    tight = workloads.uniform(16, prompt_len=(16, 64), output_len=(8, 64), seed=0)
    costs = preemption_costs(tight, num_blocks=12)
    rec, cached, swap = costs["recompute"], costs["recompute + prefix cache"], costs["swap"]
    assert rec["preemptions"] > 0 and rec["blocks_swapped"] == cached["blocks_swapped"] == 0
    assert rec["tokens_recomputed"] > cached["tokens_recomputed"] > 0 == swap["tokens_recomputed"]
    assert swap["blocks_swapped"] > 0 and swap["blocks_swapped"] % 2 == 0  # every block out comes back in
    assert all(c["steps_lost"] > 0 for c in costs.values())
    with pytest.raises(ValueError, match="roomy_blocks=12 still preempts"):
        preemption_costs(tight, num_blocks=12, roomy_blocks=12)
