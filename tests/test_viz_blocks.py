"""Figures for block tables, copy-on-write and prefix sharing: pure functions over real state."""

import pytest

from paged_lab.memory import BlockManager, replay
from paged_lab.memory.scenarios import (
    parallel_sampling,
    prefix_sharing_summary,
    random_requests,
    shared_system_prompt,
)
from paged_lab.viz import blocks as V
from paged_lab.viz.colors import PALETTE


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
    assert table_labels(fig) == ("<span style='color:#1f77b4'>■</span> <b>A</b>: [7, 1, 3]",)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    assert len(arrows) == 3  # one per table entry
    # blocks 7 and 1 are full (a fill the size of the box); block 3 holds 1 of 4 tokens: a bar a
    # quarter of the box long along its bottom, the rest of the box a pale tint
    fills = [sh for sh in fig.layout.shapes if sh.name == "fill"]
    assert sorted(round(sh.x1 - sh.x0, 2) for sh in fills).count(0.25) == 2  # logical L2 and physical block 3
    assert all(sh.y1 - sh.y0 == pytest.approx(V.STRIP) for sh in fills if sh.x1 - sh.x0 < 1)
    assert len([sh for sh in fig.layout.shapes if sh.name == "tint"]) == 2
    assert "3 of 8 blocks used" in fig.layout.title.text


def test_shared_blocks_show_their_refcount():
    bm = BlockManager(8, 4)
    bm.allocate("p", list(range(6)))
    bm.fork("p", "c")
    fig = V.fig_block_tables(bm, 4)
    labels = pool_labels(fig)
    assert labels[0] == "<b>0</b> ×2" and labels[1] == "<b>1</b> ×2"
    # shared blocks have their own fill (not the first owner's colour) and a legend entry for it
    fills = {sh.fillcolor for sh in fig.layout.shapes if sh.name == "fill"}
    assert V.SHARED_FILL in fills
    assert "shared (× refcount)" in [t.name for t in fig.data]
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
    assert table_labels(last) == ("<span style='color:#1f77b4'>■</span> <b>A</b>: [7, 1, 3]",)
    marks = [sh for sh in last.layout.shapes if sh.name == "mark"]
    assert len(marks) == 1 and marks[0].line.dash == "dash"  # the block the last event touched
    assert not [sh for sh in last.layout.shapes if getattr(sh.line, "color", None) == "red"]
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
    # a's partly filled tail (no hash) is reused first, then the never-used blocks;
    # a's cached block waits last
    assert list(q.data[0].text) == ["1", "2", "3", "0"]
    assert q.data[0].marker.color[-1] == V.CACHED and q.data[0].marker.color[0] == V.FREE


def test_prefix_sharing_numbers_come_from_the_block_manager():
    s = prefix_sharing_summary(k=4, system_len=48, user_len=12, block_size=16)
    # 60 tokens -> 4 blocks each without sharing; with sharing 3 system blocks once + 1 own block each
    assert s["blocks_without_sharing"] == 16 and s["blocks_with_sharing"] == 3 + 4
    assert s["prefix_cache_hits"] == 3 * 48 and s["prefix_cache_queries"] == 4 * 60
    bounds = {"k": (1, 64), "system_len": (0, 512)}
    fig = V.fig_prefix_sharing(k=4, system_len=48, block_size=16, user_len=12, bounds=bounds)
    assert list(fig.data[0].text) == ["16 blocks (100%)", "7 blocks (44%)"]
    assert list(fig.data[0].y) == [100, 100 * 7 / 16]  # the share of the blocks without sharing
    assert V.fig_prefix_sharing(k=1, system_len=0, block_size=16, user_len=12).data[0].text == (
        "1 block (100%)", "1 block (100%)")
    assert "hit rate 60%" in fig.layout.title.text


def test_prefix_sharing_bars_are_linear_and_hold_still_for_every_control():
    """On a log axis 32 blocks against 11 ("66% fewer") looked like a small gap, and the axis moved
    with the block size (a dropdown). Now: a linear 0-100% axis, the same at every control value."""
    fig = V.fig_prefix_sharing(k=8, system_len=48, block_size=16)
    assert fig.layout.yaxis.type in (None, "linear") and fig.layout.yaxis.range == (0, 118)
    assert fig.data[0].y[1] == pytest.approx(100 * 11 / 32)  # the bar is a third of the other one
    seen = set()
    for k in (1, 8, 64):
        for system_len in (0, 48, 512):
            for block_size in (1, 4, 16, 64):
                other = V.fig_prefix_sharing(k=k, system_len=system_len, block_size=block_size)
                assert other.layout.yaxis.range == fig.layout.yaxis.range
                assert max(other.data[0].y) <= 100 < other.layout.yaxis.range[1]
                seen.add(tuple(other.data[0].y))
    assert len(seen) > 10  # the bars do move


def test_bigger_blocks_share_less():
    fig = V.fig_sharing_vs_block_size(system_len=50, block_sizes=(4, 16, 32, 64), k=4)
    assert list(fig.data[0].y) == [48, 48, 32, 0]
    hit_rates = list(fig.data[1].y)
    assert hit_rates == sorted(hit_rates, reverse=True)


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
    for bm in (shared_system_prompt(3, 10, 3, 4), parallel_sampling(3, [1, 2, 3, 4, 5], 3, 4)):
        assert replay(bm.events, bm.num_blocks) == bm.state()
        bm.check_invariants()
    with pytest.raises(ValueError, match="k >= 1"):
        shared_system_prompt(0, 4, 4, 4)


def test_prefix_sharing_readout_says_what_was_saved_and_why():
    text = V.prefix_sharing_readout(None, k=8, system_len=48, block_size=16)
    assert text.startswith("32 → <b>11 blocks</b>") and ("3 full block(s) are stored once instead of 8 "
                                                         "times (21 saved)") in text
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


def test_arrows_avoid_the_pool_rows():
    bm = parallel_sampling(3, list(range(10)), 2, 4, num_blocks=16)
    fig = V.fig_block_tables(bm, 4, cols=8)
    pool = next(t for t in fig.data if t.name == "pool")
    inks = dict(zip(pool.text, pool.textfont.color))
    assert inks["<b>0</b> ×3"] == "#ffffff" and inks["9"] == "#222222"  # white on a fill, dark on white
    boxes = [sh for sh in fig.layout.shapes if sh.name == "box" and sh.x0 > 5]  # the pool's block outlines
    paths = [sh for sh in fig.layout.shapes if sh.type == "path"]
    assert len(paths) == sum(len(bm.block_table(s)) for s in bm.seq_ids)
    for path in paths:  # the last leg runs horizontally in a gap: no block's box spans its height
        (x1, y1), (x2, y2) = [tuple(map(float, p.split(","))) for p in path.path.split(" L ")[2:]]
        assert y1 == y2
        assert not any(b.y0 < y1 < b.y1 and b.x0 < max(x1, x2) and b.x1 > min(x1, x2) for b in boxes)


def test_each_table_has_lines_of_its_own():
    """03's lines from the block tables to the pool met in one point left of the pool and ran along
    nearly the same lane, so they read as one line. Each table now has its own vertical line and its
    own lane: no two tables share an x or a y of their lines."""
    bm = BlockManager(num_blocks=8, block_size=4)
    for sid in ("A", "B", "C", "D"):
        bm.allocate(sid, [1, 2, 3, 4, 5])
    fig = V.fig_block_tables(bm, 4, cols=8)
    trunks, lanes = {}, {}
    for sh in (s for s in fig.layout.shapes if s.type == "path"):
        points = [tuple(map(float, p.split(","))) for p in sh.path[2:].split(" L ")]
        trunks.setdefault(sh.line.color, set()).add(points[2][0])
        lanes.setdefault(sh.line.color, set()).add(points[2][1])
    assert len(trunks) == 4 and all(len(x) == 1 for x in trunks.values())  # one vertical per table
    xs, ys = sorted(min(x) for x in trunks.values()), sorted(min(y) for y in lanes.values())
    scale = fig.layout.meta["px_per_unit"]
    assert min(b - a for a, b in zip(xs, xs[1:])) * scale >= 6  # px apart: lines a reader tells apart
    assert min(b - a for a, b in zip(ys, ys[1:])) * scale >= 3


def test_a_touched_block_wears_a_dashed_frame_not_a_request_colour():
    """07: request 3 is red, and red also outlined the blocks a step touched."""
    bm = BlockManager(num_blocks=8, block_size=2)
    bm.allocate(3, [1, 2, 3])
    fig = V.fig_block_tables(bm, 2, highlight=[0], highlight_name="dashed frame: touched")
    marks = [sh for sh in fig.layout.shapes if sh.name == "mark"]
    assert len(marks) == 1 and marks[0].line.dash == "dash" and marks[0].line.color not in PALETTE
    edges = {sh.line.color for sh in fig.layout.shapes if sh.name == "box"}
    assert "red" not in edges and PALETTE[3] not in edges
    legend = next(t for t in fig.data if t.name == "dashed frame: touched")
    assert legend.mode == "lines" and legend.line.dash == "dash"


# ---------------------------------------------------------------- labels no fill covers


def label_boxes(fig):
    """Every block label as (x0, x1, y0, y1, ink, text) in data units, at the scale the figure was
    laid out for (``layout.meta.px_per_unit``) and the label's own font size."""
    scale = fig.layout.meta["px_per_unit"]
    out = []
    for tr in fig.data:
        if tr.name not in ("pool", "logical"):
            continue
        size, inks = tr.textfont.size, tr.textfont.color
        for x, y, text, ink in zip(tr.x, tr.y, tr.text, inks):
            w, h = V._label_px(text, size)
            out.append((x - w / 2 / scale, x + w / 2 / scale, y - h / 2 / scale, y + h / 2 / scale, ink,
                        text))
    return out


def uncovered(fig) -> list[str]:
    """What is wrong with the block labels of ``fig``: a label part on and part off a fill (the fill
    hides some of its letters), a label on a fill in an ink that does not read on it, a label that
    runs out of its box."""
    fills = [sh for sh in fig.layout.shapes if sh.name == "fill"]
    boxes = [sh for sh in fig.layout.shapes if sh.name == "box"]
    problems = []
    for x0, x1, y0, y1, ink, text in label_boxes(fig):
        for f in fills:
            overlap = min(x1, f.x1) - max(x0, f.x0) > 1e-9 and min(y1, f.y1) - max(y0, f.y0) > 1e-9
            inside = f.x0 <= x0 and x1 <= f.x1 and f.y0 <= y0 and y1 <= f.y1
            if overlap and not inside:
                problems.append(f"{text!r} is partly covered by a fill {f.x0:.2f}-{f.x1:.2f} x "
                                f"{f.y0:.2f}-{f.y1:.2f}")
            if inside and ink != V.ink_for(f.fillcolor):
                problems.append(f"{text!r} is drawn in {ink} on {f.fillcolor}")
        if not any(b.x0 <= x0 and x1 <= b.x1 and b.y0 <= y0 and y1 <= b.y1 for b in boxes):
            problems.append(f"{text!r} runs out of its box")
    return problems


def cow_story():
    """Notebook 04's story: three samples of one 10-token prompt in blocks of 4, each writes one token."""
    bm = BlockManager(num_blocks=12, block_size=4)
    bm.allocate("sample-0", list(range(201, 211)))
    for s in ("sample-1", "sample-2"):
        bm.fork("sample-0", s)
    for s, tok in (("sample-0", 1000), ("sample-1", 2000), ("sample-2", 3000)):
        bm.append_token(s, tok)
    return bm


def test_no_label_is_covered_by_a_fill_whatever_the_fill():
    """03's "L2" read "L", 04's "2 ×3" read "2 x" and 07's "16" read "1": a partly filled block drew its
    fill over its own label. Every step of 03's and 04's logs, every block size of 03's playground and
    the shared, partly filled blocks of copy-on-write."""
    figs = []
    for bm, n in ((seed_run(), 8), (cow_story(), 12)):
        figs += [V.fig_event_step(bm.events, n, 4, k) for k in range(len(bm.events) + 1)]
    bounds = {"num_requests": (1, 12), "seed": (0, 9)}
    figs += [V.block_table_playground(bs, n, seed, bounds=bounds) for bs in (1, 2, 4, 8, 16) for n, seed in
             ((6, 0), (12, 3), (12, 7))]
    figs.append(V.fig_block_tables(shared_system_prompt(4, 48, 12, 16), 16))
    partial = 0
    for fig in figs:
        assert not uncovered(fig), (fig.layout.title.text, uncovered(fig))
        partial += sum(1 for sh in fig.layout.shapes if sh.name == "fill" and sh.x1 - sh.x0 < 1)
    assert partial > 50  # the check saw many partly filled blocks


def test_the_check_finds_a_covered_label():
    fig = V.fig_event_step(cow_story().events, 12, 4, 4)
    assert not uncovered(fig)
    for sh in fig.layout.shapes:  # the old drawing: the fill as high as the box, under the label
        if sh.name == "fill" and sh.x1 - sh.x0 < 1:
            sh.y1 = sh.y0 + 1
    assert any("partly covered" in p for p in uncovered(fig))


# ---------------------------------------------------------------- figures that hold still


def still(fig):
    return (fig.layout.height, tuple(fig.layout.xaxis.range), tuple(fig.layout.yaxis.range),
            tuple(t.name for t in fig.data if t.showlegend is not False))


@pytest.mark.parametrize("bm, num_blocks", [(seed_run(), 8), (cow_story(), 12)], ids=["03", "04"])
def test_an_event_slider_keeps_the_figure_still(bm, num_blocks):
    shapes = {still(V.fig_event_step(bm.events, num_blocks, 4, k)) for k in range(len(bm.events) + 1)}
    assert len(shapes) == 1, shapes


def test_the_block_table_playground_holds_still_while_its_sliders_move():
    bounds = {"num_requests": (1, 12), "seed": (0, 9)}
    for bs in (1, 4, 16):
        shapes = {still(V.block_table_playground(bs, n, seed,
                                                 bounds=bounds)) for n in (1, 6, 12) for seed in (0, 9)}
        assert len(shapes) == 1, (bs, shapes)
    # without bounds, only what these values need (a larger figure for more requests)
    assert still(V.block_table_playground(4, 1)) != still(V.block_table_playground(4, 12, 3))


def test_a_request_has_one_colour_in_every_figure():
    """03 drew request A blue in its first figure and olive in the event slider's (where the eight
    early requests came first)."""
    bm = seed_run()
    alone = V.fig_block_tables(bm, 4)
    stepped = V.fig_event_step(bm.events, 8, 4, len(bm.events))
    colour = {fig.layout.title.text: next(t.text[0] for t in fig.data if t.name == "tables")
              for fig in (alone, stepped)}
    assert len(set(colour.values())) == 1 and "#1f77b4" in next(iter(colour.values()))


def test_block_table_playground_holds_still_for_every_control_block_size_included():
    """03's block-size dropdown moved the x range from 26.5 to 19.9: the frame now holds every block
    size of the dropdown's range, and a long table keeps at most MAX_LOGICAL boxes (the rest is "+k")."""
    bounds = {"block_size": (1, 16), "num_requests": (1, 12), "seed": (0, 9)}
    seen = set()
    for block_size in (1, 2, 4, 8, 16):
        for n, seed in ((1, 0), (6, 3), (12, 9)):
            fig = V.block_table_playground(block_size, n, seed, bounds=bounds)
            seen.add((fig.layout.height, tuple(fig.layout.xaxis.range), tuple(fig.layout.yaxis.range)))
    assert len(seen) == 1
    logical = next(t for t in V.block_table_playground(1, 12, 0, bounds=bounds).data if t.name == "logical")
    assert any(str(t).startswith("+") for t in logical.text) and len(logical.text) <= 12 * V.MAX_LOGICAL
