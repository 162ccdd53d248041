import pytest

from paged_lab.memory import ContiguousAllocator
from paged_lab.sim import paged, simulate
from paged_lab.sim import workloads as W
from paged_lab.viz import sched as V


def windows():
    return {m: simulate(W.windows_story(), paged(64, 4), {"max_num_seqs": 3, "mode": m})
            for m in ("static", "continuous")}


def test_lockers_draw_one_square_per_slot():
    old, new = V.locker_runs()
    fig = V.fig_lockers({"old": old.slot_map_at(0), "new": new.slot_map_at(0)})
    per_panel = {"x": 0, "x2": 0}
    for tr in fig.data:
        per_panel[tr.xaxis] += len(tr.x)
    assert per_panel == {"x": 60, "x2": 60}
    solid_text = [t for tr in fig.data if tr.xaxis == "x" for t in tr.text if t]
    assert len(solid_text) == old.timeline["used_slots"][0]  # a letter on every slot holding luggage
    with pytest.raises(ValueError, match="panels"):
        V.fig_lockers({})


def legend(fig):
    return [t.name for t in sorted((t for t in fig.data if t.showlegend is not False),
                                   key=lambda t: t.legendrank)]


def test_locker_playground_follows_the_sliders():
    fig = V.locker_playground()
    assert "5 inside, 1 waiting" in fig.layout.annotations[0].text  # the old manager
    assert "6 inside, 0 waiting" in fig.layout.annotations[1].text  # Ah-Ye
    fig = V.locker_playground(reservation=13)  # 60 // 13 = 4 reservations, 8 stranded lockers
    assert "4 inside, 2 waiting" in fig.layout.annotations[0].text
    fig = V.locker_playground(block_size=4)
    assert "blocks of 4" in fig.layout.annotations[1].text
    with pytest.raises(ValueError, match="block_size"):
        V.locker_playground(block_size=7)
    late = V.locker_playground(step=40)  # after everyone left: an empty wall
    assert "everyone left after round 8" in late.layout.annotations[0].text
    assert [tr.name for tr in late.data if tr.x and tr.x[0] is not None] == ["free", "free"]
    assert legend(late) == [*"ABCDEF", "free"]  # the legend keeps everyone


def test_locker_playground_holds_still_while_its_sliders_move():
    bounds = {"num_slots": (24, 120)}
    figs = [V.locker_playground(num_slots=n, step=k, bounds=bounds) for n in (24, 60, 120)
            for k in (0, 3, 40)]
    assert len({(f.layout.height, tuple(f.layout.yaxis.range)) for f in figs}) == 1
    assert len({tuple(legend(f)) for f in figs}) == 1


def test_gantt_has_one_bar_per_stay_and_the_right_rounds():
    runs = windows()
    fig = V.fig_gantt(runs)
    assert len(fig.data) == sum(len(r.spans) for r in runs.values()) == 12
    # windows are numbers on the axis, window 1 on top: their order holds in any language
    assert (list(fig.layout.yaxis.ticktext) == ["window 1", "window 2", "window 3"]
            and list(fig.layout.yaxis.tickvals) == [0, 1, 2])
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]
    assert [a.text for a in fig.layout.annotations] == ["static: 8 rounds", "continuous: 6 rounds"]
    a_bars = [tr for tr in fig.data if tr.name == "A"]
    assert [tr.x[0] for tr in a_bars] == [6, 6]  # A holds a window for 6 rounds in both
    assert sum(tr.showlegend for tr in fig.data) == 6


def test_gantt_marks_preempted_stays():
    r = simulate(W.locker_story_overflow(), paged(60, 1), {"max_num_seqs": 6})
    fig = V.fig_gantt({"Ah-Ye": r})
    cut = [tr for tr in fig.data if tr.marker.pattern.shape == "/"]
    assert len(cut) == r.summary["num_preemptions"] > 0


def test_timeline_and_memory_bars():
    r = simulate(W.locker_story_overflow(), paged(60, 1), {"max_num_seqs": 6})
    fig = V.fig_timeline(r)
    names = [tr.name for tr in fig.data]
    assert names[:2] == ["running", "waiting"] and "preemption" in names
    [pre] = [tr for tr in fig.data if tr.name == "preemption"]
    assert len(pre.x) == sum(1 for p in r.timeline["preempted"] if p)
    old = simulate(W.locker_story(), ContiguousAllocator(60, 12), {"max_num_seqs": 6})
    pool = V.fig_memory_bars({"old": old, "new": r}, share_of="pool")
    for i in range(2):
        assert sum(tr.y[i] for tr in pool.data) == pytest.approx(100)
    assert pool.data[0].y[0] == pytest.approx(100 * sum(old.timeline["used_slots"]) / (60 * old.makespan))
    with pytest.raises(ValueError, match="share_of"):
        V.fig_memory_bars({"old": old}, share_of="free")


def test_memory_bars_show_what_their_title_asks_with_readable_labels():
    """02's "Of the slots handed out, how many hold a token?" showed 71.2% for paging where the printout
    said 98.4%: the bar divided by all slots, free ones included. By default it divides by the slots
    handed out; a segment too thin for its label (paging's 1.6% empty) has it beside the bar."""
    chat = W.long_tail(300, prompt_median=100, output_median=205, sigma=1.0, max_seq_len=2048, seed=0)
    runs = {"contiguous": simulate(chat, ContiguousAllocator(16 * 2048, 2048), {"max_num_seqs": 256}),
            "paged": simulate(chat, paged(2048, 16), {"max_num_seqs": 256})}
    fig = V.fig_memory_bars(runs)
    tokens = next(t for t in fig.data if t.name == "tokens")
    assert list(tokens.y) == pytest.approx([100 * r.summary["utilization"] for r in runs.values()])
    assert [t.name for t in fig.data] == ["tokens", "reserved, empty"]
    empty = 100 - tokens.y[1]
    assert (0 < empty < V.SMALL_SHARE
            and next(t for t in fig.data if t.name == "reserved, empty").text[1] == "")
    [note] = fig.layout.annotations
    assert note.text == f"{empty:.1f}% reserved, empty" and note.x > 1.3 and note.font.size >= 12


def test_batching_playground_reports_both_makespans():
    runs = V.batching_runs(20, 4, 32, 16)
    fig = V.batching_playground(20, 4, 32, 16)
    s, c = runs["static"].makespan, runs["continuous"].makespan
    assert f"static {s} vs continuous {c} steps" in fig.layout.title.text
    assert c <= s
    assert V.fig_running(runs).data[0].name == "static"


def test_readouts_change_with_every_slider():
    base = dict(A=9, B=6, C=12, D=8, E=11, F=7, num_slots=60, reservation=12, block_size=1, step=0)
    text = V.locker_readout(None, **base)
    assert "total luggage 53 for 60 places (fits)" in text
    # what each rule did in round 1 (02's quiz 1: F waits while 36 of the 60 reserved lockers stand empty)
    assert "old manager, 12 places a traveller → 5 inside, 1 waiting, 36 handed-out places empty" in text
    assert "Ah-Ye, a locker at a time (1 per locker) → 6 inside, 0 waiting, 0 handed-out places empty" in text
    for key in base:
        moved = dict(base, **{key: base[key] + (12 if key == "num_slots" else 1)})
        assert V.locker_readout(None, **moved) != text, key
    assert "must make someone wait" in V.locker_readout(None, **dict(base, A=12, B=12, C=12))
    b = dict(num_requests=40, windows=8, num_blocks=64, block_size=16)
    assert "1,024 token slots" in V.batching_readout(None, **b)
    for key in b:
        assert V.batching_readout(None, **dict(b, **{key: b[key] * 2})) != V.batching_readout(None, **b), key


def test_playground_titles_fit_the_700px_widget():
    """One line of title holds about 80 characters at 700 px; a subplot title shares the width with its
    neighbour (about 45 each). Longer lines were clipped or overlapped in the notebooks."""
    from paged_lab.viz.blocks import fig_prefix_sharing
    from paged_lab.viz.sched import batching_playground, locker_playground

    for fig in (locker_playground(), locker_playground(A=30, B=30, C=30, step=2), batching_playground(),
                fig_prefix_sharing()):
        assert all(len(line) <= 80 for line in fig.layout.title.text.split("<br>")), fig.layout.title.text
        for note in fig.layout.annotations:
            assert all(len(line) <= 45 for line in note.text.split("<br>")), note.text


def test_batching_playground_keeps_its_axes_and_tells_the_preemptions_apart():
    """05's x axis went from 0-500 to 0-1000 while a slider moved. Every axis is a share now: of the
    slower run's steps, of the windows, of the pool."""
    figs = [V.batching_playground(*a) for a in ((40, 8, 64, 16), (60, 8, 64, 16), (200, 1, 512, 16),
                                                (40, 64, 8, 1))]
    axes = {(f.layout.height, tuple(f.layout.xaxis.range), tuple(f.layout.yaxis.range),
             tuple(f.layout.yaxis2.range))
            for f in figs}
    assert len(axes) == 1
    for f in figs:
        lines = [t for t in f.data if t.mode != "markers"]
        assert max(max(t.x) for t in lines) == pytest.approx(100) and all(max(t.y) <= 100 for t in lines)
    small = figs[0]
    assert "static 290 vs continuous 218 steps" in small.layout.title.text
    assert small.layout.xaxis2.title.text == "time: % of the slower run's 290 steps"
    tight = V.batching_playground(40, 8, 16, 16)
    marks = [t for t in tight.data if t.mode == "markers"]
    assert len(marks) == 2 and len({(t.marker.color, t.marker.symbol) for t in marks}) == 2
    assert all(t.showlegend is not False and "preemption" in t.name for t in marks)
    assert any(len(t.x) for t in marks)


def test_nice_ceil_rounds_up_to_a_stable_axis_end():
    assert [V.nice_ceil(x) for x in (0, 10, 11, 21, 51, 290, 444, 501)] == [10, 10, 20, 50, 100, 500, 500,
                                                                            1000]
    with pytest.raises(ValueError, match="x must be >= 0"):
        V.nice_ceil(-1)


def test_batching_readout_says_what_limited_the_run():
    """05 once read "holds fewer blocks than 11 windows ... need (88) → 0 preemptions": the readout names
    what actually held the batch back."""
    roomy = V.batching_readout(None, 40, 11, 64, 16)
    assert "The 11 windows limited the batch" in roomy and "so no request was preempted" in roomy
    assert "fewer blocks" not in roomy
    tight_runs = V.batching_runs(40, 8, 32, 16)
    tight = V.batching_readout(None, 40, 8, 32, 16)
    n, m = (tight_runs[k].summary["num_preemptions"] for k in ("continuous", "static"))
    assert (n > 0
            and f"ran out of blocks as the requests grew: {n} preemptions (continuous), {m} (static)"
            in tight)
    assert f"static {tight_runs['static'].makespan}" in tight
    few = V.batching_readout(None, 5, 8, 64, 16)
    assert "With 5 requests for 8 windows, nobody waited for a window" in few
