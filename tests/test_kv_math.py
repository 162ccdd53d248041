import math

import pytest
import torch

from paged_lab import kv_math
from paged_lab.kv_math import (
    ModelSpec,
    get_spec,
    human_bytes,
    kv_bytes_per_token,
    list_specs,
    num_kv_blocks,
    plan_capacity,
)

REQUIRED = [
    "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b",
    "mistral-7b", "qwen2.5-0.5b", "qwen2.5-7b", "smollm2-135m",
]


def test_pinned_values():
    assert get_spec("llama-3.2-1b").kv_bytes_per_token("bfloat16") == 32_768 == 32 * 1024
    assert get_spec("smollm2-135m").kv_bytes_per_token("bf16") == 23_040


def test_formula_matches_definition_for_every_model_and_dtype():
    for name in list_specs():
        s = get_spec(name)
        for dtype, nbytes in [("float32", 4), ("bfloat16", 2), ("float16", 2), ("fp8", 1)]:
            assert s.kv_bytes_per_token(dtype) == 2 * s.num_layers * s.num_kv_heads * s.head_dim * nbytes


def test_catalogue_has_required_models():
    assert set(REQUIRED) <= set(list_specs())


def test_unknown_model_lists_known_ones():
    with pytest.raises(KeyError) as e:
        get_spec("gpt-9")
    for name in REQUIRED:
        assert name in str(e.value)


def test_hub_id_alias():
    assert get_spec("meta-llama/Llama-3.2-1B") is get_spec("llama-3.2-1b")


@pytest.mark.parametrize(
    "alias,canonical",
    [("bf16", "bfloat16"), (torch.bfloat16, "bfloat16"), ("fp32", "float32"), (torch.float16, "float16"),
     ("float8_e4m3fn", "fp8")],
)
def test_dtype_aliases(alias, canonical):
    assert kv_math.canonical_dtype(alias) == canonical


def test_bad_dtype_names_the_argument():
    with pytest.raises(ValueError, match="dtype"):
        get_spec("smollm2-135m").kv_bytes_per_token("int3")


def test_attention_kinds_and_mha_cost():
    assert get_spec("llama-2-7b").attention_kind == "MHA"
    assert get_spec("falcon-7b").attention_kind == "MQA"
    s = get_spec("llama-3.2-1b")
    assert s.attention_kind == "GQA"
    assert s.kv_bytes_per_token_mha("bf16") == 4 * s.kv_bytes_per_token("bf16") == 131_072
    assert s.kv_savings_vs_mha() == 4
    assert s.as_mqa().kv_bytes_per_token("bf16") == s.kv_bytes_per_token("bf16") // 8


def test_from_hf_config_matches_catalogue():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
        intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, max_position_embeddings=8192,
    )
    spec = ModelSpec.from_hf_config(cfg, name="smollm2-135m")
    assert spec == get_spec("smollm2-135m")


def test_from_hf_config_defaults_head_dim_and_kv_heads():
    spec = ModelSpec.from_hf_config(
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "vocab_size": 100}
    )
    assert (spec.num_kv_heads, spec.head_dim, spec.attention_kind) == (4, 64, "MHA")


def test_estimated_params_match_catalogue_for_llama_shapes():
    for name in ["smollm2-135m", "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b"]:
        s = get_spec(name)
        assert s.estimate_num_params() == s.num_params


def test_num_kv_blocks_is_vllm_floor_rule():
    s = get_spec("llama-3.2-1b")
    mem = 10 * 2**30 + 12345
    assert num_kv_blocks(s, mem, 16, "bf16") == mem // (16 * 32_768)
    assert num_kv_blocks(s, 16 * 32_768 - 1, 16, "bf16") == 0
    assert num_kv_blocks(s, 16 * 32_768, 16, "bf16") == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, None])
def test_num_kv_blocks_rejects_bad_block_size(bad):
    with pytest.raises((ValueError, TypeError), match="block_size"):
        num_kv_blocks(get_spec("smollm2-135m"), 2**30, bad)


@pytest.mark.parametrize("bad", [0, -5])
def test_non_positive_sizes_name_the_argument(bad):
    s = get_spec("smollm2-135m")
    with pytest.raises(ValueError, match="memory_bytes"):
        num_kv_blocks(s, bad, 16)
    with pytest.raises(ValueError, match="gpu_memory_bytes"):
        plan_capacity(s, bad, 1024)
    with pytest.raises(ValueError, match="seq_len"):
        plan_capacity(s, 2**30, bad)
    with pytest.raises(ValueError, match="num_tokens"):
        s.kv_bytes(bad - 1)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_infinite_or_nan_memory_is_named(bad):
    s = get_spec("smollm2-135m")
    with pytest.raises(ValueError, match="memory_bytes must be (finite|a positive number)"):
        num_kv_blocks(s, bad, 16)
    with pytest.raises(ValueError, match="gpu_memory_bytes must be (finite|a positive number)"):
        plan_capacity(s, bad, 1024)


def test_num_kv_blocks_says_infinite_memory_must_be_finite():
    with pytest.raises(ValueError, match="memory_bytes must be finite"):
        num_kv_blocks(get_spec("smollm2-135m"), float("inf"), 16)


def test_capacity_plan_after_weights():
    s = get_spec("llama-3.1-8b")
    plan = plan_capacity(s, 80 * kv_math.GB, seq_len=4096, dtype="bf16")
    assert plan.weight_bytes == s.num_params * 2
    assert plan.kv_budget_bytes == 80 * kv_math.GB - plan.weight_bytes
    assert plan.max_tokens == plan.kv_budget_bytes // s.kv_bytes_per_token("bf16")
    assert plan.max_seqs == plan.max_tokens // 4096
    # 70B in bf16 does not fit a 80 GB card at all
    big = plan_capacity(get_spec("llama-3.1-70b"), 80 * kv_math.GB, 4096)
    assert not big.weights_fit and big.max_tokens == 0 and big.max_seqs == 0


def test_capacity_utilization_bounds():
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        plan_capacity(get_spec("smollm2-135m"), 2**30, 10, gpu_memory_utilization=1.5)


def test_kv_bytes_per_token_module_function():
    assert kv_bytes_per_token("llama-3.2-1b") == 32_768
    assert kv_bytes_per_token(get_spec("smollm2-135m"), "float32") == 46_080


def test_model_spec_validates_heads():
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelSpec("x", 1, 9, 2, 64, 576, 10, 0)
    with pytest.raises(ValueError, match="num_layers"):
        ModelSpec("x", 0, 8, 2, 64, 576, 10, 0)


def test_human_bytes():
    assert human_bytes(32_768) == "32 KiB"
    assert human_bytes(23_040) == "22.5 KiB"
    assert human_bytes(0) == "0 B"
    assert math.isclose(float(human_bytes(3 * 2**30).split()[0]), 3)


def test_positions_processed_with_and_without_a_kv_cache():
    from paged_lab.kv_math import positions_processed

    # brute force: without a cache step i runs the model over the whole sequence so far
    for p, n in ((1, 1), (5, 1), (3, 7), (100, 200)):
        assert positions_processed(p, n, kv_cache=False) == sum(p + i for i in range(n))
        assert positions_processed(p, n) == p + sum(1 for _ in range(1, n))
    # doubling the output roughly quadruples the uncached work (quadratic), doubles the cached one
    a, b = positions_processed(1, 1000, kv_cache=False), positions_processed(1, 2000, kv_cache=False)
    assert 3.9 < b / a < 4.1
    assert positions_processed(1, 2000) == 2 * positions_processed(1, 1000)


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, None])
def test_positions_processed_names_the_bad_argument(bad):
    from paged_lab.kv_math import positions_processed

    with pytest.raises(ValueError, match="prompt_len must be an integer >= 1"):
        positions_processed(bad, 4)
    with pytest.raises(ValueError, match="new_tokens must be an integer >= 1"):
        positions_processed(4, bad)
