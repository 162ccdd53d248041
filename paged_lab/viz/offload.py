"""A tier hit as a picture (notebook 09): where each block of a request's KV comes from.

A returning request's blocks come from three places: the GPU prefix cache (its blocks are still in the
pool), the CPU tier (``LLM(kv_offloading_size=...)``: loaded back through the block table), or the forward
(computed again). ``fig_tier_hit`` draws one row of blocks per run, coloured by that source; the counts come
from a real run (``RequestOutput.num_cached_tokens`` and ``stats()["external_prefix_cache_hits"]``) or
from ``memory.offload.connector.blocks_to_load``. Nothing here decides anything the connector does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from paged_lab.kv_math import cdiv

SOURCES = {"gpu": ("GPU prefix cache", "#2ca02c"), "tier": ("loaded from the CPU tier", "#1f77b4"),
           "compute": ("computed", "#d9d9d9")}


def block_sources(num_tokens: int, block_size: int, gpu_hit_tokens: int, tier_hit_tokens: int) -> list[str]:
    """Per block of a ``num_tokens``-token request: "gpu", "tier" or "compute" (hits are whole blocks, the
    GPU's first, then the tier's)."""
    for name, value in (("gpu_hit_tokens", gpu_hit_tokens), ("tier_hit_tokens", tier_hit_tokens)):
        if value < 0 or value % block_size:
            raise ValueError(f"{name} must be a multiple of block_size={block_size} and >= 0, got {value}")
    if gpu_hit_tokens + tier_hit_tokens > num_tokens:
        raise ValueError(f"gpu_hit_tokens + tier_hit_tokens = {gpu_hit_tokens + tier_hit_tokens} is more "
                         f"than num_tokens={num_tokens}")
    gpu, tier = gpu_hit_tokens // block_size, tier_hit_tokens // block_size
    return ["gpu" if i < gpu else "tier" if i < gpu + tier else "compute"
            for i in range(cdiv(num_tokens, block_size))]


def fig_tier_hit(rows: Sequence[tuple[str, list[str]]], block_size: int,
                 title: str = "Where a returning request's KV comes from") -> go.Figure:
    """One row of boxes per ``(label, block_sources(...))``, top to bottom; one legend entry per source
    (a scatter trace named after it, its boxes' block indices in ``x``)."""
    if not rows:
        raise ValueError("rows is empty: give at least one (label, sources) row")
    fig = go.Figure()
    labels = [label for label, _ in rows]
    for source, (name, color) in SOURCES.items():
        xs = [i for _, row in rows for i, s in enumerate(row) if s == source]
        ys = [label for label, row in rows for s in row if s == source]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=name, marker=dict(symbol="square", size=22, color=color,
                                                               line=dict(color="#525252", width=1)),
            hovertext=[f"{y}: block {x} (tokens {x * block_size}-{(x + 1) * block_size - 1}): {name}"
                       for x, y in zip(xs, ys)], hoverinfo="text"))
    width = max(len(row) for _, row in rows)
    fig.update_layout(title=title, height=140 + 60 * len(rows), margin=dict(t=60, b=40, l=120),
                      xaxis=dict(title=f"block of the request ({block_size} tokens each)",
                                 range=[-0.7, width - 0.3], dtick=1 if width <= 40 else None),
                      yaxis=dict(categoryorder="array", categoryarray=labels[::-1]),
                      legend=dict(orientation="h", y=-0.35, yanchor="top"))
    return fig
