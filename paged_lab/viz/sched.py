"""Pure figures for scheduling (notebooks 02 and 05): lockers, windows (Gantt), timelines, waste bars.

Each function takes simulation results (or the few numbers a slider sets) and returns a plotly
Figure; nothing here mutates state. The ``*_playground`` functions run ``simulate()`` on the
numbers a slider picks, then draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.sched import ContiguousAllocator, SimResult, paged, simulate, workloads

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FREE = "#e5e5e5"


def _color(name: str, order: Sequence[str]) -> str:
    """A stable colour per name: its place in ``order`` (names not listed share the last colour)."""
    return PALETTE[order.index(name) % len(PALETTE)] if name in order else PALETTE[-1]


def fig_lockers(panels: Mapping[str, Sequence[tuple[str | None, bool]]], cols: int = 12,
                title: str = "The lockers", subtitles: Mapping[str, str] | None = None) -> go.Figure:
    """Slot maps side by side: one square per locker, coloured by owner.

    ``panels``: label -> ``[(owner or None, holds_token), ...]`` (``SimResult.slot_map_at``). A solid
    square holds luggage; a pale one is reserved but empty (the old manager's waste); grey is free.
    """
    if not panels:
        raise ValueError("panels must hold at least one slot map")
    labels = list(panels)
    owners = sorted({o for m in panels.values() for o, _ in m if o is not None})
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
        rows = -(-len(slots) // cols)
        fig.update_xaxes(visible=False, range=[-0.7, cols - 0.3], row=1, col=c)
        fig.update_yaxes(visible=False, range=[rows - 0.3, -0.7], row=1, col=c)
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top"),
                      height=190 + 34 * max(-(-len(m) // cols) for m in panels.values()),
                      margin=dict(t=110, b=10, l=20, r=20), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.02, yanchor="top", title_text="pale = reserved, empty  "))
    return fig


def fig_gantt(results: Mapping[str, SimResult], title: str = "Who sits at which window, round by round"
              ) -> go.Figure:
    """One row of subplots per result: windows on the y axis, rounds (steps) on the x axis.

    A bar is one request's stay at a window; a hatched bar ended in preemption (its KV was dropped
    or swapped out) and the request came back later.
    """
    if not results:
        raise ValueError("results must hold at least one SimResult")
    labels = list(results)
    names = sorted({s.name for r in results.values() for s in r.spans},
                   key=lambda n: (len(n), n))
    fig = make_subplots(len(labels), 1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"{lb}: {results[lb].makespan} rounds" for lb in labels])
    shown = set()
    for row, lb in enumerate(labels, start=1):
        for s in results[lb].spans:
            color = _color(s.name, names)
            cut = s.outcome != "finished"
            fig.add_trace(go.Bar(
                y=[f"window {s.window + 1}"], x=[s.end - s.start + 1], base=[s.start - 0.5], orientation="h",
                marker=dict(color=color, pattern_shape="/" if cut else "", line=dict(color="white", width=1)),
                text=[s.name], textposition="inside", insidetextanchor="middle", name=s.name,
                legendgroup=s.name, showlegend=s.name not in shown, legendrank=names.index(s.name),
                hovertemplate=f"{s.name}: rounds {s.start + 1}-{s.end + 1} ({s.outcome})<extra></extra>"),
                row=row, col=1)
            shown.add(s.name)
        windows = sorted({s.window for s in results[lb].spans})
        fig.update_yaxes(categoryorder="array", categoryarray=[f"window {w + 1}" for w in reversed(windows)],
                         row=row, col=1)
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


def fig_memory_bars(results: Mapping[str, SimResult], title: str = "Where the KV memory goes") -> go.Figure:
    """Stacked bars per result: of all slots over all steps, the share holding tokens, reserved
    but empty (internal fragmentation), stranded in holes (external), and free."""
    if not results:
        raise ValueError("results must hold at least one SimResult")
    labels = list(results)
    parts = {lb: waste_breakdown(r) for lb, r in results.items()}
    colors = {"tokens": "#2ca02c", "reserved, empty": "#ff7f0e", "holes too small": "#d62728", "free": FREE}
    fig = go.Figure([go.Bar(x=labels, y=[parts[lb][k] for lb in labels], name=k, marker_color=c,
                            text=[f"{parts[lb][k]:.1f}%" for lb in labels], textposition="inside")
                     for k, c in colors.items()])
    fig.update_layout(title=title, barmode="stack", yaxis_title="% of slot-steps", height=380,
                      margin=dict(t=60, b=40))
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
                      num_slots: int = 60, reservation: int = 12, block_size: int = 1, step: int = 0
                      ) -> go.Figure:
    """The lockers after round ``step + 1``, old manager vs Ah-Ye, for the luggage A..F."""
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
    return fig_lockers(panels, cols=12, subtitles=subs,
                       title=f"Round {step + 1}: luggage A-F = {(A, B, C, D, E, F)}, {sum((A, B, C, D, E, F))} in all")


PLAYGROUND_PROMPT, PLAYGROUND_OUTPUT = (16, 64), (8, 64)  # token ranges of the batching playground's requests


def batching_runs(num_requests: int = 40, windows: int = 8, num_blocks: int = 64, block_size: int = 16,
                  seed: int = 0, preemption: str = "recompute"):
    """A uniform workload (prompt 16-64, output 8-64 tokens) under static and continuous batching
    over the same paged pool: ``{"static": SimResult, "continuous": SimResult}``."""
    wl = workloads.uniform(num_requests, prompt_len=PLAYGROUND_PROMPT, output_len=PLAYGROUND_OUTPUT, seed=seed)
    return {mode: simulate(wl, paged(num_blocks, block_size),
                           {"max_num_seqs": windows, "mode": mode, "preemption": preemption})
            for mode in ("static", "continuous")}


MODE_COLORS = {"static": "#ff7f0e", "continuous": "#1f77b4"}
# Preemption marks: a darker shade and its own symbol per mode, so the two runs' marks never look alike.
PREEMPT_MARKS = {"static": dict(symbol="x", color="#8c3d00"), "continuous": dict(symbol="diamond", color="#0b3d6b")}


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
    """Running requests and KV usage per step, static vs continuous, with each run's preemptions marked."""
    runs = batching_runs(num_requests, windows, num_blocks, block_size, seed)
    fig = make_subplots(2, 1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("requests running (at most one per window)", "KV pool in use (%)"))
    for mode, r in runs.items():
        t, color = r.timeline, MODE_COLORS[mode]
        fig.add_trace(go.Scatter(x=t["step"], y=t["running"], name=f"{mode} batching: {r.makespan} steps",
                                 line=dict(color=color), legendgroup=mode), row=1, col=1)
        fig.add_trace(go.Scatter(x=t["step"], y=[100 * u for u in t["kv_usage"]], showlegend=False,
                                 line=dict(color=color), legendgroup=mode), row=2, col=1)
        pre = [i for i, p in enumerate(t["preempted"]) if p]
        fig.add_trace(go.Scatter(x=pre, y=[100 * t["kv_usage"][i] for i in pre], mode="markers",
                                 marker=dict(size=9, **PREEMPT_MARKS[mode]),
                                 name=f"{mode}: preemption ({r.summary['num_preemptions']})"),
                      row=2, col=1)
    s, c = runs["static"].summary, runs["continuous"].summary
    rej = f", {s['num_rejected']} rejected (too large for the pool)" if s["num_rejected"] else ""
    fig.update_layout(title=(f"{num_requests} requests, {windows} windows, a pool of {num_blocks} blocks × {block_size} "
                             f"tokens<br>static {s['makespan']} vs continuous {c['makespan']} steps{rej}"),
                      height=560, margin=dict(t=115, b=40), legend=dict(orientation="h", y=-0.14))
    # Fixed axes: a slider move changes the curves, not the scale they are read against.
    fig.update_yaxes(range=[0, windows * 1.05], title_text="requests", row=1, col=1)
    fig.update_yaxes(range=[0, 105], title_text="% of slots", row=2, col=1)
    fig.update_xaxes(range=[0, nice_ceil(max(s["makespan"], c["makespan"]))])
    fig.update_xaxes(title_text="engine step", row=2, col=1)
    return fig


def locker_readout(fig: go.Figure, A: int, B: int, C: int, D: int, E: int, F: int, num_slots: int,
                   reservation: int, block_size: int, step: int) -> str:
    """Under the locker sliders: what each manager's rule did this round, and what it cost."""
    total = A + B + C + D + E + F
    verdict = "fits" if total <= num_slots else "does not fit: Ah-Ye must make someone wait"
    old, new = locker_runs((A, B, C, D, E, F), num_slots, reservation, block_size)
    return (f"round {step + 1} · total luggage {total} for {num_slots} lockers ({verdict}) · "
            f"old manager, {reservation} lockers a traveller → {_locker_round(old, step)} · "
            f"Ah-Ye, rows of {block_size} as the luggage grows → {_locker_round(new, step)}")


def _locker_round(r: SimResult, step: int) -> str:
    """One manager's round ``step`` in a few words: who is inside, who waits, what stands empty."""
    if step >= r.makespan:
        return f"everyone left after round {r.makespan}"
    t = r.timeline
    empty = t["reserved_slots"][step] - t["used_slots"][step]
    turned_away = f", {len(r.rejected)} turned away" if r.rejected else ""
    return (f"{t['running'][step]} inside, {t['waiting'][step]} waiting{turned_away}, "
            f"{empty} handed-out lockers empty")


def batching_readout(fig: go.Figure | None, num_requests: int, windows: int, num_blocks: int, block_size: int,
                     seed: int = 0) -> str:
    """What the sliders' setting did, and why: static vs continuous steps, and whether the pool
    covers every window's longest request (else: preemptions)."""
    runs = batching_runs(num_requests, windows, num_blocks, block_size, seed)
    s, c = runs["static"].summary, runs["continuous"].summary
    longest = PLAYGROUND_PROMPT[1] + PLAYGROUND_OUTPUT[1]
    need = windows * -(-longest // block_size)
    slower = s["makespan"] / c["makespan"] - 1 if c["makespan"] else 0.0
    text = (f"continuous batching needs {c['makespan']} steps, static {s['makespan']} ({slower:.0%} more): "
            "static refills its windows only when a whole batch is done. ")
    pool = f"The pool ({num_blocks} × {block_size} = {num_blocks * block_size:,} token slots)"
    if num_blocks < need:
        text += (f"{pool} holds fewer blocks than {windows} windows of {longest}-token requests need ({need}) "
                 f"→ {c['num_preemptions']} preemptions (continuous), {s['num_preemptions']} (static).")
    else:
        text += f"{pool} covers {windows} windows of {longest}-token requests ({need} blocks) → no preemption."
    if s["num_rejected"]:
        text += f" {s['num_rejected']} requests are larger than the whole pool and are rejected."
    return text
