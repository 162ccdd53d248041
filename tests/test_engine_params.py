"""Bad engine and sampling arguments: a ValueError (or MemoryError) that names the argument and its limit,
raised before anything is queued or allocated."""

import math

import numpy as np
import pytest
from test_engine_phases import _tiny_llama, _Tok  # the same 2-layer random Llama and id tokenizer

from paged_lab.engine import LLM, SamplingParams

GOOD = {"prompt_token_ids": [5, 6, 7]}


@pytest.fixture(scope="module")
def tiny():
    return _tiny_llama()


def _engine(model, **kw):
    kw.setdefault("num_kv_blocks", 16)
    return LLM(model, tokenizer=_Tok(), block_size=4, attention_backend="torch", **kw)


@pytest.mark.parametrize("kw,match", [
    ({"seed": "abc"}, r"seed must be an integer >= 0 and <= 18446744073709551615, got 'abc'"),
    ({"seed": 2**70}, r"seed must be an integer >= 0 and <= 18446744073709551615"),
    ({"seed": 1.7}, r"seed must be an integer.*got 1.7"),
    ({"seed": -1}, r"seed must be an integer >= 0"),
    ({"seed": 2**64 - 1, "n": 3}, r"seed must be an integer >= 0 and <= 18446744073709551613"),  # seed + 2
    ({"temperature": math.inf}, r"temperature must be a finite number, got inf"),
    ({"temperature": "0.5"}, r"temperature must be a finite number, got '0.5'"),
    ({"top_p": "0.5"}, r"top_p must be a finite number"),
    ({"n": True}, r"n must be an integer >= 1, got True"),
    ({"max_tokens": True}, r"max_tokens must be an integer >= 1, got True"),
    ({"top_k": True}, r"top_k must be an integer >= -1, got True"),
    ({"stop": 123}, r"stop must be a string or a list of non-empty strings, got 123"),
    ({"ignore_eos": "no"}, r"ignore_eos must be True or False"),
])
def test_bad_sampling_fields_name_the_field_and_the_limit(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


def test_fields_are_normalised():
    sp = SamplingParams(n=np.int64(2), seed=np.uint64(2**64 - 2), stop=("a", "b"))
    assert type(sp.n) is int and type(sp.seed) is int and sp.stop == ["a", "b"]


def test_an_edited_seed_is_caught_before_any_request_is_queued(tiny):
    """All requests of a call are checked first: a bad seed in the second one leaves the first unqueued."""
    llm = _engine(tiny)
    bad = SamplingParams(temperature=1.0)
    bad.seed = "abc"
    with pytest.raises(ValueError, match=r"prompts\[1\]: seed must be an integer"):
        llm.generate([GOOD, GOOD], [SamplingParams(max_tokens=2), bad], use_tqdm=False)
    assert not llm.scheduler.has_unfinished() and llm.stats()["num_steps"] == 0


def test_the_largest_seed_runs(tiny):
    """seed = 2**64 - n: the last completion samples with 2**64 - 1, the largest seed torch takes."""
    llm = _engine(tiny)
    out = llm.generate(GOOD, SamplingParams(n=3, temperature=1.0, seed=2**64 - 3, max_tokens=2),
                       use_tqdm=False)
    assert len(out[0].outputs) == 3


@pytest.mark.parametrize("kw,match", [
    ({"max_model_len": 0}, r"max_model_len must be an integer >= 2, got 0"),
    ({"max_model_len": -5}, r"max_model_len must be an integer >= 2, got -5"),
    ({"max_model_len": True}, r"max_model_len must be an integer >= 2, got True"),
    ({"max_model_len": 2.5}, r"max_model_len must be an integer >= 2, got 2.5"),
    ({"max_model_len": 10_000},
     r"max_model_len=10000 is more than the model's context \(max_position_embeddings=256\)"),
    ({"enable_prefix_caching": "no"}, r"enable_prefix_caching must be True or False, got 'no'"),
    ({"enforce_eager": 1}, r"enforce_eager must be True or False, got 1"),
    ({"cpu_prepack": "auto"}, r"cpu_prepack must be True, False or None, got 'auto'"),
    ({"num_kv_blocks": None, "kv_cache_memory": 0}, r"kv_cache_memory must be a positive number, got 0"),
    ({"num_kv_blocks": None, "kv_cache_memory": "1GB"}, r"kv_cache_memory must be a positive number"),
    ({"num_kv_blocks": None, "kv_cache_memory": math.inf}, r"kv_cache_memory must be finite, got inf"),
])
def test_bad_engine_arguments_name_the_argument_and_the_limit(tiny, kw, match):
    with pytest.raises(ValueError, match=match):
        _engine(tiny, **kw)


@pytest.mark.parametrize("kw,arg", [({"num_kv_blocks": 2**40}, "num_kv_blocks"),
                                    ({"num_kv_blocks": None, "kv_cache_memory": 2**60}, "kv_cache_memory")])
def test_a_kv_pool_larger_than_memory_says_what_was_asked_and_what_to_lower(tiny, kw, arg):
    with pytest.raises(MemoryError,
                       match=rf"KV pool of \d+ blocks x 4 tokens needs \d+ bytes .* lower {arg}$"):
        _engine(tiny, **kw)
