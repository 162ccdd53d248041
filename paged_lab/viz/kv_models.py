"""Pure figures for KV memory in today's models (notebook 08): MLA latents, sliding windows.

Each takes rows of :func:`paged_lab.kv_math.kv_models_table` and returns a plotly Figure; the words
are English and ``viz.i18n`` translates them when a figure is shown.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from paged_lab.viz.kv import KIND_COLORS


def kv_per_token_figure(rows: Sequence[dict]) -> go.Figure:
    """KV-cache bytes per token of context, one bar per model, coloured by attention kind.

    A bar is ``bytes_per_token`` at the rows' ``context``: the request's bytes divided by its tokens, so a
    model with sliding-window layers costs less per token once the context passes its window. The x axis
    is linear whatever the spread: the ratio between two models is the lesson (on a log axis 512 KiB
    against 128 looked like 1.4 times), and a short bar keeps its number beside it."""
    if not rows:
        raise ValueError("rows must hold at least one model (kv_math.kv_models_table)")
    contexts = {r["context"] for r in rows}
    dtypes = {r["dtype"] for r in rows}
    if len(contexts) != 1 or len(dtypes) != 1:
        raise ValueError(f"rows must share one context and one dtype, got contexts {sorted(contexts)} "
                         f"and dtypes {sorted(dtypes)}")
    (context,), (dtype,) = contexts, dtypes
    kib = [r["bytes_per_token"] / 1024 for r in rows]
    fig = go.Figure(
        go.Bar(
            y=[r["model"] for r in rows],
            x=kib,
            orientation="h",
            marker_color=[KIND_COLORS[r["attention_kind"]] for r in rows],
            text=[f"{k:,.1f} KiB ({r['attention_kind']})" for k, r in zip(kib, rows)],
            textposition="outside",
            cliponaxis=False,
            hovertext=[_hover(r) for r in rows],
            hoverinfo="text",
        )
    )
    fig.update_layout(
        title=f"KV cache per token at {context:,} tokens of context ({dtype})",
        xaxis=dict(title="KiB per token", type="linear", rangemode="tozero"),
        yaxis=dict(autorange="reversed"),  # the first row on top, as in the table
        height=80 + 32 * len(rows),
        margin=dict(l=120, r=150, t=50, b=40),
    )
    return fig


def _hover(row: dict) -> str:
    if row["num_sliding_layers"]:
        return (f"{row['num_sliding_layers']} of {row['num_layers']} layers keep only the last "
                f"{row['sliding_window']:,} tokens")
    return f"all {row['num_layers']} layers keep every token"
