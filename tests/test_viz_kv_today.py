"""paged_lab.viz.kv_today: notebook 08's playground figure and readout, and section 3's picture.

Expected values are counted by hand from the shapes in each test (blocks of the request, blocks wholly
before the sliding window, bytes of one layer's block), not read back from the code under test."""

from __future__ import annotations

import pytest

from paged_lab import kv_math
from paged_lab.kv_math import GB, ModelSpec
from paged_lab.viz import i18n
from paged_lab.viz.kv_today import (
    block_points,
    fig_blocks_held,
    fig_kv_today,
    kv_today_readout,
    request_kv,
    requests_that_fit,
    with_sliding_window,
)

# 4 layers, alternating full and sliding (window 8), 2 KV heads of 16: a K and a V of 2 x 16 numbers a layer
HYBRID = ModelSpec("tiny-hybrid", num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
                   vocab_size=100, num_params=1000, sliding_window=8,
                   layer_types=("sliding_attention", "full_attention") * 2)
FULL = ModelSpec("tiny-full", num_layers=4, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
                 vocab_size=100, num_params=1000)
MLA = ModelSpec("tiny-mla", num_layers=3, num_heads=4, num_kv_heads=4, head_dim=16, hidden_size=64,
                vocab_size=100, num_params=1000, kv_lora_rank=32, qk_rope_head_dim=8)


def test_a_request_holds_every_block_in_full_layers_and_the_last_ones_in_sliding_layers():
    r = request_kv(HYBRID, 20, "bfloat16", block_size=4)
    # 20 tokens in blocks of 4: 5 blocks; 20 - 8 + 1 = 13 tokens are out of the sliding window, 3 whole
    # blocks among them go back, 2 stay
    assert (r.blocks_per_full_layer, r.blocks_per_sliding_layer) == (5, 2)
    assert (r.num_full_layers, r.num_sliding_layers) == (2, 2)
    page = 4 * 2 * (16 + 16) * 2          # block_size x KV heads x (K + V head_dim) x bf16 bytes
    assert r.block_bytes == page
    assert r.layer_blocks == 2 * 5 + 2 * 2 and r.kv_bytes == 14 * page
    assert r.layer_blocks_all_full == 4 * 5 and r.kv_bytes_all_full == 20 * page


def test_short_requests_and_models_without_sliding_layers_hold_everything():
    assert request_kv(HYBRID, 6, "bfloat16", block_size=4).blocks_per_sliding_layer == 2   # all inside W
    r = request_kv(FULL, 20, "fp8", block_size=4)
    assert (r.num_sliding_layers, r.layer_blocks, r.layer_blocks_all_full) == (0, 20, 20)
    assert r.block_bytes == 4 * 2 * 32 * 1                                                 # fp8: 1 byte


def test_an_mla_block_holds_the_latent_and_no_v():
    r = request_kv(MLA, 10, "bfloat16", block_size=4)
    assert r.block_bytes == 4 * (32 + 8) * 2 and r.layer_blocks == 3 * 3


def test_the_sliding_window_changes_only_sliding_layers():
    assert with_sliding_window(FULL, 64) is FULL and with_sliding_window(HYBRID, None) is HYBRID
    wider = with_sliding_window(HYBRID, 16)
    assert wider.sliding_window == 16 and wider.layer_types == HYBRID.layer_types
    # 20 tokens, window 16: 5 tokens out of it, 1 whole block freed, 4 of 5 held
    assert request_kv(HYBRID, 20, "bfloat16", 4, sliding_window=16).blocks_per_sliding_layer == 4
    with pytest.raises(ValueError, match="sliding_window"):
        with_sliding_window(HYBRID, 0)
    with pytest.raises(ValueError, match="num_tokens"):
        request_kv(HYBRID, 0)


def test_fig_blocks_held_draws_one_line_per_series():
    fig = fig_blocks_held({"full": [1, 1, 2], "sliding": [1, 1, 1]}, first_token=10)
    assert [t.name for t in fig.data] == ["full", "sliding"]
    assert list(fig.data[0].x) == [10, 11, 12] and list(fig.data[0].y) == [1, 1, 2]
    with pytest.raises(ValueError, match="series is empty"):
        fig_blocks_held({})
    with pytest.raises(ValueError, match="3 values for 2 token counts"):
        fig_blocks_held({"a": [1, 2, 3]}, x=[1, 2])


def test_the_playground_figure_ends_at_the_request_it_describes():
    fig = fig_kv_today("gpt-oss-20b", "bfloat16", 4096, 128, 80)
    assert [t.name for t in fig.data] == ["as built", "every layer full"]
    spec = kv_math.get_spec("gpt-oss-20b")
    last_full = kv_math.cdiv(4096, 16) * spec.num_layers
    assert fig.data[1].y[-1] == last_full and fig.data[0].y[-1] < last_full
    plain = fig_kv_today("llama-3.1-8b", "fp8", 4096, 128, 80)  # no sliding layers: the two lines are one
    assert [t.name for t in plain.data] == ["as built", "every layer full"]  # the legend keeps its size
    assert list(plain.data[0].y) == list(plain.data[1].y) and plain.data[1].line.dash == "dot"


def test_the_playground_figure_holds_still_while_the_controls_move():
    """The browser test moves every control and requires the same figure size and axes: the model
    dropdown rescaled the y axis; now no control moves an axis."""
    a = fig_kv_today("gpt-oss-20b", "bfloat16", 4096, 128, 80).layout
    b = fig_kv_today("gpt-oss-20b", "bfloat16", 65536, 1024, 80).layout
    assert (a.xaxis.range, a.yaxis.range, a.title.text) == (b.xaxis.range, b.yaxis.range, b.title.text)
    assert a.xaxis.type == a.yaxis.type == "log"
    most = max(kv_math.get_spec(m).num_layers for m in kv_math.list_specs())
    assert 10 ** a.yaxis.range[1] >= most * kv_math.cdiv(131072, 16)   # room for every layer full at the end
    for model in kv_math.list_specs():
        for dtype, ctx, window, gpu in (("fp8", 1024, 4096, 16), ("bfloat16", 131072, 128, 141)):
            other = fig_kv_today(model, dtype, ctx, window, gpu).layout
            assert (other.xaxis.range, other.yaxis.range) == (a.xaxis.range, a.yaxis.range), model
    mine = fig_kv_today("llama-3.1-8b", "bfloat16", 4096, 128, 80, models=["llama-3.1-8b", "gpt-oss-20b"])
    assert 10 ** mine.layout.yaxis.range[1] >= 32 * kv_math.cdiv(131072, 16)


def test_the_staircase_is_the_block_sizes_whatever_the_context():
    """08's first step sat at ~33 tokens with the context at 8,192 and ~210 at 51,200: the curve was
    sampled evenly over the context. Drawn at block boundaries, its first step is at 17 tokens (the
    17th opens block 2), its steps are the ones the manager takes, and the context only ends it."""
    spec = kv_math.get_spec("gpt-oss-20b")
    figs = {ctx: fig_kv_today("gpt-oss-20b", "bfloat16", ctx, 128, 80) for ctx in (8192, 51200, 131072)}
    for ctx, fig in figs.items():
        xs, ys = list(fig.data[0].x), list(fig.data[0].y)
        assert fig.data[0].line.shape == "hv" and xs[-1] == ctx
        first_step = next(x for x, y in zip(xs, ys) if y != ys[0])
        assert first_step == 17 and ys[0] == spec.num_layers
        short = [(x, y) for x, y in zip(xs, ys) if x <= 4096]
        assert short == [(x, y) for x, y in zip(figs[8192].data[0].x, figs[8192].data[0].y) if x <= 4096]
        assert len(xs) < 1500  # a re-draw per slider step stays small
    xs, ys = list(figs[8192].data[0].x), list(figs[8192].data[0].y)
    for n in range(1, 1025):  # exact where a step can be seen: the value at every token count
        held = ys[max(i for i, x in enumerate(xs) if x <= n)]
        assert held == request_kv("gpt-oss-20b", n, "bfloat16", 16, sliding_window=128).layer_blocks, n
    assert block_points(40, 16) == [1, 17, 33, 40]
    assert block_points(40, 16, (1, 15)) == [1, 15, 17, 31, 33, 40]
    with pytest.raises(ValueError, match="block_size"):
        block_points(40, 0)
    with pytest.raises(ValueError, match="max_context"):
        fig_kv_today("gpt-oss-20b", "bfloat16", 4096, 128, 80, max_context=2048)


def test_requests_that_fit_divide_what_the_weights_leave():
    spec = kv_math.get_spec("gpt-oss-20b")
    built, full = requests_that_fit("gpt-oss-20b", "bfloat16", 8192, 80)
    budget = 80 * GB - spec.num_params * 2                   # bf16 weights off the top
    page = 16 * spec.num_kv_heads * 2 * spec.head_dim * 2    # one layer's block of 16, K and V, bf16
    blocks = 8192 // 16
    held = kv_math.window_blocks_held(8192, 16, spec.sliding_window)
    assert full == budget // (spec.num_layers * blocks * page)
    assert built == budget // ((spec.num_full_layers * blocks + spec.num_sliding_layers * held) * page)
    assert built > full


def test_the_readout_says_why(monkeypatch):
    lines = kv_today_readout("gpt-oss-20b", "bfloat16", 8192, 128, 80)
    spec = kv_math.get_spec("gpt-oss-20b")
    per_token = spec.kv_bytes_per_token("bfloat16")
    assert lines[0].startswith(f"<b>{per_token:,} B per token</b> (GQA: 2 × 24 layers")
    assert "12 sliding-window layers (window 128)" in lines[1] and "if every layer were full" in lines[2]
    big = kv_today_readout("deepseek-v3", "fp8", 4096, 128, 80)
    assert big[0].startswith("<b>") and "MLA: 61 layers × one latent of 512 + 64 numbers × 1 B" in big[0]
    assert "do not fit on one 80 GB GPU" in big[2]
    assert "changes nothing" in kv_today_readout("llama-3.1-8b", "bfloat16", 4096, 512, 80)[1]


@pytest.mark.parametrize("model", ["gpt-oss-20b", "deepseek-v3", "llama-3.1-8b"])
def test_the_readout_and_the_figure_are_translated(model):
    i18n.use("zh-TW")
    try:
        for line in kv_today_readout(model, "fp8", 8192, 512, 24):
            assert i18n.t(line) != line
        i18n.figure(fig_kv_today(model, "bfloat16", 8192, 512, 24))
        assert i18n.missing() == []
    finally:
        i18n.use("en")
