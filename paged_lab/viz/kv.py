"""Pure figures for KV-cache size math (notebook 01). Each takes numbers, returns a plotly Figure."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from paged_lab.kv_math import (
    COMMON_GPU_SIZES_GB,
    GB,
    ModelSpec,
    as_spec,
    canonical_dtype,
    dtype_bytes,
    get_spec,
    list_specs,
    plan_capacity,
)
from paged_lab.viz.tables import Table

KIND_COLORS = {"MHA": "#d62728", "GQA": "#1f77b4", "MQA": "#2ca02c", "MLA": "#9467bd"}
K_COLOR, V_COLOR = "#1f77b4", "#ff7f0e"


def fig_token_kv(model: str | ModelSpec = "llama-3.2-1b", dtype: str = "bfloat16") -> go.Figure:
    """What one token leaves in the KV cache: a K and a V vector per layer and per KV head, each
    ``head_dim`` numbers. One square per (layer, KV head, K or V); the title multiplies it out."""
    spec = as_spec(model)
    width = dtype_bytes(dtype)
    heads = spec.num_kv_heads
    cols = [f"K{h}" for h in range(heads)] + [" "] + [f"V{h}" for h in range(heads)]  # a gap between K and V
    rows = [f"layer {layer}" for layer in range(spec.num_layers)]
    kind = [[0] * heads + [None] + [1] * heads for _ in rows]  # 0 = K, 1 = V, None = the gap
    vec = f"{spec.head_dim} numbers × {width} B = {spec.head_dim * width:,} B"
    hover = [[f"{r}, {'K' if c.startswith('K') else 'V'} of KV head {c[1:]}: {vec}" if c.strip() else ""
              for c in cols] for r in rows]
    fig = go.Figure(go.Heatmap(
        z=kind, x=cols, y=rows, text=hover, hoverinfo="text", showscale=False, xgap=2, ygap=2,
        colorscale=[[0, K_COLOR], [0.5, K_COLOR], [0.5, V_COLOR], [1, V_COLOR]], zmin=0, zmax=1,
    ))
    total = spec.kv_bytes_per_token(dtype)
    fig.update_layout(
        title=dict(text=(f"One token of {spec.name} stores 2 × {spec.num_layers} layers × {heads} KV heads × "
                         f"{spec.head_dim} numbers × {width} B = {total:,} B<br><span "
                         "style='font-size:13px'>each square: one KV head's K or V vector in one "
                         f"layer, {vec}</span>"), font=dict(size=15)),
        height=max(320, 170 + 20 * spec.num_layers),
        yaxis=dict(autorange="reversed", tickfont=dict(size=12), showgrid=False),
        xaxis=dict(side="top", tickfont=dict(size=12), showgrid=False),
        plot_bgcolor="white",
        margin=dict(t=110, b=40, l=80, r=20),
        annotations=[
            dict(x=(heads - 1) / 2, y=-0.1, xref="x", yref="paper", showarrow=False,
                 font=dict(size=13, color=K_COLOR), text=f"<b>K</b>: {heads} KV heads"),
            dict(x=heads + 1 + (heads - 1) / 2, y=-0.1, xref="x", yref="paper", showarrow=False,
                 font=dict(size=13, color=V_COLOR), text=f"<b>V</b>: {heads} KV heads"),
        ],
    )
    return fig


def fig_mha_gqa_mqa(model: str | ModelSpec, dtype: str = "bfloat16") -> go.Figure:
    """Bytes per token of one model as MHA, as it really is, and as MQA."""
    spec = as_spec(model)
    variants = [("MHA", spec.as_mha()), ("MQA", spec.as_mqa())]
    if spec.attention_kind == "GQA":
        variants.insert(1, ("GQA", spec))
    names = [f"{kind}<br>{v.num_kv_heads} KV heads" for kind, v in variants]
    kib = [v.kv_bytes_per_token(dtype) / 1024 for _, v in variants]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=kib,
            marker_color=[KIND_COLORS[k] for k, _ in variants],
            text=[f"{x:g} KiB" for x in kib],
            textposition="outside",
        )
    )
    fig.update_layout(
        title=f"{spec.name}: KV cache per token in {canonical_dtype(dtype)} ({spec.num_heads} query heads)",
        yaxis_title="KiB per token",
        height=360,
        margin=dict(t=60, b=40),
    )
    return fig


def fig_kv_by_model(dtype: str = "bfloat16", context_len: int = 4096,
                    models: Sequence[str] | None = None) -> go.Figure:
    """KV cache of one ``context_len``-token sequence for each catalogue model, coloured by attention kind."""
    specs = [get_spec(m) for m in (models or list_specs())]
    mib = [s.kv_bytes(context_len, dtype) / 2**20 for s in specs]
    fig = go.Figure(
        go.Bar(
            y=[s.name for s in specs],
            x=mib,
            orientation="h",
            marker_color=[KIND_COLORS[s.attention_kind] for s in specs],
            text=[f"{m:,.0f} MiB ({s.attention_kind})" for m, s in zip(mib, specs)],
            textposition="outside",
            cliponaxis=False,
        )
    )
    fig.update_layout(
        title=f"KV cache of one {context_len:,}-token sequence ({canonical_dtype(dtype)})",
        xaxis_title="MiB",
        height=60 + 32 * len(specs),
        margin=dict(l=110, r=140, t=50, b=40),
    )
    return fig


def _gpu_bars(spec: ModelSpec, need: float, context_len: int, dtype: str, gpu_sizes_gb: Sequence[int]):
    """``fig_kv_vs_gpu``'s bars, in GB, one entry per card: (labels, weights on the card, weights past it,
    KV that fits, KV that does not, free, requests that fit)."""
    bars: tuple[list, ...] = ([], [], [], [], [], [], [])
    for size in gpu_sizes_gb:
        plan = plan_capacity(spec, size * GB, context_len, dtype)
        w, budget = plan.weight_bytes / GB, plan.kv_budget_bytes / GB
        row = (f"{size} GB", min(w, size), max(0.0, w - size), min(need, budget), max(0.0, need - budget),
               max(0.0, budget - need), plan.max_seqs)
        for column, value in zip(bars, row):
            column.append(value)
    return bars


def fig_kv_vs_gpu(
    model: str | ModelSpec,
    dtype: str = "bfloat16",
    context_len: int = 4096,
    num_requests: int = 16,
    gpu_sizes_gb: Sequence[int] = COMMON_GPU_SIZES_GB,
) -> go.Figure:
    """Per GPU size: the weights, the KV memory that ``num_requests`` x ``context_len`` tokens need,
    and how much room is left. A red KV bar means it does not fit. Weights larger than a card are drawn
    whole: the part past the card's line is hatched red ("weights that do not fit"), so 42 GB of weights
    never look as if they fit a 24 GB card."""
    spec = as_spec(model)
    need = num_requests * spec.kv_bytes(context_len, dtype) / GB  # each request keeps its own window
    labels, weights, weights_over, kv_fit, kv_over, free, fits = _gpu_bars(spec, need, context_len, dtype,
                                                                           gpu_sizes_gb)
    fig = go.Figure()
    fig.add_bar(x=labels, y=weights, name="weights", marker_color="#7f7f7f")
    # every trace in every figure, zero or not: the legend keeps its entries while the controls move
    fig.add_bar(x=labels, y=weights_over, name="weights that do not fit", marker_color="#7f7f7f",
                marker_pattern=dict(shape="/", fgcolor="#d62728", solidity=0.4))
    # the title says how many: a legend entry whose text followed the sliders changed the legend's width
    fig.add_bar(x=labels, y=kv_fit, name="KV of the requests", marker_color="#1f77b4")
    fig.add_bar(x=labels, y=kv_over, name="KV that does not fit", marker_color="#d62728")
    fig.add_bar(x=labels, y=free, name="free", marker_color="rgba(44,160,44,0.25)")
    fig.add_scatter(
        x=labels,
        y=list(gpu_sizes_gb),
        mode="markers",
        marker=dict(symbol="line-ew-open", size=40, color="black"),
        name="GPU memory",
    )
    lift = 0.03 * max(gpu_sizes_gb)  # clear of the card's marker line
    tops = [max(size, w + wo + k + o) + lift
            for size, w, wo, k, o in zip(gpu_sizes_gb, weights, weights_over, kv_fit, kv_over)]
    fig.add_scatter(  # how many requests of this length fit, in readable type above each bar
        x=labels, y=tops, mode="text", text=[f"fits {n:,} seqs" for n in fits], textposition="top center",
        textfont=dict(size=14), showlegend=False, hoverinfo="skip",
    )
    top = max(gpu_sizes_gb) * 1.25  # fixed, so bars can be compared while the sliders move
    fig.update_layout(
        barmode="stack",
        title=f"{spec.name} ({canonical_dtype(dtype)}): {need:,.1f} GB of KV for {num_requests} x "
              f"{context_len:,} tokens",
        xaxis_title="GPU memory size",
        yaxis=dict(title="memory (GB)", range=[0, top]),
        height=470,
        # above the plot: below it, the legend sat on the axis title until the first re-draw
        legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"),
        margin=dict(t=120, b=60),
        font=dict(size=13),
    )
    return fig


def capacity_readout(model: str | ModelSpec, dtype: str, context_len: int, num_requests: int,
                     gpu_sizes_gb: Sequence[int] = COMMON_GPU_SIZES_GB) -> str:
    """One line for the playground: what the requests need, and what that means on each card."""
    spec = as_spec(model)
    need = num_requests * spec.kv_bytes(context_len, dtype)
    per_token = need / (num_requests * context_len)  # below bytes/token past a sliding window
    plans = {s: plan_capacity(spec, s * GB, context_len, dtype) for s in gpu_sizes_gb}
    fits = [s for s, p in plans.items() if p.max_seqs >= num_requests]
    short = [(s, p.max_seqs) for s, p in plans.items() if p.max_seqs < num_requests]
    head = (f"<b>{num_requests} × {context_len:,} tokens</b> × {per_token:,.0f} B/token "
            f"({canonical_dtype(dtype)}) = <b>{need / GB:,.2f} GB</b> of KV")
    if not fits:
        return f"{head} → no card here holds it beside {spec.weight_bytes() / GB:,.1f} GB of weights"
    why = f" → holds them beside the weights from <b>{fits[0]} GB</b> up"
    if short:
        s, n = short[-1]
        why += f"; on {s} GB only {n:,} fit" if n else f"; on {s} GB none fit"
    return head + why


def measurement_table(measured: dict, formula_bytes: int) -> Table:
    """``models.measure_kv_cache``'s result beside the formula, as a table (not a dict dump)."""
    rows = [
        ("tokens in the prompt", measured["num_tokens"]),
        ("K and V tensors (2 per layer)", measured["num_tensors"]),
        ("one tensor's shape [batch, KV heads, tokens, head_dim]", " × ".join(map(str, measured["shape"]))),
        ("number type", measured["dtype"]),
        ("bytes measured in those tensors", measured["total_bytes"]),
        ("bytes the formula predicts (tokens × bytes per token)", formula_bytes),
        ("bytes per token, measured", measured["bytes_per_token"]),
    ]
    return Table(("", "value"), rows, labels=True)


def catalogue_table(dtype: str = "bfloat16", context_len: int = 4096) -> Table:
    """The catalogue as a table: shapes, attention kind, bytes per token, and a context's worth of KV."""
    specs = [get_spec(m) for m in list_specs()]
    header = ("model", "layers", "query heads", "KV heads", "head_dim", "kind", "params (B)",
              f"KiB per token ({canonical_dtype(dtype)})", f"GiB per {context_len:,} tokens")
    rows = [(s.name, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim, s.attention_kind,
             f"{s.num_params / 1e9:.2f}", f"{s.kv_bytes_per_token(dtype) / 1024:g}",
             f"{s.kv_bytes(context_len, dtype) / 2**30:.3f}") for s in specs]
    return Table(header, rows)
