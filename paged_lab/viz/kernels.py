"""Pure figures for the paged-attention kernel (notebook 06 and benchmarks/kernel_bench.py).

Each function takes tensors or numbers and returns a plotly Figure; nothing here runs a kernel, and
nothing here computes what it draws twice: the online softmax's running values and the split-KV
weights come from ``kernels.stepwise``, the block-size trade-off from ``kernels.tradeoff``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.kernels import stepwise
from paged_lab.kernels.tradeoff import block_size_cost
from paged_lab.kv_math import cdiv

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
FREE = "#e5e5e5"
DEFAULT_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def fig_paged_pool(block_tables, context_lens, num_blocks: int, block_size: int,
                   title: str | None = None) -> go.Figure:
    """The physical pool, one row per block and one cell per slot, coloured by the sequence that owns it.

    Shows what "scattered pages" means: a sequence's blocks sit anywhere in the pool, in the order its
    block table lists them; the pale cells of a last block are slots allocated but still empty.
    """
    tables = [list(map(int, row)) for row in block_tables]
    lens = [int(n) for n in context_lens]
    z = [[-1.0] * block_size for _ in range(num_blocks)]  # -1 free, s owner, s + 0.5 allocated but empty
    text = [[""] * block_size for _ in range(num_blocks)]
    for s, (row, n) in enumerate(zip(tables, lens)):
        for j in range(cdiv(n, block_size)):
            for off in range(block_size):
                pos = j * block_size + off
                z[row[j]][off] = s + (0.0 if pos < n else 0.5)
                text[row[j]][off] = f"seq {s}, token {pos}" if pos < n else f"seq {s}, empty slot"
    colorscale, n_seq = [], max(1, len(tables))
    stops = [(-1.0, FREE)] + [(s + h, PALETTE[s % len(PALETTE)] if h == 0
                               else _pale(PALETTE[s % len(PALETTE)]))
                              for s in range(n_seq) for h in (0.0, 0.5)]
    lo, hi = -1.0, n_seq - 0.5
    for v, c in stops:
        colorscale.append(((v - lo) / (hi - lo), c))
    fig = go.Figure(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=colorscale, zmin=lo, zmax=hi,
                               showscale=False, xgap=1, ygap=1, name="pool", showlegend=False))
    # The heatmap's colours get a legend of their own (a colour bar would suggest a scale of numbers).
    keys = [(f"sequence {s}", PALETTE[s % len(PALETTE)]) for s in range(len(tables))]
    keys += [("empty slot of a last block (pale)", "#cccccc"), ("free block", FREE)]
    for name, color in keys:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                                 marker=dict(symbol="square", size=12, color=color,
                                             line=dict(color="#999", width=1))))
    fig.update_layout(
        title=title or f"The KV pool: {num_blocks} blocks x {block_size} slots, {len(tables)} sequences",
        xaxis_title="slot offset in the block", yaxis_title="physical block id",
        yaxis=dict(autorange="reversed", dtick=1 if num_blocks <= 24 else None),
        height=max(260, min(640, 22 * num_blocks + 120)), margin=dict(t=60, b=40),
        legend=dict(title_text="colour = owner"),
    )
    return fig


def _pale(hex_color: str) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return "#{:02x}{:02x}{:02x}".format(*(int(c + (255 - c) * 0.7) for c in (r, g, b)))


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1, 10, 100, ... covering [lo, hi]: the only labelled ticks of a log axis (no unlabelled minor ones)."""
    first = math.floor(math.log10(max(lo, 1e-9)))
    return [10.0**e for e in range(first, math.ceil(math.log10(max(hi, 1e-9))) + 1)]


def fig_block_size_tradeoff(context_lens: Sequence[int], block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
                            highlight: int | None = None, lookups_range: tuple[float, float] | None = None,
                            waste_top: float | None = None) -> go.Figure:
    """Two panels over the same block sizes: table entries (lookups) per sequence, and the share of
    slots left empty in last blocks. Side by side, not on twin axes: two curves with different units
    on one plot seem to cross at a point that means nothing. ``lookups_range`` (entries, low and high)
    and ``waste_top`` (%) fix the axes, as a playground does for every position of its sliders."""
    if not block_sizes or min(block_sizes) < 1:
        raise ValueError(f"block_sizes must be a non-empty list of sizes >= 1, got {list(block_sizes)}")
    costs = [block_size_cost(context_lens, b) for b in block_sizes]
    lookups = [c.lookups_per_seq for c in costs]
    waste = [100 * c.waste_frac for c in costs]
    fig = make_subplots(1, 2, horizontal_spacing=0.14, subplot_titles=(
        "table entries (lookups) per sequence", "slots empty in last blocks (%)"))
    fig.add_trace(go.Scatter(x=list(block_sizes), y=lookups, mode="lines+markers",
                             name="lookups per sequence",
                             line=dict(color=PALETTE[0]), showlegend=False), row=1, col=1)
    fig.add_trace(go.Scatter(x=list(block_sizes), y=waste, mode="lines+markers", name="% of slots empty",
                             line=dict(color=PALETTE[3]), showlegend=False), row=1, col=2)
    if highlight is not None:
        for col in (1, 2):
            fig.add_vline(x=highlight, line_dash="dot", line_color="#555", row=1, col=col)
    sizes = [str(b) for b in block_sizes]
    fig.update_xaxes(type="log", tickvals=list(block_sizes), ticktext=sizes,
                     minor=dict(ticks="", showgrid=False),
                     title_text="block size (tokens per block)")
    lo, hi = lookups_range or (min(lookups), max(lookups))
    ticks = _log_ticks(lo, hi)
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:,.0f}" if t >= 1 else f"{t:g}"
                                                           for t in ticks],
                     minor=dict(ticks="", showgrid=False), title_text="entries per sequence (log scale)",
                     row=1, col=1)
    if lookups_range:
        fig.update_yaxes(range=[math.log10(lo) - 0.1, math.log10(hi) + 0.1], row=1, col=1)
    top = waste_top or 10 * math.ceil(max(waste + [1.0]) / 10)  # whole tens: 0, 10, 20, ... percent
    fig.update_yaxes(range=[0, top], dtick=10 if top <= 60 else 20, ticksuffix="%", title_text="empty slots",
                     row=1, col=2)
    title = f"Block-size trade-off over {len(context_lens)} sequences ({sum(context_lens):,} tokens)"
    if highlight is not None:
        title += f"; dotted: blocks of {highlight}"
    fig.update_layout(title=title, height=380, margin=dict(t=80, b=50))
    return fig


def sample_context_lens(num_seqs: int, mean_context: int, seed: int = 0) -> list[int]:
    """Context lengths spread uniformly over [mean/2, 3*mean/2] (deterministic for a seed)."""
    rng = random.Random(seed)
    lo, hi = max(1, mean_context // 2), max(1, mean_context * 3 // 2)
    return [rng.randint(lo, hi) for _ in range(num_seqs)]


def tradeoff_playground(block_size: int, mean_context: int, num_seqs: int, seed: int = 0,
                        bounds: Mapping[str, tuple[int, int]] | None = None) -> go.Figure:
    """Slider entry point: the trade-off for a sampled workload, with ``block_size`` marked.

    ``bounds`` (``viz.widgets.slider_bounds(controls)``): with the ``mean_context`` slider's range the
    axes hold every position (from 1 table entry to one per token of the longest context; empty slots
    up to 100%), so the sliders move the curves, not the axes."""
    lens = sample_context_lens(num_seqs, mean_context, seed)
    if not bounds or "mean_context" not in bounds:
        return fig_block_size_tradeoff(lens, highlight=block_size)
    # a table has at least 1 entry, at most this many
    longest = max(1, int(bounds["mean_context"][1]) * 3 // 2)
    return fig_block_size_tradeoff(lens, highlight=block_size, waste_top=100, lookups_range=(1, longest))


def tradeoff_readout(fig=None, *, block_size: int, mean_context: int, num_seqs: int, seed: int = 0) -> str:
    """What the chosen block size costs for this workload, and why."""
    c = block_size_cost(sample_context_lens(num_seqs, mean_context, seed), block_size)
    return (f"blocks of {block_size}: {c.lookups_per_seq:.1f} table entries per sequence (about "
            f"{mean_context} tokens ÷ {block_size} per block); {c.wasted_slots:,} of {c.slots:,} slots empty "
            f"({100 * c.waste_frac:.1f}%), because each sequence's last block is on average half empty "
            f"(≈ {block_size / 2:g} slots of {block_size}).")


def fig_kernel_bench(rows: Sequence[Mapping], metric: str = "pct_peak") -> go.Figure:
    """Measured decode results (``paged_lab.tools.kernel_bench`` rows): one line per (batch, block size).

    ``metric``: ``"pct_peak"`` (achieved K+V bandwidth as % of the GPU's peak), ``"gbs"`` or
    ``"vs_sdpa"`` (Triton time / SDPA time on a contiguous cache; below 1 is faster).
    """
    labels = {"pct_peak": "achieved bandwidth (% of peak)", "gbs": "achieved bandwidth (GB/s)",
              "vs_sdpa": "Triton time / SDPA time"}
    if metric not in labels:
        raise ValueError(f"metric must be one of {tuple(labels)}, got {metric!r}")
    fig = go.Figure()
    keys = sorted({(r["batch"], r["block_size"]) for r in rows})
    for i, (batch, bs) in enumerate(keys):
        pts = sorted((r for r in rows if (r["batch"], r["block_size"]) == (batch, bs)
                      and r.get(metric) is not None),
                     key=lambda r: r["context_len"])
        fig.add_trace(go.Scatter(x=[r["context_len"] for r in pts], y=[r[metric] for r in pts],
                                 mode="lines+markers",
                                 name=f"batch {batch}, block {bs}",
                                 line=dict(color=PALETTE[i % len(PALETTE)])))
    device = rows[0].get("device", "") if rows else ""
    fig.update_layout(title=f"Paged decode on {device}: {labels[metric]}",
                      xaxis_title="context length (tokens)",
                      yaxis_title=labels[metric], xaxis_type="log", height=400, margin=dict(t=60, b=40))
    return fig


# -- the steps of notebook 06, as pictures ---------------------------------------------------------
TOKEN, EMPTY = "#1f77b4", "#d62728"


def fig_last_block_mask(context_len: int, block_size: int, table: Sequence[int] | None = None) -> go.Figure:
    """One sequence's blocks as rows of slots: the slots that hold tokens, and the empty tail of the
    last block that a kernel must mask twice (load as 0, score as -inf)."""
    if context_len < 1 or block_size < 1:
        raise ValueError(f"context_len and block_size must be >= 1, got {context_len} and {block_size}")
    num_blocks = cdiv(context_len, block_size)
    table = list(table) if table is not None else list(range(num_blocks))
    if len(table) < num_blocks:
        raise ValueError(f"table lists {len(table)} blocks; {context_len} tokens need {num_blocks}")
    rows = [f"logical {j} → block {int(table[j])}" for j in range(num_blocks)]
    z = [[1 if j * block_size + off < context_len else 0 for off in range(block_size)]
         for j in range(num_blocks)]
    text = [[str(j * block_size + off) if j * block_size + off < context_len else "×"
             for off in range(block_size)]
            for j in range(num_blocks)]
    tail = num_blocks * block_size - context_len
    fig = go.Figure(go.Heatmap(z=z, x=list(range(block_size)), y=rows, text=text, texttemplate="%{text}",
                               colorscale=[(0, EMPTY), (1, TOKEN)], zmin=0, zmax=1, showscale=False, xgap=2,
                               ygap=2, hoverinfo="skip", showlegend=False))
    for name, color in ((f"token position: load it, score it ({context_len})", TOKEN),
                        (f"empty slot: load 0, score −∞ ({tail})", EMPTY)):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=color)))
    fig.update_layout(title=f"{context_len} tokens in {num_blocks} blocks of {block_size}: "
                            f"the last block has {tail} empty slot{'s' if tail != 1 else ''}",
                      xaxis_title="slot in the block", yaxis=dict(autorange="reversed"),
                      height=140 + 34 * num_blocks, margin=dict(t=60, b=40),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def fig_online_softmax(block_scores: Sequence[Sequence[float]], head: int = 0) -> go.Figure:
    """Top: every score, block by block, and the running max m. Bottom: the running sum l after each
    block; where a block raised the max, the old sum was first scaled down by exp(m_old - m_new)."""
    trace = stepwise.online_softmax_trace(block_scores)
    ends = [sum(len(s) for s in block_scores[: j + 1]) - 1 for j in range(len(block_scores))]
    fig = make_subplots(2, 1, shared_xaxes=True, vertical_spacing=0.12, row_heights=[0.6, 0.4],
                        subplot_titles=("scores q·k × scale, and the running max m",
                                        "running sum l = Σ exp(score − m)"))
    start = 0
    for j, scores in enumerate(block_scores):
        fig.add_trace(go.Scatter(x=list(range(start, start + len(scores))), y=list(scores), mode="markers",
                                 marker=dict(color=PALETTE[j % 2 * 7], size=7), name=f"block {j}",
                                 showlegend=False,
                                 hovertemplate=f"block {j}, token %{{x}}: %{{y:.2f}}<extra></extra>"),
                      row=1, col=1)
        start += len(scores)
    fig.add_trace(go.Scatter(x=[-0.5] + [e + 0.5 for e in ends],
                             y=[trace[0]["max"]] + [t["max"] for t in trace],
                             mode="lines", line=dict(shape="vh", color="#333"), name="running max m"),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=ends, y=[t["sum"] for t in trace], name="l after the block",
                         marker_color=[EMPTY if t["rescale"] < 1 else PALETTE[2] for t in trace],
                         text=[f"×{t['rescale']:.2f} first" if t["rescale"] < 1 else "" for t in trace],
                         textposition="outside"), row=2, col=1)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="max rose: old l rescaled",
                             marker=dict(symbol="square", size=12, color=EMPTY)), row=2, col=1)
    fig.update_xaxes(title_text="token position (a block ends at each bar)", row=2, col=1)
    fig.update_yaxes(range=[0, 1.25 * max(t["sum"] for t in trace)], row=2, col=1)
    fig.update_layout(title=f"Online softmax over {len(block_scores)} blocks, query head {head}: "
                            "one pass, three running values", height=480, margin=dict(t=80, b=40),
                      legend=dict(orientation="h", y=-0.15))
    return fig


def fig_split_merge(lse: Sequence[float], labels: Sequence[str]) -> go.Figure:
    """One bar per split-KV partition: its weight in the log-sum-exp merge (the weights add up to 1)."""
    if len(lse) != len(labels):
        raise ValueError(f"lse and labels must have the same length, got {len(lse)} and {len(labels)}")
    w = stepwise.split_weights(lse)
    text = [f"lse {x:.2f} → {100 * v:.0f}%" if x != -math.inf else "empty: lse −∞ → 0%"
            for x, v in zip(lse, w)]
    fig = go.Figure(go.Bar(x=list(labels), y=[100 * v for v in w], text=text, textposition="outside",
                           marker_color=[PALETTE[i % len(PALETTE)] for i in range(len(w))]))
    fig.update_layout(title="Split-KV: each partition's partial output, "
                            "weighted by exp(lse − logsumexp(lse))",
                      yaxis=dict(title="weight in the merge (%)", range=[0, 115]), height=360,
                      margin=dict(t=70, b=40))
    return fig
