"""N-gram speculative decoding (``paged_lab.engine.spec_decode``): the config, the proposer, verification,
the rejection-sampling rule, and the engine: greedy tokens with speculation equal those without, in every
attention backend that runs here, with preemption and prefix caching on; the pool is whole after each call."""

from __future__ import annotations

import random

import pytest
import torch
from tiny_models import head_dim_64_llama

from paged_lab.engine import LLM, SamplingParams
from paged_lab.engine.spec_decode import (
    NgramProposer,
    SpeculativeConfig,
    accepted_prefix,
    blocks_to_allocate_ahead,
    greedy_verify,
    ngram_drafts,
    rejection_sample,
)
from paged_lab.kernels._interpret import triton_available
from paged_lab.kernels.cpu import attention as cpu_attention
from paged_lab.memory.events import replay

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


class Tok:
    """Token ids as text: "5 6 7" (stop strings can be found in it)."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def model():
    return head_dim_64_llama()


def engine(model, spec, backend="torch", num_kv_blocks=200, **kw):
    return LLM(
        model,
        tokenizer=Tok(),
        block_size=4,
        num_kv_blocks=num_kv_blocks,
        attention_backend=backend,
        enable_prefix_caching=True,
        max_num_batched_tokens=kw.pop("budget", 64),
        speculative_config=spec,
        **kw,
    )


def prompts(seed: int) -> list[dict]:
    """Repetitive prompts (drafts often right), "code" (a line repeated with one change), random text."""
    rng = random.Random(seed)
    out = []
    for kind in ("repetitive", "code", "random") * 2:
        if kind == "repetitive":
            ids = [rng.randrange(96) for _ in range(rng.randint(2, 6))] * 6
        elif kind == "code":
            line = [rng.randrange(96) for _ in range(rng.randint(4, 8))]
            ids = [t for i in range(4) for t in line[:-1] + [i]]
        else:
            ids = [rng.randrange(96) for _ in range(rng.randint(5, 30))]
        out.append({"prompt_token_ids": ids[: rng.randint(8, 30)]})
    return out


def run(llm, batch, params):
    outs = llm.generate(batch, params, use_tqdm=False)
    assert llm.block_manager.num_free_blocks == llm.num_blocks  # the whole pool back after every call
    llm.block_manager.check_invariants()
    return [o.outputs[0].token_ids for o in outs]


# -- config ----------------------------------------------------------------------------------------
def test_the_config_takes_vllms_shape_and_defaults():
    assert SpeculativeConfig.of(None) is None
    assert SpeculativeConfig.of({"method": "ngram", "num_speculative_tokens": 2}) == SpeculativeConfig(
        2, 5, 5
    )
    assert SpeculativeConfig.of({"num_speculative_tokens": 2, "prompt_lookup_max": 4}) == SpeculativeConfig(
        2, 4, 4
    )
    assert SpeculativeConfig.of({"num_speculative_tokens": 2, "prompt_lookup_min": 3}) == SpeculativeConfig(
        2, 3, 3
    )


@pytest.mark.parametrize(
    "bad, names",
    [
        ({"method": "eagle", "num_speculative_tokens": 2}, "method"),
        ({"method": "ngram"}, "num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
            "<=",
        ),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}, "prompt_lookup_min"),
        ({"method": "ngram", "num_speculative_tokens": 2, "draft_model": "x"}, "draft_model"),
        ("ngram", "dict"),
    ],
)
def test_a_bad_config_raises_naming_the_key_before_the_model_loads(bad, names):
    with pytest.raises(ValueError, match=names):
        LLM("no-such-model-is-loaded", speculative_config=bad)


def test_fork_sampling_is_refused(model):
    with pytest.raises(ValueError, match="parallel_sampling='prefix'"):
        engine(model, SPEC, parallel_sampling="fork")


# -- proposer and verification ------------------------------------------------------------------------
def test_the_proposer_takes_the_longest_ngram_and_its_first_occurrence():
    assert ngram_drafts([1, 2, 3, 9, 1, 2, 3], 1, 3, k=2) == [9, 1]
    assert ngram_drafts([7, 3, 8, 5, 3, 6, 3], 1, 3, k=2) == [8, 5]  # "3" first followed by 8
    assert ngram_drafts([1, 2, 4, 2, 9, 1, 2], 1, 3, k=3) == [4, 2, 9]  # "1 2" beats the later "2"
    assert ngram_drafts([1, 2, 3, 4], 1, 3, k=3) == [] and ngram_drafts([5], 1, 1, k=1) == []
    p = NgramProposer(SpeculativeConfig(4, 2, 1), max_model_len=10)
    assert p.propose([1, 2, 1, 2, 1, 2, 1, 2]) == [1, 2]  # max_model_len 10 leaves 2 positions
    assert p.propose([1, 2, 1, 2], max_drafts=1) == [1]


def test_greedy_verification_keeps_the_agreeing_prefix_and_the_targets_next_token():
    assert accepted_prefix([5, 7, 9], [5, 7, 2, 4]) == 2 and greedy_verify([5, 7, 9], [5, 7, 2, 4]) == [
        5,
        7,
        2,
    ]
    assert greedy_verify([5, 7], [5, 7, 1]) == [5, 7, 1]  # all accepted: the bonus token
    assert greedy_verify([], [3]) == [3] and greedy_verify([4], [3, 8]) == [3]
    assert blocks_to_allocate_ahead(14, 3, num_blocks_held=4, block_size=4) == 1
    assert blocks_to_allocate_ahead(14, 3, num_blocks_held=5, block_size=4) == 0  # a kept block is reused


def test_rejection_sampling_keeps_the_target_distribution():
    """vLLM's rule with one-token drafts (no draft probabilities): accept d with probability p(d), else draw
    from p without d. Chi-square of 3,000 seeded draws per draft against p, 4 degrees of freedom: 40 is
    far beyond any plausible value (p < 1e-7) and the seed fixes the draws, so it cannot flake; the
    rule "always accept the draft" scores in the tens of thousands."""
    p = torch.tensor([0.1, 0.2, 0.3, 0.35, 0.05], dtype=torch.float64)
    n = 3_000
    for draft in range(5):
        g = torch.Generator().manual_seed(draft)
        counts = torch.zeros(5, dtype=torch.float64)
        second = torch.zeros(5, dtype=torch.float64)
        probs = torch.stack([p, p.flip(0)])  # the second row: the target after the draft
        for _ in range(n):
            out = rejection_sample([draft], probs, g)
            counts[out[0]] += 1
            if len(out) == 2:  # accepted: the bonus token comes from the next row
                second[out[1]] += 1
        chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
        assert chi2 < 40, (draft, chi2, counts)
        m, q = second.sum(), p.flip(0)
        assert float(((second - m * q) ** 2 / (m * q)).sum()) < 40


# -- the engine --------------------------------------------------------------------------------------
BACKENDS = ["torch", "reference"] + (["cpu"] if cpu_attention.available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_tokens_with_speculation_equal_those_without(model, backend):
    """Random prompts of three kinds, prefix caching on, a pool small enough to preempt: the same tokens,
    fewer steps, drafts accepted on the repetitive prompts."""
    batch, params = prompts(seed=len(backend)), SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    plain = engine(model, None, backend)
    want = run(plain, batch, params)
    for blocks, k in ((200, 3), (26, 2)):
        spec = engine(model, {**SPEC, "num_speculative_tokens": k}, backend, num_kv_blocks=blocks)
        assert run(spec, batch, params) == want, (blocks, k)
        st = spec.stats()
        assert st["spec_decode_num_accepted_tokens"] > 0 and st["spec_decode_num_draft_tokens"] > 0
        if blocks == 200:
            assert st["num_steps"] < plain.stats()["num_steps"]
        else:
            assert st["num_preemptions"] > 0
        assert run(spec, batch, params) == want  # again, now with the prefix cache warm


@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
def test_greedy_tokens_with_speculation_equal_those_without_in_triton(model):
    """Triton's kernels (interpreted on a CPU: small and short) take block sizes from 8."""
    batch, params = prompts(seed=1)[:2], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    kw = {"block_size": 8, "num_kv_blocks": 60}
    want = run(LLM(model, tokenizer=Tok(), attention_backend="torch", **kw), batch, params)
    spec = LLM(model, tokenizer=Tok(), attention_backend="triton", speculative_config=SPEC, **kw)
    assert run(spec, batch, params) == want and spec.stats()["spec_decode_num_draft_tokens"] > 0


def test_stop_strings_and_max_tokens_end_where_plain_decoding_ends(model):
    batch = prompts(seed=7)[:3]
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    plain = run(engine(model, None), batch, params)
    stops = [" ".join(map(str, out[5:7])) for out in plain]  # a stop string in the middle of each output
    params = [SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, stop=[s]) for s in stops]
    want = [o.outputs[0] for o in engine(model, None).generate(batch, params, use_tqdm=False)]
    got = [o.outputs[0] for o in engine(model, SPEC).generate(batch, params, use_tqdm=False)]
    assert [(o.token_ids, o.text, o.finish_reason) for o in got] == [
        (o.token_ids, o.text, o.finish_reason) for o in want
    ]


def test_the_event_log_tells_draft_verify_accept_rollback_and_replays(model):
    llm = engine(model, SPEC, num_kv_blocks=40)
    run(
        llm,
        [{"prompt_token_ids": [5, 6, 7, 8] * 3}],
        SamplingParams(temperature=0, max_tokens=16, ignore_eos=True),
    )
    st = llm.stats()
    kinds = [e.kind for e in st["events"]]
    assert {"draft", "verify", "accept", "rollback"} <= set(kinds)
    assert kinds.count("verify") == st["spec_decode_num_drafts"] > 0
    for e in st["events"]:
        if e.kind == "rollback":  # the rejected slots' blocks stay in the table: no "free" between
            assert e.block_ids
    bm = llm.block_manager
    assert replay(st["events"], llm.num_blocks).free_queue == list(bm.pool.free_queue)
    assert st["spec_decode_num_accepted_tokens"] == sum(st["spec_decode_num_accepted_tokens_per_pos"])


def test_sampled_requests_run_seeded(model):
    batch = prompts(seed=3)[:3]
    params = SamplingParams(temperature=0.8, top_k=20, max_tokens=16, seed=11, ignore_eos=True)
    first, again = run(engine(model, SPEC), batch, params), run(engine(model, SPEC), batch, params)
    assert first == again and all(len(o) == 16 and all(0 <= t < 96 for t in o) for o in first)
