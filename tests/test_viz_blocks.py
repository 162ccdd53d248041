"""Figures for block tables, copy-on-write and prefix sharing: pure functions over real state."""

import pytest

from paged_lab.memory import BlockManager, replay
from paged_lab.memory.scenarios import (
    parallel_sampling,
    prefix_sharing_summary,
    random_requests,
    shared_prefix,
)
from paged_lab.viz import blocks as V


def seed_run():
    """The story's walkthrough: the free queue hands out 7, 1, 3 to a 7-token prompt that grows to 9 (vLLM
    V1 reuses the most recently freed block first, so block 7's request finishes last)."""
    bm = BlockManager(8, 4)
    for i in range(8):
        bm.allocate(f"w{i}", [0])
    for i in (6, 5, 4, 2, 0, 3, 1, 7):
        bm.free(f"w{i}")
    bm.allocate("A", list(range(1, 8)))
    bm.append_token("A", 8)
    bm.append_token("A", 9)
    return bm


def pool_labels(fig):
    return next(t for t in fig.data if t.name == "pool").text


def table_labels(fig):
    return next(t for t in fig.data if t.name == "tables").text


def test_block_tables_draws_the_table_and_every_physical_block():
    bm = seed_run()
    fig = V.fig_block_tables(bm, 4)
    assert len(pool_labels(fig)) == 8
    assert table_labels(fig) == ("<b>A</b>: [7, 1, 3]",)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    assert len(arrows) == 3  # one per table entry
    # blocks 7 and 1 are full (one coloured rect each, full width); block 3 holds 1 of 4 tokens
    coloured = [sh for sh in fig.layout.shapes if sh.type == "rect" and sh.fillcolor not in ("white",)]
    widths = sorted(round(sh.x1 - sh.x0, 2) for sh in coloured)
    assert widths.count(0.25) == 2  # logical L2 and physical block 3: 1 token of 4
    assert "3 of 8 blocks used" in fig.layout.title.text


def test_shared_blocks_show_their_refcount():
    bm = BlockManager(8, 4)
    bm.allocate("p", list(range(6)))
    bm.fork("p", "c")
    fig = V.fig_block_tables(bm, 4)
    labels = pool_labels(fig)
    assert labels[0] == "<b>0</b><br>x2" and labels[1] == "<b>1</b><br>x2"
    # shared blocks have their own fill (not the first owner's colour) and a legend entry for it
    fills = {sh.fillcolor for sh in fig.layout.shapes if sh.type == "rect" and sh.x0 >= 0 and sh.fillcolor != "white"}
    assert V.SHARED_FILL in fills
    assert "shared (x refcount)" in [t.name for t in fig.data]
    with pytest.raises(ValueError, match="block_size"):
        V.fig_block_tables(bm, 0)


def test_event_step_replays_the_log():
    bm = seed_run()
    n = len(bm.events)
    first = V.fig_event_step(bm.events, 8, 4, 0)
    assert "empty pool" in first.layout.title.text and table_labels(first) == ()
    last = V.fig_event_step(bm.events, 8, 4, n)
    assert f"after event {n - 1} (of 0–{n - 1})" in last.layout.title.text  # the printed log's 0-based number
    assert "token #9 into block 3" in last.layout.title.text and bm.events[-1].index == n - 1
    assert table_labels(last) == ("<b>A</b>: [7, 1, 3]",)
    red = [sh for sh in last.layout.shapes if getattr(sh.line, "color", None) == "red"]
    assert len(red) == 1  # the block the last event touched
    with pytest.raises(ValueError, match="step"):
        V.fig_event_step(bm.events, 8, 4, n + 1)
    slider = V.event_slider(bm.events, after=n - 1)
    assert slider.value == n and slider.label == str(n - 1) and slider.options[0] == ("start", 0)
    with pytest.raises(ValueError, match="after"):
        V.event_slider(bm.events, after=n)
    # colours stay put across steps: A has the same colour at every step
    assert V.seq_order(bm.events)[-1] == "A"


def test_refcounts_and_free_queue():
    bm = parallel_sampling(3, list(range(6)), new_tokens=0, block_size=4)
    fig = V.fig_refcounts(bm)
    assert list(fig.data[0].y[:2]) == [3, 3]
    bm2 = BlockManager(4, 2, enable_prefix_caching=True)
    bm2.allocate("a", [1, 2, 3])
    bm2.free("a")
    q = V.fig_free_queue(bm2)
    # a's partly filled tail (no hash) is reused first, then the never-used blocks; a's cached block waits last
    assert list(q.data[0].text) == ["1", "2", "3", "0"]
    assert q.data[0].marker.color[-1] == V.CACHED and q.data[0].marker.color[0] == V.FREE


def test_prefix_sharing_numbers_come_from_the_block_manager():
    s = prefix_sharing_summary(k=4, system_len=48, user_len=12, block_size=16)
    # 60 tokens -> 4 blocks each without sharing; with sharing 3 system blocks once + 1 own block each
    assert s["blocks_without_sharing"] == 16 and s["blocks_with_sharing"] == 3 + 4
    assert s["prefix_cache_hits"] == 3 * 48 and s["prefix_cache_queries"] == 4 * 60
    fig = V.fig_prefix_sharing(k=4, system_len=48, block_size=16, user_len=12)
    assert list(fig.data[0].text) == ["16 blocks", "7 blocks"] and list(fig.data[0].y) == [1, 7 / 16]
    # the axis stays put when a slider moves: only the bars change
    other = V.fig_prefix_sharing(k=64, system_len=512, block_size=1, user_len=12)
    assert other.layout.yaxis.range == fig.layout.yaxis.range and max(other.data[0].y) == 1
    assert "hit rate 60%" in fig.layout.title.text


def test_bigger_blocks_share_less():
    fig = V.fig_sharing_vs_block_size(system_len=50, block_sizes=(4, 16, 32, 64), k=4)
    assert list(fig.data[0].y) == [48, 48, 32, 0]
    hit_rates = list(fig.data[1].y)
    assert hit_rates == sorted(hit_rates, reverse=True)


def test_block_size_tradeoff():
    rows = V.block_size_tradeoff([5, 9, 16], [1, 4, 16])
    assert [r["wasted_slots"] for r in rows] == [0, 3 + 3 + 0, 11 + 7 + 0]
    assert [r["table_entries"] for r in rows] == [30, 2 + 3 + 4, 3]
    # The real BlockManager agrees with the arithmetic the kernels notebook and its figure use.
    from paged_lab.kernels.tradeoff import block_size_cost

    for r in rows:
        cost = block_size_cost([5, 9, 16], r["block_size"])
        assert (r["wasted_slots"], r["table_entries"]) == (cost.wasted_slots, cost.table_entries)


def test_playground_follows_the_sliders():
    fig = V.block_table_playground(block_size=4, num_requests=6)
    bm, turned_away = random_requests(6, 4, num_blocks=32, seed=0)
    assert len(table_labels(fig)) == len(bm.seq_ids)
    assert f"{bm.num_used_blocks} blocks" in fig.layout.title.text
    big = V.block_table_playground(block_size=16, num_requests=60, num_blocks=8)
    assert "turned away" in big.layout.title.text
    assert not [a for a in big.layout.annotations if a.showarrow] or len(
        table_labels(big)) <= 12  # arrows only while they stay readable


def test_scenarios_are_replayable():
    for bm in (shared_prefix(3, 10, 3, 4), parallel_sampling(3, [1, 2, 3, 4, 5], 3, 4)):
        assert replay(bm.events, bm.num_blocks) == bm.state()
        bm.check_invariants()
    with pytest.raises(ValueError, match="k >= 1"):
        shared_prefix(0, 4, 4, 4)


def test_prefix_sharing_readout_says_what_was_saved_and_why():
    text = V.prefix_sharing_readout(None, k=8, system_len=48, block_size=16)
    assert text.startswith("32 → <b>11 blocks</b>") and "3 full block(s) are stored once instead of 8 times (21 saved)" in text
    assert "not shared" not in text  # 48 = 3 x 16: nothing left over
    odd = V.prefix_sharing_readout(None, k=8, system_len=50, block_size=16)
    assert "its last 2 token(s)" in odd


def test_block_table_readout_counts_the_empty_slots_of_the_figure():
    from paged_lab.memory.scenarios import random_requests

    bm, _ = random_requests(6, 4, num_blocks=32, seed=0)
    empty = bm.num_used_blocks * 4 - sum(bm.num_tokens(s) for s in bm.seq_ids)
    text = V.block_table_readout(None, block_size=4, num_requests=6, seed=0)
    assert f"<b>{empty} empty slots</b>" in text and f"at most {len(bm.seq_ids) * 3})" in text
    assert empty <= len(bm.seq_ids) * 3
    assert "turned away" in V.block_table_readout(None, block_size=16, num_requests=30, seed=0, num_blocks=4)


def test_block_labels_stay_readable_and_arrows_avoid_the_pool_rows():
    bm = parallel_sampling(3, list(range(10)), 2, 4, num_blocks=16)
    fig = V.fig_block_tables(bm, 4, cols=8)
    pool = next(t for t in fig.data if t.name == "pool")
    inks = dict(zip(pool.text, pool.textfont.color))
    assert inks["<b>0</b><br>x3"] == "white" and inks["9"] == "#222222"  # white on a fill, dark on white
    boxes = [sh for sh in fig.layout.shapes if sh.type == "rect" and sh.line.width and sh.fillcolor == "white"
             and sh.x0 > 5]  # the pool's block outlines
    paths = [sh for sh in fig.layout.shapes if sh.type == "path"]
    assert len(paths) == sum(len(bm.block_table(s)) for s in bm.seq_ids)
    for path in paths:  # the last leg runs horizontally in a gap: no block's box spans its height
        (x1, y1), (x2, y2) = [tuple(map(float, p.split(","))) for p in path.path.split(" L ")[1:]]
        assert y1 == y2
        assert not any(b.y0 < y1 < b.y1 and b.x0 < max(x1, x2) and b.x1 > min(x1, x2) for b in boxes)
