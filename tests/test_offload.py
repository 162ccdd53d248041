"""The second tier in the real engine (``LLM(kv_offloading_size=GiB)``, ``memory/offload/``): the same tokens
with the tier on and off over workloads whose prompts the GPU pool evicts, tier hits that are read (the
tokens change when the tier's K/V is spoiled), everything given back after a call, clear errors, and an
interrupted call that leaves engine and tier whole. vLLM's decisions: test_vllm_offload_parity.py."""

from __future__ import annotations

import random

import pytest
from tiny_models import tiny_llama_and_tokenizer

from paged_lab.engine import LLM, SamplingParams
from paged_lab.memory.offload.worker import PAGE, tier_num_blocks
from paged_lab.sim.simulate import paged, simulate
from paged_lab.sim.workloads import Request

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def tiny_model():
    """tiny_models' 2-layer random Llama and its tokenizer: one block of 4 tokens is 2 x 2 x 4 x 2 x 16 x 4
    = 2 KiB of K/V (one 4 KiB tier page)."""
    return tiny_llama_and_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def engine(model, tier_blocks: int | None, **kw) -> LLM:
    size = None if tier_blocks is None else tier_blocks * PAGE / 2**30
    return LLM(model[0], tokenizer=model[1], block_size=4, num_kv_blocks=24, max_num_seqs=4,
               attention_backend="torch", kv_offloading_size=size, **kw)


def conversations(seed: int, rounds: int = 3) -> list[list[dict]]:
    """Calls of returning conversations (a 20-token history + a new turn) between one-off 40-token
    prompts that push the history out of the 24-block pool."""
    rng = random.Random(seed)
    history = [[rng.randrange(1, 1024) for _ in range(20)] for _ in range(3)]
    calls = []
    for _ in range(rounds):
        calls.append([{"prompt_token_ids": h + [rng.randrange(1, 1024) for _ in range(rng.randint(1, 7))]}
                      for h in history] + [{"prompt_token_ids": [rng.randrange(1, 1024) for _ in range(40)]}])
    return calls


def tokens(llm: LLM, calls) -> list[list[int]]:
    return [o.outputs[0].token_ids for call in calls for o in llm.generate(call, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("seed", [0, 1])
def test_same_tokens_with_the_tier_on_and_off_and_the_tier_is_hit(model, seed):
    calls = conversations(seed)
    off, on = engine(model, None), engine(model, 64)
    assert tokens(on, calls) == tokens(off, calls)
    st = on.stats()
    assert st["external_prefix_cache_hits"] > 0 and st["kv_offloading_loaded_blocks"] > 0
    assert st["external_prefix_cache_hits"] == 4 * st["kv_offloading_loaded_blocks"]  # none preempted here
    assert st["vllm:external_prefix_cache_hits"] == st["external_prefix_cache_hits"]
    assert st["external_prefix_cache_queries"] >= st["external_prefix_cache_hits"]
    # the tier saved prefill work the GPU pool alone could not
    assert st["prefix_cache_hits"] > off.stats()["prefix_cache_hits"]
    assert off.stats()["kv_offloading_size"] is None and "external_prefix_cache_hits" not in off.stats()


def test_the_loaded_kv_is_what_the_tokens_come_from(model):
    """Spoil the tier's K/V between two calls: the returning conversations' tokens change, so a hit is
    read from the tier (not silently recomputed)."""
    calls = conversations(3, rounds=2)
    good = tokens(engine(model, 64), calls)
    llm = engine(model, 64)
    first = tokens(llm, calls[:1])
    llm.offload.data.normal_()
    spoiled = first + tokens(llm, calls[1:])
    assert llm.stats()["kv_offloading_loaded_blocks"] > 0 and spoiled != good


def test_blocks_all_free_and_the_tier_within_its_size_after_calls(model):
    llm = engine(model, 10)  # a 10-block tier: it evicts
    for call in conversations(5):
        llm.generate(call, GREEDY, use_tqdm=False)
        st = llm.stats()
        assert st["num_free_blocks"] == st["num_blocks"] and not llm.scheduler.has_unfinished()
        assert st["kv_offloading_used_blocks"] <= st["kv_offloading_blocks"] == 10
        assert st["kv_offloading_bytes"] <= st["kv_offloading_size"] * 2**30
        assert all(b.ref_cnt == 0 for b in llm.offload.connector.manager.blocks.values())  # all idle
        llm.offload.connector.manager.check_invariants()
        llm.block_manager.check_invariants()
    assert st["kv_offloading_evictions"] > 0


@pytest.mark.parametrize("bad", [0, -1.0, 1e-9, float("nan"), float("inf"), "1", True, 1e9])
def test_a_bad_size_names_the_argument_and_the_limit(model, bad):
    with pytest.raises(ValueError, match="kv_offloading_size") as e:
        LLM(model[0], tokenizer=model[1], block_size=4, num_kv_blocks=8, attention_backend="torch",
            kv_offloading_size=bad)
    assert "GiB" in str(e.value)


def test_tier_size_follows_vllms_page_rounding():
    # vLLM: cpu_bytes // round_up(bytes per block, 4096); SmolLM2 fp32, block 16: 737,280 bytes = 180 pages
    assert tier_num_blocks(1, 737_280) == 2**30 // 737_280 == 1456
    assert tier_num_blocks(1, 2_048) == 2**30 // 4096


def test_an_interrupt_leaves_engine_and_tier_whole(model, monkeypatch):
    calls = conversations(7, rounds=2)
    llm = engine(model, 64)
    tokens(llm, calls[:1])
    copy, n = llm.offload._copy, [0]

    def interrupted(transfers):
        n[0] += 1
        if n[0] == 3:
            raise KeyboardInterrupt
        copy(transfers)
    monkeypatch.setattr(llm.offload, "_copy", interrupted)
    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning, match="aborted"):
        llm.generate(calls[1], GREEDY, use_tqdm=False)
    monkeypatch.setattr(llm.offload, "_copy", copy)
    st = llm.stats()
    assert st["num_free_blocks"] == st["num_blocks"] and st["kv_offloading_used_blocks"] == 0  # tier dropped
    assert not llm.scheduler.loading and not llm.scheduler.has_unfinished()
    llm.offload.connector.manager.check_invariants()
    assert tokens(llm, calls[1:]) == tokens(engine(model, None), calls[1:])  # and it serves again


def test_simulate_runs_the_same_tier_without_a_model():
    rng = random.Random(1)
    prefixes = [tuple(rng.randrange(1, 1000) for _ in range(32)) for _ in range(3)]
    reqs = [Request(f"R{i}", prefixes[i % 3] + tuple(rng.randrange(1, 1000) for _ in range(5)), 8, 3 * i)
            if i % 2 else Request(f"R{i}", tuple(rng.randrange(1, 1000) for _ in range(60)), 4, 3 * i)
            for i in range(20)]
    sched = {"max_num_seqs": 4, "max_num_batched_tokens": 64}
    off = simulate(reqs, paged(24, 4, True), sched).summary
    on = simulate(reqs, paged(24, 4, True), sched, kv_offloading_blocks=64).summary
    assert on["external_prefix_cache_hits"] == 4 * on["tier_loaded_blocks"] > 0
    assert on["prefill_tokens"] == off["prefill_tokens"] - on["external_prefix_cache_hits"]
    assert "external_prefix_cache_hits" not in off
    with pytest.raises(ValueError, match="kv_offloading_blocks"):
        simulate(reqs, paged(24, 4, True), sched, kv_offloading_blocks=0)


def test_a_connector_needs_vllm_v1s_scheduler_settings():
    from paged_lab.memory import BlockManager
    from paged_lab.memory.offload import CPUOffloadingManager, OffloadingConnector
    from paged_lab.sched import TieredScheduler

    for bad in ({"preemption": "swap"}, {"allocation": "whole_prompt"}, {"mode": "static"}):
        with pytest.raises(ValueError, match="connector"):
            TieredScheduler(BlockManager(8, 4), 2, connector=OffloadingConnector(CPUOffloadingManager(4), 4),
                            **bad)
