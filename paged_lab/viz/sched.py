"""Pure figures for scheduling (notebooks 02 and 05): lockers, windows (Gantt), timelines, waste bars.

Each function takes simulation results (or the few numbers a slider sets) and returns a plotly
Figure; nothing here mutates state. The ``*_playground`` functions run ``simulate()`` on the
numbers a slider picks, then draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.memory import ContiguousAllocator
from paged_lab.sim import SimResult, paged, simulate, workloads
from paged_lab.viz.colors import PALETTE, seq_colors

FREE = "#e5e5e5"


def _color(name: str, order: Sequence[str]) -> str:
    """A request's colour (``viz.colors``: A blue, B orange, ...), the same in every figure."""
    return seq_colors(order).get(name, PALETTE[-1])


def fig_lockers(panels: Mapping[str, Sequence[tuple[str | None, bool]]], cols: int = 12,
                title: str = "The lockers", subtitles: Mapping[str, str] | None = None,
                rows: int | None = None, owners: Sequence[str] = ()) -> go.Figure:
    """Slot maps side by side: one square per locker, coloured by owner.

    ``panels``: label -> ``[(owner or None, holds_token), ...]`` (``SimResult.slot_map_at``). A solid
    square holds luggage; a pale one is reserved but empty (the old manager's waste); grey is free.
    ``rows``: the rows of lockers to make room for (default: the panels' own), so that a wall of
    another size draws in the same figure; ``owners``: travellers the legend lists even when they
    hold no locker at this moment (a legend that keeps its entries keeps its size).
    """
    if not panels:
        raise ValueError("panels must hold at least one slot map")
    labels = list(panels)
    owners = sorted(set(owners) | {o for m in panels.values() for o, _ in m if o is not None})
    fig = make_subplots(1, len(labels), subplot_titles=[(subtitles or {}).get(lb, lb) for lb in labels],
                        horizontal_spacing=0.06)
    for c, lb in enumerate(labels, start=1):
        slots = panels[lb]
        groups: dict[tuple, list[int]] = {}
        for i, (o, full) in enumerate(slots):
            groups.setdefault((o, full), []).append(i)
        for (o, full), idx in sorted(groups.items(), key=lambda kv: (kv[0][0] or "~", not kv[0][1])):
            color = FREE if o is None else _color(o, owners)
            name = "free" if o is None else (o if full else f"{o} (reserved, empty)")
            fig.add_trace(go.Scatter(
                x=[i % cols for i in idx], y=[i // cols for i in idx], mode="markers+text",
                text=[o if (o and full) else "" for _ in idx], textfont=dict(color="white", size=10),
                marker=dict(symbol="square", size=22, color=color, opacity=1.0 if full or o is None else 0.3,
                            line=dict(color=color if o else "#bbbbbb", width=1)),
                name=name, legendgroup=name, legendrank=owners.index(o) if o in owners else len(owners),
                showlegend=(full or o is None) and name not in {t.name for t in fig.data},
                hovertemplate=f"slot %{{customdata}}<br>{name}<extra></extra>", customdata=idx),
                row=1, col=c)
    listed = {t.name for t in fig.data if t.showlegend is not False}
    for o in owners:
        if o not in listed:  # a traveller outside (waiting, or gone): still in the legend
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=o, legendgroup=o,
                                     legendrank=owners.index(o), marker=dict(symbol="square", size=12,
                                                                              color=_color(o, owners))))
    if "free" not in listed:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="free", legendrank=len(owners),
                                 marker=dict(symbol="square", size=12, color=FREE,
                                             line=dict(color="#bbbbbb", width=1))))
    rows = max([rows or 0] + [-(-len(m) // cols) for m in panels.values()])
    for c in range(1, len(labels) + 1):
        fig.update_xaxes(visible=False, range=[-0.7, cols - 0.3], row=1, col=c)
        fig.update_yaxes(visible=False, range=[rows - 0.3, -0.7], row=1, col=c)
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top"),
                      height=190 + 34 * rows,
                      margin=dict(t=110, b=10, l=20, r=20), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.02, yanchor="top",
                                  title_text="pale = reserved, empty  "))
    return fig


def fig_gantt(results: Mapping[str, SimResult], title: str = "Who sits at which window, round by round"
              ) -> go.Figure:
    """One row of subplots per result: windows on the y axis (window 1 on top), rounds (steps) on the x axis.

    A bar is one request's stay at a window; a hatched bar ended in preemption (its KV was dropped
    or swapped out) and the request came back later. The windows are numbers on the axis, labelled
    "window 1", "window 2", ...: their order does not depend on the labels' language.
    """
    if not results:
        raise ValueError("results must hold at least one SimResult")
    labels = list(results)
    names = sorted({s.name for r in results.values() for s in r.spans},
                   key=lambda n: (len(n), n))
    fig = make_subplots(len(labels), 1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"{lb}: {results[lb].makespan} rounds" for lb in labels])
    shown = set()
    windows = 1 + max((s.window for r in results.values() for s in r.spans), default=0)
    for row, lb in enumerate(labels, start=1):
        for s in results[lb].spans:
            color = _color(s.name, names)
            cut = s.outcome != "finished"
            fig.add_trace(go.Bar(
                y=[s.window], x=[s.end - s.start + 1], base=[s.start - 0.5], orientation="h", width=0.75,
                marker=dict(color=color, pattern_shape="/" if cut else "", line=dict(color="white", width=1)),
                text=[s.name], textposition="inside", insidetextanchor="middle", name=s.name,
                legendgroup=s.name, showlegend=s.name not in shown, legendrank=names.index(s.name),
                hovertemplate=f"{s.name}: rounds {s.start + 1}-{s.end + 1} ({s.outcome})<extra></extra>"),
                row=row, col=1)
            shown.add(s.name)
        fig.update_yaxes(range=[windows - 0.5, -0.5], tickvals=list(range(windows)),
                         ticktext=[f"window {w + 1}" for w in range(windows)], row=row, col=1)
    span = max(r.makespan for r in results.values())
    fig.update_xaxes(range=[-0.5, span - 0.5], tickvals=list(range(span)),
                     ticktext=[str(i + 1) for i in range(span)], title_text="round", row=len(labels), col=1)
    fig.update_layout(title=title, barmode="overlay", height=170 + 150 * len(labels), bargap=0.25,
                      margin=dict(t=80, b=40))
    return fig


def fig_timeline(result: SimResult, title: str | None = None) -> go.Figure:
    """Running and waiting requests (left axis) and KV usage (right axis) per step; red marks
    are steps that preempted someone."""
    t = result.timeline
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=t["step"], y=t["running"], name="running", line=dict(color="#1f77b4")))
    fig.add_trace(go.Scatter(x=t["step"], y=t["waiting"], name="waiting", line=dict(color="#ff7f0e")))
    if any(t["swapped"]):
        fig.add_trace(go.Scatter(x=t["step"], y=t["swapped"], name="swapped", line=dict(color="#9467bd")))
    fig.add_trace(go.Scatter(x=t["step"], y=[100 * u for u in t["kv_usage"]], name="KV usage %",
                             line=dict(color="#2ca02c", dash="dot")), secondary_y=True)
    pre = [i for i, p in enumerate(t["preempted"]) if p]
    if pre:
        fig.add_trace(go.Scatter(x=[t["step"][i] for i in pre], y=[100 * t["kv_usage"][i] for i in pre],
                                 mode="markers", name="preemption", marker=dict(color="#d62728", size=9,
                                                                                  symbol="x")),
                      secondary_y=True)
    s = result.summary
    n = s["num_preemptions"]
    fig.update_layout(title=title or (f"{s['mode']} batching, {s['allocator']}: {s['makespan']} steps, "
                                      f"{n} preemption{'' if n == 1 else 's'}"),
                      height=360, margin=dict(t=60, b=40), legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(title_text="step")
    top = max(max(t["running"], default=0), max(t["waiting"], default=0), max(t["swapped"], default=0), 1)
    fig.update_yaxes(title_text="requests", range=[0, top * 1.05], rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="KV usage %", range=[0, 105], tickmode="array", tickvals=[0, 25, 50, 75, 100],
                     showgrid=False, secondary_y=True)
    return fig


def waste_breakdown(result: SimResult) -> dict[str, float]:
    """Time-averaged share of the pool (in %): tokens, reserved-but-empty, stranded holes, free."""
    t, total = result.timeline, result.num_slots * max(len(result.timeline["step"]), 1)
    used, internal, ext = sum(t["used_slots"]), sum(t["internal_frag"]), sum(t["external_frag"])
    return {"tokens": 100 * used / total, "reserved, empty": 100 * internal / total,
            "holes too small": 100 * ext / total,
            "free": 100 * (total - used - internal - ext) / total}


def handed_out_breakdown(result: SimResult) -> dict[str, float]:
    """Of the slots handed out to requests, summed over all steps (in %): holding a token, or
    reserved but empty. ``tokens`` is ``100 * summary["utilization"]``."""
    t = result.timeline
    reserved = sum(t["reserved_slots"])
    used = 100 * sum(t["used_slots"]) / reserved if reserved else 0.0
    return {"tokens": used, "reserved, empty": 100 - used if reserved else 0.0}


MEMORY_COLORS = {"tokens": "#2ca02c", "reserved, empty": "#ff7f0e", "holes too small": "#d62728",
                 "free": FREE}
SMALL_SHARE = 8.0  # % of a bar: a segment this thin gets its label beside the bar, not inside


def fig_memory_bars(results: Mapping[str, SimResult], title: str = "Where the KV memory goes",
                    share_of: str = "handed out") -> go.Figure:
    """Stacked bars per result, over all steps of the run, in % of the slots handed out
    (``share_of="handed out"``: holding a token, or reserved but empty) or of the whole pool
    (``share_of="pool"``: also stranded in holes too small to use, and free). A segment too thin to
    hold its label has it beside the bar, level with the segment."""
    if not results:
        raise ValueError("results must hold at least one SimResult")
    if share_of not in ("handed out", "pool"):
        raise ValueError(f"share_of must be 'handed out' or 'pool', got {share_of!r}")
    labels = list(results)
    parts = {lb: (handed_out_breakdown(r) if share_of == "handed out" else waste_breakdown(r))
             for lb, r in results.items()}
    keys = list(parts[labels[0]])
    fig = go.Figure([go.Bar(x=labels, y=[parts[lb][k] for lb in labels], name=k,
                            marker_color=MEMORY_COLORS[k],
                            text=[f"{parts[lb][k]:.1f}%" if parts[lb][k] >= SMALL_SHARE else ""
                                  for lb in labels],
                            textposition="inside", insidetextanchor="middle", textfont=dict(size=14),
                            hovertemplate=f"{k}: %{{y:.1f}}%<extra></extra>")
                     for k in keys])
    notes = []
    for i, lb in enumerate(labels):
        below = 0.0
        for k in keys:
            share = parts[lb][k]
            if 0 < share < SMALL_SHARE:
                notes.append(dict(x=i + 0.42, y=below + share / 2, xref="x", yref="y",
                                  text=f"{share:.1f}% {k}",
                                  showarrow=False, xanchor="left", font=dict(size=13)))
            below += share
    fig.update_layout(title=title, barmode="stack", bargap=0.35, height=400, margin=dict(t=90, b=40),
                      legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"),
                      xaxis=dict(range=[-0.5, len(labels) - 0.5 + (0.6 if notes else 0)]),
                      yaxis=dict(title="% of the slots handed out" if share_of == "handed out"
                                 else "% of slot-steps", range=[0, 100.5], ticksuffix="%"), annotations=notes)
    return fig


def fig_running(results: Mapping[str, SimResult], title: str = "Requests running at once") -> go.Figure:
    """Running requests per step for several runs on one axis."""
    fig = go.Figure([go.Scatter(x=r.timeline["step"], y=r.timeline["running"], name=lb, mode="lines")
                     for lb, r in results.items()])
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="running", height=340,
                      margin=dict(t=60, b=40))
    return fig


# -- playgrounds: numbers from sliders -> simulate() -> a figure ------------------------------------
def locker_runs(luggage=workloads.LOCKER_LUGGAGE, num_slots: int = workloads.LOCKER_SLOTS,
                reservation: int = workloads.LOCKER_RESERVATION, block_size: int = 1):
    """The locker story under the old manager and under Ah-Ye: ``(old, ah_ye)`` SimResults."""
    wl = workloads.locker_story(luggage)
    if num_slots % block_size:
        raise ValueError(f"num_slots={num_slots} must be a multiple of block_size={block_size}")
    sched = {"max_num_seqs": len(wl)}
    old = simulate(wl, ContiguousAllocator(num_slots, min(reservation, num_slots)), sched, record_slots=True)
    new = simulate(wl, paged(num_slots // block_size, block_size), sched, record_slots=True)
    return old, new


def locker_playground(A: int = 9, B: int = 6, C: int = 12, D: int = 8, E: int = 11, F: int = 7,
                      num_slots: int = 60, reservation: int = 12, block_size: int = 1, step: int = 0,
                      bounds: Mapping[str, tuple[int, int]] | None = None) -> go.Figure:
    """The lockers after round ``step + 1``, old manager vs Ah-Ye, for the luggage A..F.

    ``bounds`` (``viz.widgets.slider_bounds(controls)``) are the sliders' ranges: the wall gets room
    for the most lockers the ``num_slots`` slider offers, so the figure keeps its size."""
    old, new = locker_runs((A, B, C, D, E, F), num_slots, reservation, block_size)

    def label(r: SimResult, who: str) -> str:
        rej = f", {len(r.rejected)} turned away" if r.rejected else ""
        if step >= r.makespan:
            return f"{who}<br>everyone left after round {r.makespan}{rej}"
        t = r.timeline
        # three short lines: two panels share a 700 px widget, one long line per panel would overlap
        return (f"{who}<br>{t['running'][step]} inside, {t['waiting'][step]} waiting{rej}<br>"
                f"{t['used_slots'][step]} of {t['reserved_slots'][step]} handed-out slots hold luggage")

    def lockers(r: SimResult):
        return r.slot_map_at(step) if step < r.makespan else [(None, False)] * r.num_slots

    panels = {"old": lockers(old), "new": lockers(new)}
    subs = {"old": label(old, f"Old manager ({reservation} in a row)"),
            "new": label(new, f"Ah-Ye (blocks of {block_size})")}
    most = int((bounds or {}).get("num_slots", (num_slots, num_slots))[1])
    return fig_lockers(panels, cols=12, subtitles=subs, rows=-(-max(most, num_slots) // 12), owners="ABCDEF",
                       title=f"Round {step + 1}: luggage A-F = {(A, B, C, D, E, F)}, "
                             f"{sum((A, B, C, D, E, F))} in all")


PLAYGROUND_PROMPT, PLAYGROUND_OUTPUT = (16, 64), (8, 64)  # token ranges of the batching playground's requests


def batching_runs(num_requests: int = 40, windows: int = 8, num_blocks: int = 64, block_size: int = 16,
                  seed: int = 0, preemption: str = "recompute"):
    """A uniform workload (prompt 16-64, output 8-64 tokens) under static and continuous batching
    over the same paged pool: ``{"static": SimResult, "continuous": SimResult}``."""
    wl = workloads.uniform(num_requests, prompt_len=PLAYGROUND_PROMPT, output_len=PLAYGROUND_OUTPUT,
                           seed=seed)
    return {mode: simulate(wl, paged(num_blocks, block_size),
                           {"max_num_seqs": windows, "mode": mode, "preemption": preemption})
            for mode in ("static", "continuous")}


MODE_COLORS = {"static": "#ff7f0e", "continuous": "#1f77b4"}
# Preemption marks: a darker shade and its own symbol per mode, so the two runs' marks never look alike.
PREEMPT_MARKS = {"static": dict(symbol="x", color="#8c3d00"),
                 "continuous": dict(symbol="diamond", color="#0b3d6b")}


def nice_ceil(x: float) -> int:
    """The smallest of 10, 20, 50, 100, 200, 500, ... that is >= ``x``: an axis end that stays put
    while a slider nudges the data (290 and 444 steps both get an axis to 500)."""
    if x < 0:
        raise ValueError(f"x must be >= 0, got {x}")
    top, scale = 10, 0
    while top < x:
        scale = scale % 3 + 1  # 10 -> 20 -> 50 -> 100: x2, x2.5, x2
        top = top * 5 // 2 if scale == 2 else top * 2
    return top


def batching_playground(num_requests: int = 40, windows: int = 8, num_blocks: int = 64,
                        block_size: int = 16, seed: int = 0) -> go.Figure:
    """Windows in use and KV usage per step, static vs continuous, with each run's preemptions marked.

    Every axis is a share, so no slider rescales it: time runs from 0 to 100% of the slower run's
    steps (the title gives both runs' steps), the top panel counts busy windows as a % of the windows,
    the bottom one the KV pool in use."""
    runs = batching_runs(num_requests, windows, num_blocks, block_size, seed)
    longest = max(r.makespan for r in runs.values()) or 1
    fig = make_subplots(2, 1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("windows in use (% of the windows)", "KV pool in use (%)"))
    for mode, r in runs.items():
        t, color = r.timeline, MODE_COLORS[mode]
        x = [100 * (s + 1) / longest for s in t["step"]]
        fig.add_trace(go.Scatter(x=x, y=[100 * n / windows for n in t["running"]],
                                 name=f"{mode} batching: {r.makespan} steps",
                                 line=dict(color=color, shape="hv"),
                                 legendgroup=mode, customdata=t["running"],
                                 hovertemplate="%{customdata} running<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[100 * u for u in t["kv_usage"]], showlegend=False,
                                 line=dict(color=color), legendgroup=mode), row=2, col=1)
        pre = [i for i, p in enumerate(t["preempted"]) if p]
        fig.add_trace(go.Scatter(x=[x[i] for i in pre], y=[100 * t["kv_usage"][i] for i in pre],
                                 mode="markers", marker=dict(size=9, **PREEMPT_MARKS[mode]),
                                 name=f"{mode}: preemption ({r.summary['num_preemptions']})"),
                      row=2, col=1)
    s, c = runs["static"].summary, runs["continuous"].summary
    rej = f", {s['num_rejected']} rejected (too large for the pool)" if s["num_rejected"] else ""
    fig.update_layout(title=(f"{num_requests} requests, {windows} windows, a pool of {num_blocks} blocks × "
                             f"{block_size} tokens<br>static {s['makespan']} vs continuous "
                             f"{c['makespan']} steps{rej}"),
                      height=560, margin=dict(t=115, b=40), legend=dict(orientation="h", y=-0.14))
    # Fixed axes: a slider move changes the curves, not the scale they are read against.
    fig.update_yaxes(range=[0, 105], title_text="% of windows", row=1, col=1)
    fig.update_yaxes(range=[0, 105], title_text="% of slots", row=2, col=1)
    fig.update_xaxes(range=[0, 101], ticksuffix="%")
    fig.update_xaxes(title_text=f"time: % of the slower run's {longest} steps", row=2, col=1)
    return fig


def locker_readout(fig: go.Figure, A: int, B: int, C: int, D: int, E: int, F: int, num_slots: int,
                   reservation: int, block_size: int, step: int) -> str:
    """Under the locker sliders: what each manager's rule did this round, and what it cost."""
    total = A + B + C + D + E + F
    verdict = "fits" if total <= num_slots else "does not fit: Ah-Ye must make someone wait"
    old, new = locker_runs((A, B, C, D, E, F), num_slots, reservation, block_size)
    return (f"round {step + 1} · total luggage {total} for {num_slots} places ({verdict}) · "
            f"old manager, {reservation} places a traveller → {_locker_round(old, step)} · "
            f"Ah-Ye, a locker at a time ({block_size} per locker) → {_locker_round(new, step)}")


def _locker_round(r: SimResult, step: int) -> str:
    """One manager's round ``step`` in a few words: who is inside, who waits, what stands empty."""
    if step >= r.makespan:
        return f"everyone left after round {r.makespan}"
    t = r.timeline
    empty = t["reserved_slots"][step] - t["used_slots"][step]
    turned_away = f", {len(r.rejected)} turned away" if r.rejected else ""
    return (f"{t['running'][step]} inside, {t['waiting'][step]} waiting{turned_away}, "
            f"{empty} handed-out places empty")


def batching_readout(fig: go.Figure | None, num_requests: int, windows: int, num_blocks: int, block_size: int,
                     seed: int = 0) -> str:
    """What the sliders' setting did, and what limited it: static vs continuous steps, then whichever
    held the batch back -- the pool (preemptions, or requests waiting beside free windows), the
    windows, or too few requests."""
    runs = batching_runs(num_requests, windows, num_blocks, block_size, seed)
    s, c = runs["static"].summary, runs["continuous"].summary
    slower = s["makespan"] / c["makespan"] - 1 if c["makespan"] else 0.0
    text = (f"continuous batching needs {c['makespan']} steps, static {s['makespan']} ({slower:.0%} more): "
            "static refills its windows only when a whole batch is done. ")
    pool = f"the pool ({num_blocks} × {block_size} = {num_blocks * block_size:,} token slots)"
    t = runs["continuous"].timeline
    squeezed = sum(1 for r, w in zip(t["running"], t["waiting"]) if w and r < windows)
    if s["num_rejected"] == num_requests:
        return (f"Every one of the {num_requests} requests is larger than the pool ({num_blocks} × "
                f"{block_size} = {num_blocks * block_size:,} token slots): all are rejected, nothing runs.")
    if s["num_rejected"]:
        text += f"{s['num_rejected']} requests are larger than the whole pool and are rejected. "
    if c["num_preemptions"] or s["num_preemptions"]:
        text += (f"{pool[0].upper()}{pool[1:]} ran out of blocks as the requests grew: "
                 f"{c['num_preemptions']} preemptions (continuous), {s['num_preemptions']} (static), each "
                 "sent back to wait and compute its tokens again.")
    elif squeezed:
        text += (f"{pool[0].upper()}{pool[1:]} limited the batch: in {squeezed} of {c['makespan']} steps "
                 f"requests waited while windows stood free (at most {c['peak_running']} of {windows} busy), "
                 "but no running request had to be preempted.")
    elif num_requests <= windows:
        text += (f"With {num_requests} requests for {windows} windows, nobody waited for a window; {pool} "
                 f"was at most {c['peak_kv_usage']:.0%} full.")
    else:
        text += (f"The {windows} windows limited the batch: all were busy while requests waited, and {pool} "
                 f"was at most {c['peak_kv_usage']:.0%} full, so no request was preempted.")
    return text
