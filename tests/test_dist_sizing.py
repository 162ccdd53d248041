"""paged_lab.engine.dist.sizing and viz.dist: KV per GPU under tensor parallelism (vLLM's rule, counted by
hand here from the models' shapes), what a node holds, and the bytes a prefill/decode handoff moves."""

from __future__ import annotations

import pytest

from paged_lab.engine.dist import sizing
from paged_lab.kv_math import GB
from paged_lab.viz.dist import fig_kv_per_gpu, kv_per_gpu_readout


def test_gqa_heads_split_and_mla_latent_stays_whole_so_the_order_flips_at_tp_8():
    # Llama-3.1-70B: 80 layers x 8 KV heads x 128 x (K + V) x 2 B; DeepSeek-V3: 61 layers x 576 x 2 B
    assert sizing.kv_bytes_per_token_per_gpu("llama-3.1-70b", "bfloat16", 1) == 80 * 8 * 128 * 2 * 2
    assert sizing.kv_bytes_per_token_per_gpu("llama-3.1-70b", "bfloat16", 8) == 80 * 1 * 128 * 2 * 2 == 40_960
    assert sizing.kv_bytes_per_token_per_gpu("llama-3.1-70b", "bfloat16", 16) == 40_960  # replicated past 8
    assert sizing.kv_bytes_per_token_per_gpu("deepseek-v3", "bfloat16", 8) == 61 * 576 * 2 == 70_272
    # decode context parallelism splits the tokens: 1/8 of the latent's tokens on each of 8 ranks
    assert sizing.kv_bytes_per_token_per_gpu("deepseek-v3", "bfloat16", 8, 8) == 70_272 / 8
    with pytest.raises(ValueError, match="decode_context_parallel_size=3 must divide tensor_parallel_size=8"):
        sizing.kv_bytes_per_token_per_gpu("deepseek-v3", "bfloat16", 8, 3)


def test_tp_table_counts_weights_share_budget_and_requests():
    rows = sizing.tp_table(["llama-3.1-70b"], [1, 8], gpu_gb=80, context=4096, gpu_memory_utilization=0.92)
    one, eight = rows
    weights = 70_553_706_496 * 2  # bf16
    assert one["weight_bytes_per_gpu"] == weights and one["requests_per_node"] == 0  # 141 GB > 80 GB
    assert eight["weight_bytes_per_gpu"] == weights / 8
    budget = 80 * GB * 0.92 - weights / 8
    assert eight["kv_budget_bytes_per_gpu"] == pytest.approx(budget)
    assert eight["requests_per_instance"] == int(budget // (40_960 * 4096)) == eight["requests_per_node"]
    two = sizing.tp_table(["llama-3.1-70b"], [2], gpu_gb=141, weight_dtype="fp8")[0]
    assert two["requests_per_node"] == 4 * two["requests_per_instance"] > 0  # 4 instances of 2 GPUs


def test_handoff_moves_the_whole_prompts_kv_and_times_it_per_link():
    (row,) = sizing.handoff_table(["llama-3.1-8b"], prompt_len=1000, links={"slow": 1.0}, gpu_tflops=100,
                                  mfu=0.5)
    moved = 1000 * 32 * 8 * 128 * 2 * 2  # tokens x layers x KV heads x head_dim x (K + V) x bf16
    assert row["kv_bytes"] == moved and row["slow s"] == moved / GB
    assert row["prefill_s"] == pytest.approx(2 * 8_030_261_248 * 1000 / (100e12 * 0.5))
    (ds,) = sizing.handoff_table(["deepseek-v3"], prompt_len=1000, gpu_tflops=100, mfu=0.5)
    assert ds["prefill_s"] == pytest.approx(2 * 37e9 * 1000 / 50e12)  # its 37 B active parameters


def test_figure_and_readout_show_the_table():
    fig = fig_kv_per_gpu(["llama-3.1-70b", "deepseek-v3"], gpu_gb=141, weight_dtype="fp8",
                         highlight="deepseek-v3")
    by_name = {t.name: t for t in fig.data if t.showlegend is not False}
    assert list(by_name["llama-3.1-70b (GQA)"].y) == [327_680, 163_840, 81_920, 40_960]
    assert list(by_name["deepseek-v3 (MLA)"].y) == [70_272] * 4
    lines = kv_per_gpu_readout("deepseek-v3", 8, gpu_gb=141, weight_dtype="fp8")
    assert lines[0] == "<b>70,272 B per token on each GPU</b>" and lines[1].startswith("MLA")
    assert "per node of 8" in lines[2]
    assert "does not fit" in kv_per_gpu_readout("deepseek-v3", 1, gpu_gb=80)[2]
    assert "1/8 of them" in kv_per_gpu_readout("deepseek-v3", 8, gpu_gb=141, weight_dtype="fp8", dcp=8)[2]
