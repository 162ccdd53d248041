"""viz.kv_models: the bytes-per-token bars of notebook 08 (KV memory in today's models)."""

from __future__ import annotations

import pytest

from paged_lab.kv_math import kv_models_table
from paged_lab.viz import i18n
from paged_lab.viz.kv_models import kv_per_token_figure


def test_one_bar_per_model_in_kib_per_token_at_the_context():
    rows = kv_models_table(["llama-3.1-8b", "gpt-oss-20b"], context=4096)
    fig = kv_per_token_figure(rows)
    (bar,) = fig.data
    assert list(bar.y) == ["llama-3.1-8b", "gpt-oss-20b"]
    # Llama-3.1-8B: 2 x 32 layers x 8 heads x 128 x 2 bytes; gpt-oss-20b: half its layers keep 128 tokens
    gpt = (12 * 4096 + 12 * 128) * (2 * 8 * 64 * 2) / 4096
    assert list(bar.x) == [2 * 32 * 8 * 128 * 2 / 1024, gpt / 1024]
    assert fig.layout.xaxis.type == "linear"  # 128 vs 24.75 KiB: a linear axis still reads
    assert fig.layout.title.text == "KV cache per token at 4,096 tokens of context (bfloat16)"
    assert "12 of 24 layers keep only the last 128 tokens" in bar.hovertext[1]


def test_the_axis_stays_linear_when_the_bars_are_far_apart():
    """A log axis made 512 KiB against 128 look like 1.4 times, with cluttered minor ticks: the ratio
    is the lesson, so the axis is linear, and the short bar keeps its number."""
    rows = kv_models_table(["llama-2-7b", "llama-3.1-70b", "falcon-7b"])  # 512, 320 and 8 KiB a token
    fig = kv_per_token_figure(rows)
    assert fig.layout.xaxis.type == "linear" and fig.layout.xaxis.title.text == "KiB per token"
    assert fig.layout.xaxis.rangemode == "tozero"  # bar lengths are proportional to the bytes
    bar = fig.data[0]
    assert bar.x[0] / bar.x[2] == 64 and bar.text[2].startswith("8.0 KiB")


def test_colours_follow_the_attention_kind():
    rows = kv_models_table(["deepseek-v3", "llama-2-7b", "llama-3.1-8b", "falcon-7b"])
    colours = list(kv_per_token_figure(rows).data[0].marker.color)
    assert len(set(colours)) == 4  # MLA, MHA, GQA, MQA each their own


def test_bad_rows_are_named():
    with pytest.raises(ValueError, match="rows must hold at least one model"):
        kv_per_token_figure([])
    mixed = kv_models_table(["llama-3.1-8b"], context=1024) + kv_models_table(["llama-3.1-8b"], context=2048)
    with pytest.raises(ValueError, match="one context and one dtype"):
        kv_per_token_figure(mixed)


def test_every_word_of_the_figure_is_translated():
    i18n.use("zh-TW")
    try:
        shown = i18n.figure(kv_per_token_figure(kv_models_table()))
        assert not i18n.missing(), i18n.missing()
        assert "每個 token 的 KiB" in shown.layout.xaxis.title.text
    finally:
        i18n.use("en")


def test_notebook_01s_readout_counts_each_requests_window_once():
    from paged_lab.viz.kv import capacity_readout

    # gpt-oss-20b, 32 requests of 4,096 tokens: each keeps 4,096 tokens in 12 layers, 128 in the other 12
    need = 32 * (12 * 4096 + 12 * 128) * (2 * 8 * 64 * 2)
    line = capacity_readout("gpt-oss-20b", "bfloat16", 4096, 32)
    assert f"× {need / (32 * 4096):,.0f} B/token" in line and f"<b>{need / 1e9:,.2f} GB</b> of KV" in line
