"""The committed vLLM oracle (tests/data/vllm_v1_traces.json) is well-formed and self-consistent.

These tests only read the file (CI never installs vLLM); replaying it against paged_lab is another
test's job. Re-record with ``make vllm-traces`` (docs/vllm_parity.md)."""

from __future__ import annotations

import json
from math import ceil
from pathlib import Path

import pytest
from scriptkit import load_script

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "vllm_v1_traces.json"

TOP_KEYS = {"vllm_version", "recorder", "vllm_config", "scenarios"}
VLLM_CONFIG_KEYS = {
    "enable_chunked_prefill", "scheduler_reserve_full_isl", "long_prefill_token_threshold",
    "async_scheduling",
    "prefix_caching_hash_algo", "policy", "watermark", "scheduler_class", "gpu_memory_utilization",
    "num_lookahead_tokens", "use_v2_model_runner", "per_scenario", "default_max_num_batched_tokens",
}  # fmt: skip
SCENARIO_KEYS = {"name", "description", "config", "requests", "steps"}
CONFIG_KEYS = {"num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching",
               "max_model_len"}  # fmt: skip
REQUEST_KEYS = {"id", "prompt_token_ids", "max_tokens", "arrival_step", "output_token_ids"}
STEP_KEYS = {
    "step", "arrived", "scheduled", "scheduled_order", "scheduled_new", "scheduled_resumed",
    "scheduled_running",
    "preempted", "finished", "num_computed_tokens", "num_output_tokens", "block_ids", "free_queue",
    "free_queue_after_update", "cached_blocks", "running", "waiting", "prefix_cache",
}  # fmt: skip
COUNTERS = {"requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits"}


@pytest.fixture(scope="module")
def text():
    return TRACES.read_text()


@pytest.fixture(scope="module")
def data(text):
    return json.loads(text)


def test_file_header_and_size(data, text):
    assert set(data) == TOP_KEYS
    assert data["vllm_version"] == "0.32.0" and data["recorder"] == "scripts/record_vllm_traces.py"
    vc = data["vllm_config"]
    assert set(vc) == VLLM_CONFIG_KEYS
    assert vc["enable_chunked_prefill"] is True and vc["async_scheduling"] is False and vc["policy"] == "fcfs"
    assert vc["scheduler_class"] == "vllm.v1.core.sched.scheduler.Scheduler"
    assert set(vc["per_scenario"]) == CONFIG_KEYS
    assert len(text.encode()) < 1_000_000
    names = [s["name"] for s in data["scenarios"]]
    assert len(names) == len(set(names)) and len(names) >= 28


def test_file_is_the_recorders_canonical_output_of_its_scenarios(data, text):
    """Same formatting as the recorder writes, and the same scenarios as it defines today (a scenario
    edited in the script without re-recording fails here). Needs no vLLM: the script imports it lazily."""
    rec = load_script("scripts/record_vllm_traces.py")
    assert rec.dumps(data) == text
    defined = rec.all_scenarios()
    assert [s["name"] for s in data["scenarios"]] == [s["name"] for s in defined]
    for got, want in zip(data["scenarios"], defined):
        assert got["config"] == want["config"] and got["requests"] == want["requests"], got["name"]
        assert got["description"] == want["description"], got["name"]


def test_schema(data):
    for s in data["scenarios"]:
        assert set(s) == SCENARIO_KEYS, s["name"]
        assert isinstance(s["description"], str) and s["description"].endswith(".")
        assert set(s["config"]) == CONFIG_KEYS
        for r in s["requests"]:
            assert set(r) == REQUEST_KEYS
            assert all(isinstance(t, int) for t in r["prompt_token_ids"] + r["output_token_ids"])
        for st in s["steps"]:
            assert set(st) == STEP_KEYS, (s["name"], st["step"])
            assert set(st["prefix_cache"]) == COUNTERS


@pytest.mark.parametrize("s",
                         [pytest.param(s, id=s["name"]) for s in json.loads(TRACES.read_text())["scenarios"]])
def test_scenario_is_self_consistent(s):
    c, steps = s["config"], s["steps"]
    bs, n_blocks = c["block_size"], c["num_blocks"]
    reqs = {r["id"]: r for r in s["requests"]}
    assert len(reqs) == len(s["requests"])
    for r in reqs.values():  # every request can fit alone; max_tokens ends it (no EOS)
        assert len(r["output_token_ids"]) == r["max_tokens"] >= 1 and r["prompt_token_ids"]
        assert len(r["prompt_token_ids"]) + r["max_tokens"] <= min((n_blocks - 1) * bs, c["max_model_len"])
    assert [st["step"] for st in steps] == list(range(len(steps)))

    finished_at, prev_counts = {}, dict.fromkeys(COUNTERS, 0)
    for st in steps:
        i = st["step"]
        assert st["arrived"] == [r for r, q in reqs.items() if q["arrival_step"] == i]
        sched = st["scheduled"]
        # Budget, batch size, and the three lists partition what was scheduled, in vLLM's order.
        assert all(n > 0 for n in sched.values())
        assert sum(sched.values()) <= c["max_num_batched_tokens"]
        assert len(sched) <= c["max_num_seqs"] and len(st["running"]) <= c["max_num_seqs"]
        assert sorted(st["scheduled_order"]) == sorted(sched)
        parts = st["scheduled_running"] + st["scheduled_resumed"] + st["scheduled_new"]
        assert sorted(parts) == sorted(sched)
        assert st["scheduled_order"][: len(st["scheduled_running"])] == st["scheduled_running"]
        if st["preempted"]:  # vLLM admits nothing from the waiting queue in a step that preempted
            assert not st["scheduled_new"] and not st["scheduled_resumed"]
        for rid in st["preempted"]:
            assert rid not in sched and st["num_computed_tokens"][rid] == 0 and rid in st["waiting"]
        for rid in sched:
            assert reqs[rid]["arrival_step"] <= i and rid not in finished_at
        for rid in st["finished"]:
            assert rid in sched and rid not in finished_at
            assert st["num_output_tokens"][rid] == reqs[rid]["max_tokens"]
            finished_at[rid] = i
        # Blocks: ids in 1..N-1 (0 is vLLM's null block), a table covers exactly the computed tokens,
        # and every block is either held or in the free queue, never both.
        held = set()
        for rid, table in st["block_ids"].items():
            assert all(1 <= b < n_blocks for b in table) and len(set(table)) == len(table)
            assert len(table) == ceil(st["num_computed_tokens"][rid] / bs), (rid, i)
            held |= set(table)
        for rid, nct in st["num_computed_tokens"].items():
            q = reqs[rid]
            assert 0 <= nct <= len(q["prompt_token_ids"]) + st["num_output_tokens"][rid]
            assert nct == 0 or rid in st["block_ids"]
        tables = [b for t in st["block_ids"].values() for b in t]
        if not c["enable_prefix_caching"]:
            assert len(tables) == len(held)  # without caching no block is shared
        for queue in (st["free_queue"], st["free_queue_after_update"]):
            assert len(set(queue)) == len(queue) and all(1 <= b < n_blocks for b in queue)
        assert held.isdisjoint(st["free_queue"]) and held | set(st["free_queue"]) == set(range(1, n_blocks))
        # Prefix-cache counters: cumulative tokens, hits <= queries, nothing counted with caching off.
        pc = st["prefix_cache"]
        assert all(pc[k] >= prev_counts[k] for k in COUNTERS)
        assert pc["hits"] <= pc["queries"] and pc["preempted_hits"] <= pc["preempted_queries"]
        if not c["enable_prefix_caching"]:
            assert not any(pc.values()) and not st["cached_blocks"]
        prev_counts = pc
    assert set(finished_at) == set(reqs), "every request finishes"
    assert not steps[-1]["running"] and not steps[-1]["waiting"]
    assert len(steps[-1]["free_queue_after_update"]) == n_blocks - 1  # all blocks back, null block excluded


def test_the_hand_written_stories_hold(data):
    by_name = {s["name"]: s for s in data["scenarios"]}
    story = by_name["table_story_8_2_4"]["steps"]
    tables = [st["block_ids"].get("A") for st in story if "A" in st["block_ids"]]
    assert tables[0] == [8, 2] and [8, 2, 4] in tables  # paged_lab's ids: [7, 1] -> [7, 1, 3]
    twins = by_name["twins_same_step_caching_on"]["steps"][0]
    assert (twins["scheduled"] == {"A": 10, "B": 2}
            and twins["block_ids"]["B"][:2] == twins["block_ids"]["A"][:2])
    wait = by_name["long_prompt_partial_fit"]["steps"]
    a_done = next(st["step"] for st in wait if "A" in st["finished"])
    assert all("B" not in st["scheduled"] for st in wait[: a_done + 1])  # no first chunk either ...
    assert any("B" in st["waiting"] and len(st["free_queue"]) >= 2 for st in wait)  # ... though it would fit
