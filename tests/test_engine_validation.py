"""Bad requests: ValueError naming the field, raised before any work starts (one bad request loses no
others)."""

import pytest
import torch

from paged_lab.engine import LLM, SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture
def llm(smollm2):
    model, tok, _ = smollm2
    return LLM(model, tokenizer=tok, block_size=4, num_kv_blocks=8, max_model_len=64)


GOOD = {"prompt_token_ids": [504, 3575, 282, 4649, 314]}


@pytest.mark.parametrize("prompt,params,match", [
    ("", SamplingParams(), r"prompts\[1\]: prompt is empty"),
    ({"prompt_token_ids": []}, SamplingParams(), r"prompts\[1\]: prompt is empty"),
    ({"prompt_token_ids": [1] * 64}, SamplingParams(), r"prompts\[1\].*max_model_len\) is 64"),
    ({"prompt_token_ids": [1] * 20}, SamplingParams(max_tokens=16),
     r"prompts\[1\].*max_tokens \(16\) needs up to 35 KV slots.* at most 32"),
    ({"prompt_token_ids": [7, 49152]}, SamplingParams(), r"prompts\[1\].*outside \[0, 49152\)"),
    ({"tokens": [1, 2]}, SamplingParams(), "prompt_token_ids"),
])
def test_bad_request_raises_and_nothing_runs(llm, prompt, params, match):
    with pytest.raises(ValueError, match=match):
        llm.generate([GOOD, prompt], [SamplingParams(max_tokens=2), params], use_tqdm=False)
    assert not llm.scheduler.has_unfinished() and llm.stats()["num_steps"] == 0
    assert llm.block_manager.num_free_blocks == 8


def test_prompt_longer_than_the_whole_pool(smollm2):
    model, tok, _ = smollm2
    llm = LLM(model, tokenizer=tok, block_size=4, num_kv_blocks=2)
    with pytest.raises(ValueError, match=r"prompt has 9 tokens but one sequence can hold at most 8"):
        llm.generate({"prompt_token_ids": list(range(1, 10))}, use_tqdm=False)


@pytest.mark.parametrize("field,value", [("max_tokens", 0), ("temperature", -1.0), ("top_p", 0.0),
                                         ("top_p", 1.5), ("n", 0)])
def test_params_edited_after_creation_are_checked_again(llm, field, value):
    sp = SamplingParams()
    setattr(sp, field, value)
    with pytest.raises(ValueError, match=field):
        llm.generate([GOOD, GOOD], [SamplingParams(max_tokens=1), sp], use_tqdm=False)
    assert llm.stats()["num_steps"] == 0


def test_list_of_params_must_match_the_prompts(llm):
    with pytest.raises(ValueError, match="sampling_params has 1 entries but there are 2 prompts"):
        llm.generate([GOOD, GOOD], [SamplingParams()], use_tqdm=False)


def test_a_rejected_batch_leaves_the_engine_usable(llm):
    with pytest.raises(ValueError):
        llm.generate([GOOD, ""], use_tqdm=False)
    out = llm.generate(GOOD, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    assert len(out) == 1 and len(out[0].outputs[0].token_ids) == 2


def test_engine_arguments_are_checked(smollm2):
    model, tok, _ = smollm2
    for kw, field in [({"attention_backend": "cuda"}, "attention_backend"),
                      ({"preemption": "swap"}, "preemption"),
                      ({"block_size": 0}, "block_size"), ({"num_kv_blocks": 0}, "num_kv_blocks"),
                      ({"kv_cache_memory": 1000}, "kv_cache_memory"), ({"dtype": "bfloat16"}, "dtype"),
                      ({"compile_sizes": (2, 0)}, "compile_sizes"), ({"compile_sizes": ()}, "compile_sizes")]:
        with pytest.raises(ValueError, match=field):
            LLM(model, tokenizer=tok, **kw)
    with pytest.raises(ValueError, match="tokenizer"):
        LLM(model)


def _tiny_llama(dtype=torch.float32, bias=False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                      attention_bias=bias, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval().to(dtype)


def test_compiled_decode_is_refused_where_it_was_not_built_for(smollm2):
    tok = smollm2[1]
    with pytest.raises(ValueError, match="enforce_eager=False compiles decode steps for CPU float32 only"):
        LLM(_tiny_llama(torch.bfloat16), tokenizer=tok, dtype="bfloat16", enforce_eager=False,
            num_kv_blocks=4)
    # biases compile now (one decoder_layer for both paths): tests/test_engine_phases.py runs them
