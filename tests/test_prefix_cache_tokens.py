"""Greedy tokens with prefix caching on equal those with it off, through the real engine (a forward over
the paged cache), over random configurations: token budgets (chunked prefill), small pools (preemption
by recompute, also in the middle of a chunked prefill), twins admitted in one step, shared system
prompts, n > 1 both ways, on every attention backend that runs here.

``test_kv_correctness.py`` checks the same space without a model, thousands of times; this file checks
that the engine's store/attend order is the one that check assumes. The two reproducers of the bugs it
was written for run the real SmolLM2.
"""

from __future__ import annotations

import random

import pytest
from test_engine_phases import _Tok
from tiny_models import head_dim_64_llama

from paged_lab import kernels
from paged_lab.engine import LLM, SamplingParams


def _backends() -> list[str]:
    """The attention backends that run on this machine (``cpu`` needs AVX-512; ``triton`` runs in its
    interpreter here, slowly, so it gets fewer configurations)."""
    import torch

    k = torch.zeros(4, 16, 1, 64)  # [num_blocks, block_size, kv_heads, head_dim], as the tiny model's
    out = []
    for name in ("torch", "cpu", "triton"):
        try:
            kernels.resolve_backend(name, k, k)
        except Exception:  # not on this machine (no AVX-512, no Triton)
            continue
        out.append(name)
    return out


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer random Llama with head_dim 64 (what every backend here takes, Triton's included)."""
    return head_dim_64_llama()


def random_engine_config(rng: random.Random, block_sizes=(2, 4, 8, 16)) -> dict:
    bs = rng.choice(block_sizes)
    system = [rng.randrange(1, 96) for _ in range(rng.randrange(0, 3) * bs + rng.randrange(0, 2))]
    prompts = []
    for _ in range(rng.randrange(1, 6)):
        if prompts and rng.random() < 0.35:  # a twin in the same call
            prompts.append(list(rng.choice(prompts)))
            continue
        own = [rng.randrange(1, 96) for _ in range(rng.randrange(1, 2 * bs + 3))]
        prompts.append((system if rng.random() < 0.6 else []) + own)
    max_tokens = rng.randrange(1, 9)
    longest = max(map(len, prompts)) + max_tokens
    return dict(
        block_size=bs, num_kv_blocks=-(-longest // bs) + rng.randrange(0, 6),
        max_num_seqs=rng.randrange(1, 5),
        max_num_batched_tokens=rng.choice([None, 1, 2, 3, bs, 2 * bs + 1]), prompts=prompts,
        max_tokens=max_tokens, n=rng.choice([1, 1, 2, 3]), parallel_sampling=rng.choice(["fork", "prefix"]),
    )


def generate(model, config: dict, backend: str, caching: bool):
    llm = LLM(model, tokenizer=_Tok(), block_size=config["block_size"], num_kv_blocks=config["num_kv_blocks"],
              max_num_seqs=config["max_num_seqs"], max_num_batched_tokens=config["max_num_batched_tokens"],
              enable_prefix_caching=caching, attention_backend=backend,
              parallel_sampling=config["parallel_sampling"])
    sp = SamplingParams(temperature=0, max_tokens=config["max_tokens"], n=config["n"], ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in config["prompts"]], sp, use_tqdm=False)
    llm.block_manager.check_invariants()
    assert llm.block_manager.num_free_blocks == llm.num_blocks  # nothing leaked
    return [[c.token_ids for c in o.outputs] for o in outs], llm.stats()


@pytest.mark.parametrize("backend", _backends())
def test_greedy_tokens_with_caching_equal_tokens_without(tiny, backend):
    count = 8 if backend == "triton" else 120
    block_sizes = (8, 16) if backend == "triton" else (2, 4, 8, 16)  # Triton's kernels take 8 and up
    hits = preempted = 0
    for seed in range(count):
        config = random_engine_config(random.Random(seed), block_sizes)
        try:
            with_cache, stats = generate(tiny, config, backend, caching=True)
        # n x (prompt + max_tokens) that can never fit this pool: not this test's case
        except ValueError as e:
            assert "pool" in str(e) or "blocks" in str(e), e
            continue
        without, _ = generate(tiny, config, backend, caching=False)
        assert with_cache == without, f"seed {seed}: {config}"
        hits += stats["prefix_cache_hits"] > 0
        preempted += stats["num_preemptions"] > 0
    if backend != "triton":  # the space really has hits and preemptions in it
        assert hits >= 30 and preempted >= 10, (hits, preempted)


# -- the two reproducers, on the real model ------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_llm(smollm2):
    model, tok, _ = smollm2
    return model, tok


def test_twin_prompts_of_17_tokens_get_the_tokens_of_one_alone(smollm2_llm):
    model, tok = smollm2_llm
    ids, sp = list(range(100, 117)), SamplingParams(temperature=0, max_tokens=6)
    alone = LLM(model, tokenizer=tok).generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)
    llm = LLM(model, tokenizer=tok)
    twins = llm.generate([{"prompt_token_ids": ids}] * 2, sp, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in twins] == [alone[0].outputs[0].token_ids] * 2
    assert llm.stats()["prefix_cache_hits"] == 16  # the second twin did share the first one's block


def test_preemption_in_a_chunked_prefill_keeps_the_tokens_of_caching_off(smollm2_llm):
    model, tok = smollm2_llm
    prompts = [{"prompt_token_ids": [5, 6]}, {"prompt_token_ids": list(range(200, 212))}]
    sp = SamplingParams(temperature=0, max_tokens=5)
    runs = []
    for caching in (True, False):
        # (budget 2 preempted it under the paper's whole-prompt allocation; V1 allocates chunk by chunk,
        # and with a budget of 3 its next chunk finds no free block)
        llm = LLM(model, tokenizer=tok, block_size=4, num_kv_blocks=4, max_num_batched_tokens=3,
                  max_num_seqs=2, enable_prefix_caching=caching)
        runs.append([o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)])
        assert llm.stats()["num_preemptions"] >= 1  # the 12-token prompt was preempted mid-prefill
    assert runs[0] == runs[1]
