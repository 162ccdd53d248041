"""viz.kernels: the pictures of notebook 06's steps (masked tail, online softmax, split-KV merge),
the pool's legend and the block-size trade-off's axes; and the numbers the pictures draw
(``kernels.stepwise``: the online softmax's running values, each split's lse and merge weight)."""

import math
import random

import pytest
import torch

from paged_lab.kernels import stepwise
from paged_lab.viz import kernels as K


def block_scores(seed: int = 0, sizes=(8, 8, 8, 8, 5)) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.gauss(0, 2) for _ in range(n)] for n in sizes]


def test_last_block_mask_marks_exactly_the_empty_tail():
    fig = K.fig_last_block_mask(37, 8, table=[6, 2, 9, 0, 4])
    z = fig.data[0].z
    assert len(z) == 5 and sum(row.count(0) for row in z) == 3 == 5 * 8 - 37
    assert list(z[4]) == [1, 1, 1, 1, 1, 0, 0, 0]
    assert list(fig.data[0].y)[4] == "logical 4 → block 4" and list(fig.data[0].y)[0] == "logical 0 → block 6"
    assert "3 empty slots" in fig.layout.title.text
    assert [t.name for t in fig.data[1:]] == ["token position: load it, score it (37)",
                                              "empty slot: load 0, score −∞ (3)"]
    assert "0 empty slots" in K.fig_last_block_mask(16, 8).layout.title.text
    with pytest.raises(ValueError, match="table lists 2 blocks"):
        K.fig_last_block_mask(37, 8, table=[1, 2])
    with pytest.raises(ValueError, match="context_len"):
        K.fig_last_block_mask(0, 8)


def test_online_softmax_trace_ends_at_the_full_softmax_denominator():
    scores = block_scores()
    trace = stepwise.online_softmax_trace(scores)
    flat = [s for b in scores for s in b]
    assert trace[-1]["max"] == max(flat)
    assert trace[-1]["sum"] == pytest.approx(sum(math.exp(s - max(flat)) for s in flat))
    for prev, now in zip(trace, trace[1:]):
        assert now["max"] >= prev["max"]
        assert (now["rescale"] < 1) == (now["max"] > prev["max"])  # rescaled exactly when the max rose
    # the same running values as the torch loop of the notebook's step 3
    t = torch.tensor(flat)
    assert trace[-1]["sum"] == pytest.approx(float(torch.exp(t - t.max()).sum()), rel=1e-5)
    with pytest.raises(ValueError, match=r"block_scores\[1\] is empty"):
        stepwise.online_softmax_trace([[1.0], []])


def test_online_softmax_figure_shows_every_score_and_each_rescale():
    scores = block_scores(seed=3)
    fig = K.fig_online_softmax(scores)
    dots = [t for t in fig.data if t.name and t.name.startswith("block ")]
    assert sum(len(t.y) for t in dots) == 37
    bars = next(t for t in fig.data if t.name == "l after the block")
    trace = stepwise.online_softmax_trace(scores)
    assert list(bars.y) == [r["sum"] for r in trace]
    assert sum(1 for x in bars.text if x) == sum(1 for r in trace if r["rescale"] < 1)


def test_split_weights_are_the_merge_weights():
    scores = block_scores(seed=1)
    parts = [range(0, 2), range(2, 4), range(4, 5), range(5, 5)]
    lse = stepwise.partition_lse(scores, parts)
    assert lse[-1] == -math.inf
    w = stepwise.split_weights(lse)
    assert sum(w) == pytest.approx(1.0) and w[-1] == 0.0
    # weight = partition's share of sum(exp(score)) over all scores
    total = sum(math.exp(s) for b in scores for s in b)
    assert w[0] == pytest.approx(sum(math.exp(s) for b in scores[:2] for s in b) / total)
    fig = K.fig_split_merge(lse, ["0-1", "2-3", "4", "(empty)"])
    assert list(fig.data[0].y) == pytest.approx([100 * x
                                                 for x in w]) and fig.data[0].text[-1].startswith("empty")
    with pytest.raises(ValueError, match="no finite"):
        stepwise.split_weights([-math.inf])
    with pytest.raises(ValueError, match="same length"):
        K.fig_split_merge(lse, ["a"])


def test_pool_heatmap_has_a_legend_entry_per_colour():
    fig = K.fig_paged_pool([[2, 0], [1, 3]], [10, 3], 5, 8)
    names = [t.name for t in fig.data if t.showlegend is not False and t.type == "scatter"]
    assert names == ["sequence 0", "sequence 1", "empty slot of a last block (pale)", "free block"]


def test_tradeoff_panels_have_labelled_ticks_and_no_twin_axes():
    lens = K.sample_context_lens(64, 512)
    fig = K.fig_block_size_tradeoff(lens, highlight=16)
    assert fig.layout.xaxis2.anchor == "y2" and "overlaying" not in fig.layout.yaxis2.to_plotly_json()
    assert list(fig.layout.yaxis.tickvals) == [1, 10, 100, 1000] and fig.layout.yaxis.minor.ticks == ""
    assert list(fig.layout.xaxis.ticktext) == [str(b) for b in K.DEFAULT_BLOCK_SIZES]
    assert fig.layout.yaxis2.range[0] == 0 and fig.layout.yaxis2.range[1] % 10 == 0
    assert fig.layout.yaxis2.range[1] >= max(fig.data[1].y)
    with pytest.raises(ValueError, match="block_sizes"):
        K.fig_block_size_tradeoff(lens, block_sizes=())


def test_tradeoff_playground_keeps_its_axes_while_the_sliders_move():
    bounds = {"block_size": (1, 256), "mean_context": (16, 8192), "num_seqs": (1, 512)}
    figs = [K.tradeoff_playground(b, m, n, bounds=bounds) for b, m, n in ((16, 512, 64), (256, 16, 1),
                                                                          (1, 8192, 512))]
    assert len({(tuple(f.layout.yaxis.range), tuple(f.layout.yaxis2.range), f.layout.height)
                for f in figs}) == 1
    lo, hi = figs[0].layout.yaxis.range
    for f in figs:
        assert all(10 ** lo <= y <= 10 ** hi for y in f.data[0].y) and max(f.data[1].y) <= 100
    assert K.tradeoff_playground(16, 512, 64).layout.yaxis.range is None  # without bounds: fitted
