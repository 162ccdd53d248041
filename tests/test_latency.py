"""Time: requests that arrive over time, and TTFT / ITL / end-to-end latency in the simulator (steps)
and the engine (seconds and steps), including preempted and prefix-cached requests."""

import pytest
from test_engine_phases import _tiny_llama, _Tok  # the same 2-layer random Llama and id tokenizer

from paged_lab.engine import LLM, SamplingParams
from paged_lab.sim import paged, simulate, workloads
from paged_lab.sim.latency import latency_summary, percentiles, token_gaps


# ------------------------------------------------------------------------------------ latency math
def test_percentiles_and_token_gaps_never_cross_a_request_boundary():
    assert percentiles([1, 2, 3, 4, 5]) == {"p50": 3.0, "p90": 4.6, "p99": pytest.approx(4.96)}
    assert percentiles([]) == {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    # request A: tokens at 3, 4, 7 (gaps 1, 3); B: one token (no gap); C: 10, 11 (gap 1)
    assert token_gaps([[3, 4, 7], [5], [10, 11]]).tolist() == [1.0, 3.0, 1.0]
    assert token_gaps([[1], []]).size == 0
    s = latency_summary([1, 3], [1, 1, 2], [5, 9], "steps")
    assert (s["ttft_steps_p50"] == 2 and s["itl_steps_p99"] == pytest.approx(1.98)
            and s["e2e_steps_p90"] == 8.6)


# ------------------------------------------------------------------------------------ arrivals
def test_poisson_arrivals_are_seeded_sorted_and_near_the_rate():
    a = workloads.poisson_arrivals(2000, rate=0.5, seed=3)
    assert a == workloads.poisson_arrivals(2000, rate=0.5, seed=3)
    assert a != workloads.poisson_arrivals(2000, rate=0.5, seed=4)
    assert a == sorted(a) and a[0] >= 0
    assert 2000 / a[-1] == pytest.approx(0.5, rel=0.1)  # requests per step
    assert workloads.burst_arrivals(7, burst_size=3, every=10) == [0, 0, 0, 10, 10, 10, 20]


@pytest.mark.parametrize("call, match", [
    (lambda: workloads.poisson_arrivals(4, rate=0), "rate must be a number > 0"),
    (lambda: workloads.poisson_arrivals(4, rate="2"), "rate must be a number > 0"),
    (lambda: workloads.burst_arrivals(4, burst_size=0, every=2), "burst_size must be an integer >= 1"),
    (lambda: workloads.with_arrivals(workloads.fixed(3), [0, 1]), "arrival_steps has 2 entries"),
    (lambda: workloads.with_arrivals(workloads.fixed(2), [0, -1]),
     r"arrival_steps\[1\] must be an integer >= 0"),
])
def test_bad_arrivals_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_simulate_admits_nobody_before_its_arrival_and_counts_latency_in_steps():
    trace = [0, 0, 5, 40, 40]  # a replayed trace: two now, one at step 5, a burst of two at 40
    wl = workloads.with_arrivals(workloads.fixed(5, prompt_len=8, output_len=4), trace)
    res = simulate(wl, paged(64, 4), {"max_num_seqs": 8})
    for row, arrival in zip(res.requests, trace):
        assert row["arrival_step"] == arrival and row["first_scheduled_step"] == arrival  # room for all
        assert row["ttft_steps"] == 1 and row["latency_steps"] == 4  # prefill + 3 decodes, no waiting
    assert res.timeline["running"][10:40] == [0] * 30  # idle steps between arrivals are timeline rows
    s = res.summary
    assert (s["ttft_steps_p50"], s["itl_steps_p99"], s["e2e_steps_p90"]) == (1, 1, 4)


def test_queueing_shows_in_ttft_and_one_window_serialises_requests():
    wl = workloads.with_arrivals(workloads.fixed(3, prompt_len=4, output_len=5), [0, 0, 0])
    res = simulate(wl, paged(64, 4), {"max_num_seqs": 1})
    assert [r["ttft_steps"] for r in res.requests] == [1, 6, 11]  # each waits for the one before
    assert [r["latency_steps"] for r in res.requests] == [5, 10, 15]
    assert res.summary["ttft_steps_p50"] == 6 and res.summary["itl_steps_p90"] == 1


def test_a_preempted_request_shows_its_stall_as_one_long_inter_token_gap():
    # 4 blocks of 4 slots; two requests of 8 prompt + 8 output need 4 blocks each at their largest.
    wl = workloads.fixed(2, prompt_len=8, output_len=8)
    res = simulate(wl, paged(4, 4), {"max_num_seqs": 2})
    victim = next(r for r in res.requests if r["preemptions"])
    gaps = token_gaps([_output_steps(res, victim)])
    assert gaps.max() > 1  # it waited, then was prefilled again
    assert gaps.sum() == victim["finish_step"] - victim["first_token_step"]
    assert res.summary["itl_steps_p99"] > 1 and res.summary["itl_steps_p50"] == 1


def _output_steps(res, row):
    """The victim's output steps, rebuilt from a second identical run (the rows keep no lists)."""
    from paged_lab.sched import Scheduler, Sequence

    sched = Scheduler(paged(4, 4), max_num_seqs=2)
    seqs = [Sequence(i, r.prompt_token_ids, r.max_tokens, None, True) for i, r in
            enumerate(workloads.fixed(2, prompt_len=8, output_len=8))]
    for s in seqs:
        sched.add_request(s)
    while sched.has_unfinished():
        out = sched.schedule()
        sched.update(out, [7] * len(out.sampling))
    assert seqs[row["seq_id"]].finish_step == row["finish_step"]
    return seqs[row["seq_id"]].output_steps


def test_prefix_cache_hit_shortens_ttft_under_a_token_budget():
    # 64-token shared prefix, 8 tokens per step: the second request skips the cached 64 tokens.
    wl = workloads.with_arrivals(workloads.shared_prefix(2, prefix_len=64, suffix_len=4, output_len=4),
                                 [0, 20])
    sched = {"max_num_seqs": 4, "max_num_batched_tokens": 8}
    cold = simulate(wl, paged(64, 16, enable_prefix_caching=False), sched).requests
    warm = simulate(wl, paged(64, 16, enable_prefix_caching=True), sched).requests
    assert cold[1]["ttft_steps"] == 9  # ceil(68 / 8) chunks
    assert warm[1]["ttft_steps"] == 1  # only its 4 own tokens: one chunk
    assert warm[0]["ttft_steps"] == cold[0]["ttft_steps"] == 9


def test_simulate_with_poisson_arrivals_is_reproducible():
    wl = workloads.uniform(200, requests_per_step=0.8, seed=5)
    a = simulate(wl, paged(256, 16), {"max_num_seqs": 16}).summary
    b = simulate(wl, paged(256, 16), {"max_num_seqs": 16}).summary
    assert a == b and a["ttft_steps_p99"] >= a["ttft_steps_p90"] >= a["ttft_steps_p50"] >= 1


# ------------------------------------------------------------------------------------ engine
@pytest.fixture(scope="module")
def tiny():
    return _tiny_llama()


def _llm(model, **kw):
    kw.setdefault("num_kv_blocks", 32)
    return LLM(model, tokenizer=_Tok(), block_size=4, attention_backend="torch", **kw)


PROMPTS = [{"prompt_token_ids": [5 + i, 7, 9, 11, 13 + i]} for i in range(4)]
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


def test_engine_takes_requests_when_their_arrival_step_comes_with_the_same_tokens(tiny):
    at_once = _llm(tiny).generate(PROMPTS, GREEDY, use_tqdm=False)
    llm = _llm(tiny)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False, arrival_steps=[3, 0, 10, 3])
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in at_once]
    for o, arrival in zip(outs, [3, 0, 10, 3]):
        m = o.metrics
        assert m.arrival_step == arrival and m.first_scheduled_step == arrival  # plenty of room
        assert m.first_token_step == arrival and m.finished_step == arrival + 5
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.last_token_time
        assert m.last_token_time == m.finished_time and m.ttft > 0 and m.e2e_latency >= m.ttft
        assert m.time_in_queue == pytest.approx(m.first_scheduled_time - m.arrival_time)
    stats = llm.stats()
    assert stats["ttft_steps_p50"] == 1 and stats["itl_steps_p99"] == 1 and stats["e2e_steps_p90"] == 6
    assert 0 < stats["ttft_s_p50"] <= stats["ttft_s_p99"] and 0 < stats["itl_s_p50"]
    assert stats["e2e_s_p50"] >= stats["ttft_s_p50"]


def test_engine_metrics_of_a_preempted_request(tiny):
    # 6 blocks of 4: three requests of 5 + 6 tokens need 3 blocks each at their largest -> preemption.
    llm = _llm(tiny, num_kv_blocks=6)
    outs = llm.generate(PROMPTS[:3], GREEDY, use_tqdm=False)
    assert llm.stats()["num_preemptions"] >= 1
    ref = _llm(tiny).generate(PROMPTS[:3], GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref]
    # (the engine keeps no request after its call: the outputs' metrics say who was preempted)
    lost = [m for m in (o.metrics for o in outs)
            if m.finished_step - m.first_token_step > GREEDY.max_tokens - 1]
    assert lost  # the preempted request lost steps between two of its tokens
    assert llm.stats()["itl_steps_p99"] > 1


def test_engine_metrics_of_a_prefix_cached_request(tiny):
    llm = _llm(tiny, max_num_batched_tokens=4)
    long = {"prompt_token_ids": list(range(10, 26))}  # 16 tokens = 4 full blocks, 4 chunks of 4
    first = llm.generate(long, GREEDY, use_tqdm=False)[0]
    again = llm.generate(long, GREEDY, use_tqdm=False)[0]
    assert first.metrics.first_token_step - first.metrics.arrival_step == 3  # 4 chunks
    assert again.num_cached_tokens == 12  # the last block is computed again (its last token samples)
    assert again.metrics.first_token_step == again.metrics.arrival_step  # one chunk
    assert again.outputs[0].token_ids == first.outputs[0].token_ids


def test_engine_rejects_bad_arrival_steps_before_any_work(tiny):
    llm = _llm(tiny)
    with pytest.raises(ValueError, match=r"arrival_steps has 1 entries but there are 2 prompts"):
        llm.generate(PROMPTS[:2], GREEDY, arrival_steps=[0])
    with pytest.raises(ValueError, match=r"arrival_steps\[1\] must be an integer >= 0, got -2"):
        llm.generate(PROMPTS[:2], GREEDY, arrival_steps=[0, -2])
    assert llm.scheduler.step_count == 0 and not llm.scheduler.has_unfinished()
