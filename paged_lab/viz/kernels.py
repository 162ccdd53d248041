"""Pure figures for the paged-attention kernel (notebook 06 and benchmarks/kernel_bench.py).

Each function takes tensors or numbers and returns a plotly Figure; nothing here runs a kernel.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.kernels.tradeoff import block_size_cost

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
FREE = "#e5e5e5"
DEFAULT_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def fig_paged_pool(block_tables, context_lens, num_blocks: int, block_size: int, title: str | None = None) -> go.Figure:
    """The physical pool, one row per block and one cell per slot, coloured by the sequence that owns it.

    Shows what "scattered pages" means: a sequence's blocks sit anywhere in the pool, in the order its
    block table lists them; the pale cells of a last block are slots allocated but still empty.
    """
    tables = [list(map(int, row)) for row in block_tables]
    lens = [int(n) for n in context_lens]
    z = [[-1.0] * block_size for _ in range(num_blocks)]  # -1 free, s owner, s + 0.5 allocated but empty
    text = [[""] * block_size for _ in range(num_blocks)]
    for s, (row, n) in enumerate(zip(tables, lens)):
        for j in range(-(-n // block_size)):
            for off in range(block_size):
                pos = j * block_size + off
                z[row[j]][off] = s + (0.0 if pos < n else 0.5)
                text[row[j]][off] = f"seq {s}, token {pos}" if pos < n else f"seq {s}, empty slot"
    colorscale, n_seq = [], max(1, len(tables))
    stops = [(-1.0, FREE)] + [(s + h, PALETTE[s % len(PALETTE)] if h == 0 else _pale(PALETTE[s % len(PALETTE)]))
                              for s in range(n_seq) for h in (0.0, 0.5)]
    lo, hi = -1.0, n_seq - 0.5
    for v, c in stops:
        colorscale.append(((v - lo) / (hi - lo), c))
    fig = go.Figure(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=colorscale, zmin=lo, zmax=hi,
                               showscale=False, xgap=1, ygap=1))
    fig.update_layout(
        title=title or f"The KV pool: {num_blocks} blocks x {block_size} slots, {len(tables)} sequences",
        xaxis_title="slot offset in the block", yaxis_title="physical block id",
        yaxis=dict(autorange="reversed", dtick=1 if num_blocks <= 24 else None),
        height=max(260, min(640, 22 * num_blocks + 120)), margin=dict(t=60, b=40),
    )
    return fig


def _pale(hex_color: str) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return "#{:02x}{:02x}{:02x}".format(*(int(c + (255 - c) * 0.7) for c in (r, g, b)))


def fig_block_size_tradeoff(context_lens: Sequence[int], block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
                            highlight: int | None = None) -> go.Figure:
    """Lookups per sequence (block-table entries) against the share of slots wasted in last blocks."""
    costs = [block_size_cost(context_lens, b) for b in block_sizes]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=list(block_sizes), y=[c.lookups_per_seq for c in costs], mode="lines+markers",
                             name="table entries (lookups) per sequence", line=dict(color=PALETTE[0])))
    fig.add_trace(go.Scatter(x=list(block_sizes), y=[100 * c.waste_frac for c in costs], mode="lines+markers",
                             name="slots wasted in last blocks (%)", line=dict(color=PALETTE[3])),
                  secondary_y=True)
    if highlight is not None:
        fig.add_vline(x=highlight, line_dash="dot", line_color="#555")
    fig.update_xaxes(type="log", tickvals=list(block_sizes), title_text="block size (tokens per block)")
    fig.update_yaxes(type="log", title_text="lookups per sequence", secondary_y=False)
    fig.update_yaxes(title_text="wasted slots (%)", rangemode="tozero", secondary_y=True)
    fig.update_layout(title=f"Block-size trade-off over {len(context_lens)} sequences "
                            f"({sum(context_lens):,} tokens)", height=380, margin=dict(t=60, b=40),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def sample_context_lens(num_seqs: int, mean_context: int, seed: int = 0) -> list[int]:
    """Context lengths spread uniformly over [mean/2, 3*mean/2] (deterministic for a seed)."""
    rng = random.Random(seed)
    lo, hi = max(1, mean_context // 2), max(1, mean_context * 3 // 2)
    return [rng.randint(lo, hi) for _ in range(num_seqs)]


def tradeoff_playground(block_size: int, mean_context: int, num_seqs: int, seed: int = 0) -> go.Figure:
    """Slider entry point: the trade-off for a sampled workload, with ``block_size`` marked."""
    return fig_block_size_tradeoff(sample_context_lens(num_seqs, mean_context, seed), highlight=block_size)


def tradeoff_readout(fig=None, *, block_size: int, mean_context: int, num_seqs: int, seed: int = 0) -> str:
    c = block_size_cost(sample_context_lens(num_seqs, mean_context, seed), block_size)
    return (f"block size {block_size}: {c.lookups_per_seq:.1f} table entries per sequence, "
            f"{c.wasted_slots:,} of {c.slots:,} slots empty ({100 * c.waste_frac:.1f}%)")


def fig_kernel_bench(rows: Sequence[Mapping], metric: str = "pct_peak") -> go.Figure:
    """Measured decode results (``paged_lab.kernels.bench`` rows): one line per (batch, block size).

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
        pts = sorted((r for r in rows if (r["batch"], r["block_size"]) == (batch, bs) and r.get(metric) is not None),
                     key=lambda r: r["context_len"])
        fig.add_trace(go.Scatter(x=[r["context_len"] for r in pts], y=[r[metric] for r in pts], mode="lines+markers",
                                 name=f"batch {batch}, block {bs}", line=dict(color=PALETTE[i % len(PALETTE)])))
    device = rows[0].get("device", "") if rows else ""
    fig.update_layout(title=f"Paged decode on {device}: {labels[metric]}", xaxis_title="context length (tokens)",
                      yaxis_title=labels[metric], xaxis_type="log", height=400, margin=dict(t=60, b=40))
    return fig
