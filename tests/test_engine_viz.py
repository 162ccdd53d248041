"""Figures of notebook 07, fed by a real BlockManager's event log (no model needed)."""

import pytest

from paged_lab.memory import BlockManager
from paged_lab.viz.engine import (
    engine_step_readout,
    events_until_step,
    fig_engine_pool,
    fig_engine_timeline,
    fig_prefix_cache,
    fig_throughput,
)


@pytest.fixture
def log():
    bm = BlockManager(num_blocks=8, block_size=2)
    bm.clock = 0
    bm.allocate("a", [1, 2, 3])  # blocks for 3 tokens
    bm.clock = 1
    bm.allocate("b", [4, 5])
    bm.append_token("a", 9)
    bm.clock = 2
    bm.free("a")
    return bm


def test_events_until_step_splits_the_log_by_engine_step(log):
    kinds = [e.kind for e in log.events]
    assert events_until_step(log.events, 0) == kinds.index("allocate") + 1
    assert events_until_step(log.events, 1) == len(kinds) - 1
    assert events_until_step(log.events, 5) == len(kinds)


def test_pool_figure_replays_up_to_the_step_and_says_what_ran(log):
    timeline = [dict(num_prefill=1, num_decode=0, num_batched_tokens=3, num_waiting=1, num_preempted=0),
                dict(num_prefill=1, num_decode=1, num_batched_tokens=3, num_waiting=0, num_preempted=1)]
    fig = fig_engine_pool(log.events, 8, 2, step=1, timeline=timeline)
    # one short line (what ran is the readout's): it broke as "…3 tokens, 3 / waiting"
    assert fig.layout.title.text == "after step 1: 2 sequences hold 3 of 8 blocks, 0 waiting"
    marks = [s for s in fig.layout.shapes if s.name == "mark"]
    assert len(marks) == 2  # step 1 touched b's block and the block a appended into
    assert "1 sequences hold 1 of 8" in fig_engine_pool(log.events, 8, 2, step=2).layout.title.text  # a freed
    with pytest.raises(ValueError, match="step"):
        fig_engine_pool(log.events, 8, 2, step=-1)


def test_timeline_marks_preemptions():
    rows = [dict(step=i, num_running=r, num_waiting=w, num_preempted=p, kv_usage=u)
            for i, (r, w, p, u) in enumerate([(2, 1, 0, 0.5), (1, 2, 1, 0.9), (2, 0, 0, 0.7)])]
    fig = fig_engine_timeline(rows)
    marks = [t for t in fig.data if t.name == "preemption"]
    assert len(marks) == 1 and list(marks[0].x) == [1]
    assert max(next(t for t in fig.data if t.name == "KV used").y) == pytest.approx(90)
    with pytest.raises(ValueError, match="timeline"):
        fig_engine_timeline([])


def test_throughput_bars_are_labelled_with_ratios():
    fig = fig_throughput({"hf_static": 10.0, "paged_lab": 35.0})
    assert list(fig.data[0].text) == ["10.0 tok/s (1.0x)", "35.0 tok/s (3.5x)"]


def test_prefix_cache_bars_split_prompt_tokens():
    fig = fig_prefix_cache(["r0", "r1"], [20, 22], [0, 16])
    assert list(fig.data[0].y) == [0, 16] and list(fig.data[1].y) == [20, 6]
    with pytest.raises(ValueError):
        fig_prefix_cache(["r0"], [1, 2], [0])


def test_step_readout_says_what_changed_hands(log):
    timeline = [dict(num_prefill=1, num_decode=0, num_running=1, num_waiting=1, num_preempted=0,
                     kv_usage=0.19),
                dict(num_prefill=1, num_decode=1, num_running=2, num_waiting=0, num_preempted=0,
                     kv_usage=0.44),
                dict(num_prefill=0, num_decode=1, num_running=1, num_waiting=0, num_preempted=1,
                     kv_usage=0.12)]
    one = engine_step_readout(log.events, timeline, 1, block_size=2)
    assert one == ["step 1 ran 1 prefill + 1 decode → 2 running, 0 waiting, 44% of the slots hold tokens",
                   "admitted: b (2 tokens → 1 block)",
                   "a new block, the last one being full: nobody",  # a's 4th token fitted its last block
                   "finished, blocks back to the pool: nobody"]
    two = engine_step_readout(log.events, timeline, 2, block_size=2)
    assert two[3] == ("finished, blocks back to the pool: a (2 blocks); 1 preempted: the pool had no free "
                      "block")
    # 4 tokens in blocks of 3: a second block
    grown = engine_step_readout(log.events, timeline, 1, block_size=3)
    assert grown[2] == "a new block, the last one being full: a"
    with pytest.raises(ValueError, match="step"):
        engine_step_readout(log.events, timeline, 3, block_size=2)


def test_pool_figure_has_a_legend_entry_for_the_dashed_frame(log):
    fig = fig_engine_pool(log.events, 8, 2, step=1)
    assert any(t.name == "dashed frame: touched in this step" and t.line.dash == "dash" for t in fig.data)


def test_the_step_readout_keeps_its_height_on_a_real_run():
    """07's readout was one line that wrapped on some steps (the box grew from 521 to 549 px and the
    figure jumped while dragging). Now every step gives four lines, each short enough for one line of a
    900 px output area, on a run like the notebook's: six requests, three at a time, blocks of 4."""
    from paged_lab.sched import Scheduler, Sequence

    bm = BlockManager(num_blocks=48, block_size=4)
    sched = Scheduler(bm, max_num_seqs=3)
    for i, n in enumerate((6, 14, 8, 10, 6, 12)):
        sched.add_request(Sequence(i, [1] * 8, max_tokens=n))
    timeline = []
    while sched.has_unfinished():
        out = sched.schedule()  # (it sets bm.clock to the step: the events carry it)
        sched.update(out, [5] * len(out.sampling))
        timeline.append(dict(num_prefill=1, num_decode=1, num_running=len(sched.running),
                             num_waiting=len(sched.waiting), num_preempted=0, kv_usage=bm.usage))
    lines = [engine_step_readout(bm.events, timeline, s, block_size=4) for s in range(len(timeline))]
    assert {len(x) for x in lines} == {4}
    longest = max((line for x in lines for line in x), key=len)
    assert len(longest) <= 110, longest
    assert any(x[1].endswith("; request 2 (8 tokens → 2 blocks)") for x in lines)
    assert any(x[3].endswith(")") for x in lines)


def test_pool_figure_holds_still_and_names_the_requests():
    """07's slider grew and shrank the figure as sequences came and went, and its readout said "a new
    block for 4", which reads as four tokens."""
    bm = BlockManager(num_blocks=8, block_size=2)
    for step, (kind, sid, n) in enumerate([("allocate", 3, 3), ("allocate", 4, 2), ("append", 4, 9),
                                           ("free", 3, 0)]):
        bm.clock = step
        if kind == "allocate":
            bm.allocate(sid, list(range(n)))
        elif kind == "append":
            bm.append_token(sid, n)
        else:
            bm.free(sid)
    figs = [fig_engine_pool(bm.events, 8, 2, step=k) for k in range(4)]
    assert len({(f.layout.height, tuple(f.layout.xaxis.range), tuple(f.layout.yaxis.range))
                for f in figs}) == 1
    tables = next(t for t in figs[1].data if t.name == "tables").text
    assert any("<b>request 4</b>" in t for t in tables)
    timeline = [dict(num_prefill=1, num_decode=0, num_running=1, num_waiting=0, num_preempted=0,
                     kv_usage=0.2)] * 4
    assert engine_step_readout(bm.events, timeline, 2, block_size=2)[2].endswith(": request 4")


def test_throughput_bars_take_human_labels_and_keep_paged_lab_blue():
    fig = fig_throughput({"paged_lab (continuous batching)": 35.0, "transformers (static batching)": 10.0})
    assert list(fig.data[0].marker.color) == ["#1f77b4", "#7f7f7f"]
