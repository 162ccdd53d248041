import pytest

from paged_lab.sched import ContiguousAllocator, paged, simulate
from paged_lab.sched import workloads as W
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
    assert [tr.name for tr in late.data] == ["free", "free"]


def test_gantt_has_one_bar_per_stay_and_the_right_rounds():
    runs = windows()
    fig = V.fig_gantt(runs)
    assert len(fig.data) == sum(len(r.spans) for r in runs.values()) == 12
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
    bars = V.fig_memory_bars({"old": old, "new": r})
    for i in range(2):
        assert sum(tr.y[i] for tr in bars.data) == pytest.approx(100)
    assert bars.data[0].y[0] == pytest.approx(100 * sum(old.timeline["used_slots"]) / (60 * old.makespan))


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
    assert "total luggage 53 for 60 lockers (fits)" in text
    # what each rule did in round 1 (02's quiz 1: F waits while 36 of the 60 reserved lockers stand empty)
    assert "old manager, 12 lockers a traveller → 5 inside, 1 waiting, 36 handed-out lockers empty" in text
    assert "Ah-Ye, rows of 1 as the luggage grows → 6 inside, 0 waiting, 0 handed-out lockers empty" in text
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
    small, large = V.batching_playground(40, 8, 64, 16), V.batching_playground(60, 8, 64, 16)
    s_small, s_large = (max(t.x[-1] for t in f.data if t.mode != "markers") for f in (small, large))
    assert s_small != s_large  # the runs differ in length...
    assert small.layout.xaxis.range == large.layout.xaxis.range  # ...but are read on the same scale
    assert small.layout.xaxis.range[1] >= s_large
    assert list(small.layout.yaxis.range) == [0, 8 * 1.05]
    tight = V.batching_playground(40, 8, 16, 16)
    marks = [t for t in tight.data if t.mode == "markers"]
    assert len(marks) == 2 and len({(t.marker.color, t.marker.symbol) for t in marks}) == 2
    assert all(t.showlegend is not False and "preemption" in t.name for t in marks)
    assert any(len(t.x) for t in marks)


def test_nice_ceil_rounds_up_to_a_stable_axis_end():
    assert [V.nice_ceil(x) for x in (0, 10, 11, 21, 51, 290, 444, 501)] == [10, 10, 20, 50, 100, 500, 500, 1000]
    with pytest.raises(ValueError, match="x must be >= 0"):
        V.nice_ceil(-1)


def test_batching_readout_says_why():
    roomy = V.batching_readout(None, 40, 8, 64, 16)
    assert "covers 8 windows" in roomy and "no preemption" in roomy
    tight_runs = V.batching_runs(40, 8, 32, 16)
    tight = V.batching_readout(None, 40, 8, 32, 16)
    n = tight_runs["continuous"].summary["num_preemptions"]
    assert n > 0 and f"holds fewer blocks than 8 windows of 128-token requests need (64) → {n} preemptions" in tight
    assert f"static {tight_runs['static'].makespan}" in tight
