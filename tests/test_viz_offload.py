"""viz/offload.py: where a returning request's blocks come from, drawn from counts a run reports."""

import pytest

from paged_lab.memory.offload.connector import blocks_to_load
from paged_lab.viz.offload import block_sources, fig_tier_hit


def test_sources_are_gpu_then_tier_then_computed():
    assert block_sources(30, 4, 8, 12) == ["gpu"] * 2 + ["tier"] * 3 + ["compute"] * 3
    assert block_sources(8, 4, 0, 8) == ["tier", "tier"]
    loaded = blocks_to_load(30, 4, 2, [True] * 4 + [False] + [True] * 2)  # a gap ends the tier's hit
    assert loaded == [2, 3] and block_sources(30, 4, 8, 4 * len(loaded)).count("tier") == 2


@pytest.mark.parametrize("args, word", [((30, 4, 6, 0), "gpu_hit_tokens"),
                                        ((30, 4, 0, -4), "tier_hit_tokens"), ((8, 4, 8, 4), "num_tokens")])
def test_bad_counts_name_the_argument(args, word):
    with pytest.raises(ValueError, match=word):
        block_sources(*args)


def test_the_figure_has_one_trace_per_source_and_every_block():
    rows = [("no tier", block_sources(30, 4, 8, 0)), ("tier", block_sources(30, 4, 8, 12))]
    fig = fig_tier_hit(rows, block_size=4)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"GPU prefix cache", "loaded from the CPU tier", "computed"}
    assert sum(len(t.x) for t in fig.data) == 16
    assert list(by_name["loaded from the CPU tier"].x) == [2, 3, 4]
    assert list(by_name["loaded from the CPU tier"].y) == ["tier"] * 3
    with pytest.raises(ValueError, match="rows"):
        fig_tier_hit([], 4)
