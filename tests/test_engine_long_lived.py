"""A long-lived engine does not grow (issue 35): after many generate() calls it keeps no request, a bounded
window of timeline rows, latencies and block events, and counters over everything it served. Before, each
request left ~4.6 KB behind for good, and stats() / latency() slowed down with every request served."""

import pytest
from test_engine_phases import _tiny_llama, _Tok

from paged_lab.engine import LLM, SamplingParams
from paged_lab.engine.metrics import EngineMetrics
from paged_lab.memory import replay


@pytest.fixture()
def small_windows(monkeypatch):
    monkeypatch.setattr(EngineMetrics, "TIMELINE_ROWS", 8)
    monkeypatch.setattr(EngineMetrics, "REQUESTS_KEPT", 4)
    monkeypatch.setattr(EngineMetrics, "EVENTS_KEPT", 20)


def _run(llm, calls: int):
    prompts = [{"prompt_token_ids": [5 + i, 6, 7, 8, 9]} for i in range(3)]
    for _ in range(calls):
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), use_tqdm=False)


def test_what_the_engine_keeps_is_bounded(small_windows):
    llm = LLM(_tiny_llama(), tokenizer=_Tok(), block_size=4, num_kv_blocks=32, attention_backend="torch")
    _run(llm, 2)
    first = llm.stats()
    assert replay(first["events"], 32) == llm.block_manager.state()  # a short run's log replays whole
    _run(llm, 10)  # 36 requests, 3 steps a call
    st = llm.stats()
    assert not llm.requests  # no request outlives its generate() call
    assert len(st["timeline"]) == 8 and st["timeline"][-1]["step"] == st["num_steps"] == 36
    assert 20 <= len(st["events"]) < 40 and st["events"][-1].index == len(st["events"]) - 1 + (
        st["events"][0].index)  # the latest events, numbered from the first ever
    with pytest.raises(ValueError, match="events before it were dropped"):
        replay(st["events"], 32)
    assert len(llm.metrics._latencies["ttft_s"]) == 4  # latency() summarises the latest 4 requests
    assert st["num_finished_requests"] == 36 and st["num_aborted_requests"] == 0
    assert st["num_prompt_tokens"] == 36 * 5 and st["num_generation_tokens"] == 36 * 3
    assert st["e2e_steps_p50"] == first["e2e_steps_p50"] > 0  # same work, same latency in steps
    assert not llm.metrics._times  # the step times of a finished call are dropped
