"""Pure figures for time (notebook 05, section 5): the throughput-latency curve and its playground.

``fig_throughput_latency`` draws points from ``paged_lab.sim.sweep``; ``latency_playground`` runs
the sweep for the numbers the sliders pick (cached per point), then draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.sim.sweep import DESIGNS, LABELS, RATES, CurvePoint, latency_sweep, saturation
from paged_lab.viz.tables import table

COLORS = {"static": "#ff7f0e", "contiguous": "#9467bd", "paged": "#1f77b4"}


@dataclass(frozen=True)
class CurveAxes:
    """Fixed axis ranges for the throughput-latency figure: output tokens per step, p90 TTFT (steps,
    drawn on a log axis) and p99 ITL (steps)."""

    tokens_per_step: float
    ttft: float
    itl: float


def fig_throughput_latency(points: Sequence[CurvePoint], highlight_rate: float | None = None,
                           title: str = "Throughput against latency, one point per arrival rate",
                           axes: CurveAxes | None = None) -> go.Figure:
    """Two panels sharing the x axis (output tokens per step): p90 TTFT (log scale) and p99 ITL, in
    steps. One line per design, one marker per arrival rate; ``highlight_rate``'s points are ringed.
    ``axes`` fixes the ranges (a playground's, from its sliders' bounds); without, they fit the points."""
    fig = make_subplots(1, 2, horizontal_spacing=0.1,
                        subplot_titles=("p90 time to first token (steps, log)",
                                        "p99 inter-token latency (steps)"))
    for design in DESIGNS:
        pts = sorted((p for p in points if p.design == design), key=lambda p: p.rate)
        if not pts:
            continue
        x = [p.tokens_per_step for p in pts]
        text = [f"rate {p.rate:g}/step · {p.tokens_per_step:.2f} tok/step · peak running {p.peak_running}"
                for p in pts]
        for col, y in ((1, [p.ttft_p90 for p in pts]), (2, [p.itl_p99 for p in pts])):
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=LABELS[design], text=text,
                                     hovertemplate="%{text}<br>%{y:.1f} steps<extra></extra>",
                                     line=dict(color=COLORS[design]), legendgroup=design,
                                     showlegend=col == 1), row=1, col=col)
        hot = [p for p in pts if highlight_rate is not None and abs(p.rate - highlight_rate) < 1e-9]
        for col, y in ((1, [p.ttft_p90 for p in hot]), (2, [p.itl_p99 for p in hot])):
            fig.add_trace(go.Scatter(x=[p.tokens_per_step for p in hot], y=y, mode="markers",
                                     showlegend=False, marker=dict(size=16, color="rgba(0,0,0,0)",
                                                 line=dict(color=COLORS[design], width=2)),
                                     legendgroup=design, hoverinfo="skip"), row=1, col=col)
    # 1, 10, 100: labelled ticks only
    fig.update_yaxes(type="log", dtick=1, minor=dict(ticks="", showgrid=False), row=1, col=1)
    fig.update_xaxes(title_text="throughput (output tokens per step)")
    if axes is not None:
        fig.update_xaxes(range=[0, axes.tokens_per_step])
        fig.update_yaxes(range=[-0.15, math.log10(axes.ttft)], row=1, col=1)
        fig.update_yaxes(range=[0.8, axes.itl], row=1, col=2)
    fig.update_layout(title=title, height=430, legend=dict(orientation="h", y=-0.25),
                      margin=dict(t=80 + 24 * title.count("<br>"), b=40))
    return fig


def _values(bounds: Mapping[str, tuple[float, float]] | None, name: str, value, step: float) -> list:
    """A few positions of the slider ``name``: its ends and its middle (its value alone without bounds)."""
    lo, hi = (bounds or {}).get(name, (value, value))
    mid = lo + round((hi - lo) / 2 / step) * step
    return sorted({lo, mid, hi})


@lru_cache(maxsize=16)
def _playground_axes(rates: tuple, rate_hi: float, block_sizes: tuple, sizes: tuple, kw: tuple) -> CurveAxes:
    """The ranges that hold the curve at every block size and workload size the sliders offer, at
    the sweep's rates and the highest rate the rate slider offers (the points furthest out)."""
    x = ttft = itl = 1.0
    for bs in block_sizes:
        for n in sizes:
            for p in latency_sweep(rates + (rate_hi,), block_size=int(bs), num_requests=int(n), **dict(kw)):
                x, ttft, itl = max(x, p.tokens_per_step), max(ttft, p.ttft_p90), max(itl, p.itl_p99)
    return CurveAxes(tokens_per_step=1.1 * x, ttft=2.0 * ttft, itl=max(2.0, 1.5 * itl))


def latency_playground(rate: float = 0.3, block_size: int = 16, num_requests: int = 150,
                       rates: Sequence[float] = RATES,
                       bounds: Mapping[str, tuple[float, float]] | None = None, **kw) -> go.Figure:
    """The sweep at ``rates`` plus the slider's ``rate`` (ringed), for one block size and workload size.

    ``bounds`` (``viz.widgets.slider_bounds(controls)``) are the sliders' ranges: the axes are fixed to
    hold the curve anywhere in them, so a slider moves the points, not the axes."""
    points = latency_sweep(tuple(rates) + (rate,), block_size=block_size, num_requests=num_requests, **kw)
    sat = saturation(points)
    b = bounds or {}
    lo, hi = b.get("block_size", (block_size, block_size))
    block_sizes = tuple(range(int(lo), int(hi) + 1, 8)) if "block_size" in b else (block_size,)
    axes = _playground_axes(tuple(rates), float(b.get("rate", (rate, rate))[1]), block_sizes,
                            tuple(_values(b, "num_requests", num_requests, 10)), tuple(sorted(kw.items())))
    return fig_throughput_latency(
        points, highlight_rate=rate, axes=axes,
        title=(f"{num_requests} requests, blocks of {block_size}<br>saturation (output tokens per step): "
               + ", ".join(f"{d} {sat[d]:.1f}" for d in DESIGNS)))


def latency_readout(fig: go.Figure, rate: float, block_size: int, num_requests: int) -> list:
    """Under the sliders: one sentence on why the designs differ at this rate, then the ringed points'
    numbers as a table (``viz.widgets.interactive`` shows both)."""
    points = {p.design: p for p in latency_sweep((rate,), block_size=block_size, num_requests=num_requests)}
    static, paged, contiguous = points["static"], points["paged"], points["contiguous"]
    if paged.ttft_p90 < contiguous.ttft_p90:
        why = (f"At {rate:g} arrivals per step, paged memory answers first: its p90 time to first token is "
               f"{paged.ttft_p90:.0f} steps against {contiguous.ttft_p90:.0f} (contiguous) and "
               f"{static.ttft_p90:.0f} (static), because blocks of {block_size} let {paged.peak_running} "
               "requests run at once where contiguous reservations capped the batch at "
               f"{contiguous.peak_running}.")
    else:
        why = (f"At {rate:g} arrivals per step memory is not the limit: contiguous and paged answer alike "
               f"(p90 time to first token {paged.ttft_p90:.0f} steps), and only static batching, at "
               f"{static.ttft_p90:.0f}, makes requests wait for a whole batch.")
    rows = {LABELS[d]: {"p90 TTFT (steps)": f"{p.ttft_p90:.0f}",
                        "output tokens per step": f"{p.tokens_per_step:.2f}",
                        "most running at once": p.peak_running} for d, p in points.items()}
    return [why, table(rows, index="design")]


def fig_chunked_prefill(runs, step_time=None, chat: str = "chat0",
                        title: str = ("A long prompt arrives: one big step, "
                                      "or chunks under a token budget")) -> go.Figure:
    """Per budget (``sched.timing.chunked_prefill_runs``): tokens computed per step (top) and the
    gap before each of ``chat``'s tokens in modelled milliseconds (bottom), against the step."""
    from paged_lab.sim.timing import StepTime, step_end_times

    step_time = StepTime() if step_time is None else step_time
    fig = make_subplots(2, 1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("tokens computed per step",
                                        f"{chat}: time since its previous token (ms)"))
    for (budget, r), color in zip(runs.items(), ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")):
        name = "no budget" if budget is None else f"max_num_batched_tokens={budget}"
        t = r.timeline
        fig.add_trace(go.Scatter(x=t["step"], y=[a + b for a, b in zip(t["prefill_tokens"],
                                                                       t["decode_tokens"])],
                                 name=name, line=dict(color=color, shape="hv"), legendgroup=name), row=1,
                      col=1)
        end = step_end_times(r, step_time)
        steps = next(q["output_steps"] for q in r.requests if q["name"] == chat)
        fig.add_trace(go.Scatter(x=steps[1:], y=[1e3 * (end[b] - end[a]) for a, b in zip(steps, steps[1:])],
                                 mode="lines+markers", line=dict(color=color), showlegend=False,
                                 legendgroup=name),
                      row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(title=title, height=520, margin=dict(t=90, b=40))
    return fig
