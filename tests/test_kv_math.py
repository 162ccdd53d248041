import math
from dataclasses import replace

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
            if s.is_mla:  # one latent per layer and token, no K and V per head
                latent = s.kv_lora_rank + s.qk_rope_head_dim
                assert s.kv_bytes_per_token(dtype) == s.num_layers * latent * nbytes
            else:
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


# --- today's models: MLA latents and sliding windows (notebook 08) ------------------------------------------
# The config facts below are typed from each model's config.json, not read from paged_lab.

def test_deepseek_v3_caches_one_latent_per_layer():
    s = get_spec("deepseek-v3")
    assert s.attention_kind == "MLA" and s.is_mla
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes: no factor 2, no heads
    assert s.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70_272
    assert s.kv_bytes_per_token("fp8") == 61 * 576
    # as MHA: K and V for 128 heads of 128 (the DeepSeek-V2 paper's d_h) in every layer
    assert s.kv_bytes_per_token_mha("bf16") == 2 * 61 * 128 * 128 * 2
    assert s.as_mha().attention_kind == "MHA"
    assert s.kv_savings_vs_mha() == (2 * 128 * 128) / 576
    assert s.kv_bytes_for_context(4096, "bf16") == 4096 * 70_272


def test_gpt_oss_20b_alternates_sliding_and_full_layers():
    s = get_spec("gpt-oss-20b")
    assert s.attention_kind == "GQA" and (s.num_sliding_layers, s.num_full_layers) == (12, 12)
    assert s.layer_types[:2] == ("sliding_attention", "full_attention") and len(s.layer_types) == 24
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16
    assert s.kv_bytes_per_token("bf16") == 24 * per_layer == 49_152
    # within the window every layer keeps every token; past it the sliding layers keep 128
    assert s.kv_bytes_for_context(100) == 100 * 24 * per_layer
    assert s.kv_bytes_for_context(128) == 128 * 24 * per_layer
    assert s.kv_bytes_for_context(4096) == (12 * 4096 + 12 * 128) * per_layer
    assert s.kv_bytes(4096) == s.kv_bytes_for_context(4096)
    full = s.as_full_attention()
    assert full.num_sliding_layers == 0 and full.kv_bytes_for_context(4096) == 4096 * 24 * per_layer


def test_gemma_3_27b_has_five_local_layers_to_one_global():
    s = get_spec("gemma-3-27b")
    full = [i for i, kind in enumerate(s.layer_types) if kind == "full_attention"]
    assert full == list(range(5, 62, 6)) and (s.num_sliding_layers, s.num_full_layers) == (52, 10)
    per_layer = 2 * 16 * 128 * 2
    assert s.kv_bytes_for_context(32768) == (10 * 32768 + 52 * 1024) * per_layer


def test_a_model_without_sliding_layers_costs_the_same_at_any_context():
    s = get_spec("llama-3.1-8b")
    assert (s.num_sliding_layers, s.num_full_layers, s.layer_types) == (0, 32, ())
    for n in (0, 1, 4096, 100_000):
        assert s.kv_bytes_for_context(n) == n * 131_072


@pytest.mark.parametrize("changes,match", [
    ({"layer_types": ("full_attention",) * 3}, "layer_types has 3 entries; it needs num_layers=4"),
    ({"layer_types": ("full_attention",) * 3 + ("local",)}, "layer_types may hold only"),
    ({"layer_types": ("sliding_attention",) * 4}, "sliding_window must be >= 1"),
    ({"sliding_window": 128}, "sliding_window=128 is set, but no layer"),
    ({"qk_rope_head_dim": 64}, "needs kv_lora_rank > 0"),
    ({"kv_lora_rank": -1}, "kv_lora_rank must be an integer >= 0"),
    ({"sliding_window": 1.5, "layer_types": ("sliding_attention",) * 4}, "sliding_window must be an integer"),
])  # fmt: skip
def test_model_spec_names_the_bad_new_field(changes, match):
    with pytest.raises(ValueError, match=match):
        ModelSpec("x", 4, 8, 2, 64, 512, 1000, 0, **changes)


def test_layer_types_listing_every_layer_full_is_the_same_model():
    listed = ModelSpec("x", 2, 8, 2, 64, 512, 1000, 0, layer_types=["full_attention", "full_attention"])
    assert listed == ModelSpec("x", 2, 8, 2, 64, 512, 1000, 0) and listed.layer_types == ()


def _without_params(spec):
    return replace(spec, name="m", num_params=0)


def test_from_hf_config_reads_gpt_oss_layer_types():
    from transformers import GptOssConfig

    cfg = GptOssConfig(num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                       hidden_size=2880, intermediate_size=2880, vocab_size=201088, sliding_window=128,
                       max_position_embeddings=131072, tie_word_embeddings=False)
    assert _without_params(ModelSpec.from_hf_config(cfg)) == _without_params(get_spec("gpt-oss-20b"))


def test_from_hf_config_reads_gemma_3s_sliding_window_pattern_inside_text_config():
    text = {"num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
            "hidden_size": 5376, "intermediate_size": 21504, "vocab_size": 262208, "sliding_window": 1024,
            "sliding_window_pattern": 6, "max_position_embeddings": 131072, "tie_word_embeddings": True}
    spec = ModelSpec.from_hf_config({"model_type": "gemma3", "text_config": text})
    assert _without_params(spec) == _without_params(get_spec("gemma-3-27b"))


def test_from_hf_config_reads_transformers_gemma_3_config():
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(num_hidden_layers=62, num_attention_heads=32, num_key_value_heads=16, head_dim=128,
                           hidden_size=5376, intermediate_size=21504, vocab_size=262208, sliding_window=1024,
                           max_position_embeddings=131072, tie_word_embeddings=True)
    assert _without_params(ModelSpec.from_hf_config(cfg)) == _without_params(get_spec("gemma-3-27b"))


def test_from_hf_config_reads_deepseek_v3s_latent():
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                           hidden_size=7168, intermediate_size=18432, vocab_size=129280, kv_lora_rank=512,
                           qk_rope_head_dim=64, qk_nope_head_dim=128, max_position_embeddings=163840,
                           tie_word_embeddings=False)
    spec = ModelSpec.from_hf_config(cfg)
    assert _without_params(spec) == _without_params(get_spec("deepseek-v3"))
    assert spec.kv_bytes_per_token("bf16") == 61 * 576 * 2


def test_from_hf_config_reads_a_sliding_window_without_layer_kinds_as_all_full():
    # Mistral-7B v0.1 style: a window in the config, no layer_types: the short-context upper bound
    spec = ModelSpec.from_hf_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
                                     "vocab_size": 100, "sliding_window": 4096})
    assert (spec.sliding_window, spec.layer_types, spec.num_full_layers) == (0, (), 2)


def _blocks_touching_the_window(n, bs, w):
    """Brute force: a block is kept when any of its tokens is one the next token still attends to
    (the last w - 1 computed tokens) and it holds a computed token."""
    first_needed = max(0, n - (w - 1))
    return sum(1 for b in range(-(-n // bs)) if (b + 1) * bs - 1 >= first_needed)


def test_window_blocks_held_by_brute_force():
    from paged_lab.kv_math import window_blocks_held

    assert window_blocks_held(1000, 16, 128) == 9  # blocks 54..62
    for w in (1, 2, 5, 16, 33):
        for bs in (1, 3, 4, 16):
            for n in range(0, 120):
                assert window_blocks_held(n, bs, w) == _blocks_touching_the_window(n, bs, w), (n, bs, w)


@pytest.mark.parametrize("args,match", [((-1, 16, 128), "num_tokens"), ((10, 0, 128), "block_size"),
                                        ((10, 16, 0), "sliding_window"), ((10.0, 16, 128), "num_tokens")])
def test_window_blocks_held_names_the_bad_argument(args, match):
    from paged_lab.kv_math import window_blocks_held

    with pytest.raises(ValueError, match=match):
        window_blocks_held(*args)


def test_kv_blocks_for_context_per_layer_kind():
    assert get_spec("gpt-oss-20b").kv_blocks_for_context(1000, 16) == {"full_attention": 63,
                                                                       "sliding_attention": 9}
    assert get_spec("llama-3.1-8b").kv_blocks_for_context(1000, 16) == {"full_attention": 63}
    with pytest.raises(ValueError, match="block_size"):
        get_spec("gpt-oss-20b").kv_blocks_for_context(1000, 0)


def test_page_size_bytes_is_one_layers_block():
    from paged_lab.kv_math import page_size_bytes

    assert page_size_bytes(get_spec("llama-3.1-8b"), 16, "bf16") == 16 * 2 * 8 * 128 * 2
    assert page_size_bytes(get_spec("deepseek-v3"), 64, "fp8") == 64 * 576
    gpt = get_spec("gpt-oss-20b")
    assert page_size_bytes(gpt, 16, kind="sliding_attention") == page_size_bytes(gpt, 16) == 16 * 2048
    with pytest.raises(ValueError, match="kind='sliding_attention': llama-3.1-8b has no sliding_attention"):
        page_size_bytes(get_spec("llama-3.1-8b"), 16, kind="sliding_attention")
    with pytest.raises(ValueError, match="kind must be one of"):
        page_size_bytes(gpt, 16, kind="sliding")
    with pytest.raises(ValueError, match="block_size"):
        page_size_bytes(gpt, 0)


def test_kv_models_table_rows():
    from paged_lab.kv_math import kv_models_table

    rows = kv_models_table(["gpt-oss-20b", "deepseek-v3"], "bf16", memory_gib=80, context=4096)
    memory = 80 * 2**30
    gpt, ds = rows
    per_request = (12 * 4096 + 12 * 128) * (2 * 8 * 64 * 2)
    assert (gpt["model"], gpt["attention_kind"], gpt["num_sliding_layers"], gpt["sliding_window"]) == (
        "gpt-oss-20b", "GQA", 12, 128)
    assert gpt["kv_bytes_per_token"] == 49_152 and gpt["kv_bytes_per_request"] == per_request
    assert gpt["bytes_per_token"] == per_request / 4096 < gpt["kv_bytes_per_token"]
    assert gpt["max_requests"] == memory // per_request and gpt["max_tokens"] == memory * 4096 // per_request
    assert ds["attention_kind"] == "MLA" and ds["bytes_per_token"] == 70_272
    assert ds["max_tokens"] == memory // 70_272 and ds["max_requests"] == memory // (4096 * 70_272)
    assert (ds["context"], ds["memory_gib"], ds["dtype"]) == (4096, 80, "bfloat16")
    assert [r["model"] for r in kv_models_table()] == list_specs()


@pytest.mark.parametrize("kwargs,match", [({"memory_gib": 0}, "memory_gib"), ({"context": 0}, "context"),
                                          ({"dtype": "int3"}, "dtype")])
def test_kv_models_table_names_the_bad_argument(kwargs, match):
    from paged_lab.kv_math import kv_models_table

    with pytest.raises(ValueError, match=match):
        kv_models_table(["gpt-oss-20b"], **kwargs)
    with pytest.raises(KeyError, match="gpt-9"):
        kv_models_table(["gpt-9"])


def test_capacity_plan_counts_what_a_sliding_window_keeps():
    s = get_spec("gpt-oss-20b")
    plan = plan_capacity(s, 80 * kv_math.GB, seq_len=4096, weight_dtype="fp8")
    per_request = (12 * 4096 + 12 * 128) * 2048
    assert plan.kv_budget_bytes == 80 * kv_math.GB - 21_000_000_000
    assert plan.max_seqs == plan.kv_budget_bytes // per_request
    assert plan.max_tokens == plan.kv_budget_bytes * 4096 // per_request


def test_kv_bytes_per_token_per_gpu_under_tensor_parallelism():
    """vLLM's ModelConfig.get_num_kv_heads: max(1, num_kv_heads // tp) KV heads per GPU, MLA's one
    latent on every GPU. At TP=8 Llama-3.1-70B's 8 KV heads are one per GPU, so it costs less per GPU
    than DeepSeek-V3, whose latent is not split: the per-model order flips."""
    from paged_lab.kv_math import kv_bytes_per_token

    assert kv_bytes_per_token("llama-3.1-70b", "bf16") == 327_680
    per_gpu = kv_bytes_per_token("llama-3.1-70b", "bf16", tensor_parallel_size=8)
    assert per_gpu == 2 * 80 * 1 * 128 * 2 == 40_960
    assert kv_bytes_per_token("deepseek-v3", "bf16", tensor_parallel_size=8) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token("llama-3.1-70b", "bf16", tensor_parallel_size=16) == 40_960   # replicated
    assert kv_bytes_per_token("falcon-7b", "bf16", tensor_parallel_size=4) == kv_bytes_per_token("falcon-7b")
    assert kv_bytes_per_token("llama-3.1-8b", "bf16", tensor_parallel_size=2) * 2 == kv_bytes_per_token(
        "llama-3.1-8b")
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        kv_bytes_per_token("llama-3.1-8b", tensor_parallel_size=0)


def test_layer_group_split_is_vllms_group_arithmetic():
    """_get_kv_cache_groups_uniform_page_size: the smallest kind's count, unless none has 1.5x it."""
    from paged_lab.kv_math import layer_group_split

    assert layer_group_split({"full_attention": 10, "sliding_attention": 52}) == (
        10, {"full_attention": 1, "sliding_attention": 6})                      # gemma-3-27b: 8 padding
    assert layer_group_split({"full_attention": 13, "sliding_attention": 12}) == (
        13, {"full_attention": 1, "sliding_attention": 1})                      # gpt-oss + eagle: 13 each
    assert layer_group_split({"full_attention": 80, "sliding_attention": 0}) == (80, {"full_attention": 1})
    with pytest.raises(ValueError, match="layers_per_kind"):
        layer_group_split({"full_attention": 0})
