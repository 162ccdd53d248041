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
    get_spec,
    list_specs,
    plan_capacity,
)

KIND_COLORS = {"MHA": "#d62728", "GQA": "#1f77b4", "MQA": "#2ca02c"}


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


def fig_kv_by_model(dtype: str = "bfloat16", context_len: int = 4096, models: Sequence[str] | None = None) -> go.Figure:
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


def fig_kv_vs_gpu(
    model: str | ModelSpec,
    dtype: str = "bfloat16",
    context_len: int = 4096,
    num_requests: int = 16,
    gpu_sizes_gb: Sequence[int] = COMMON_GPU_SIZES_GB,
) -> go.Figure:
    """Per GPU size: the weights, the KV memory that ``num_requests`` x ``context_len`` tokens need,
    and how much room is left. A red KV bar means it does not fit."""
    spec = as_spec(model)
    need = spec.kv_bytes(num_requests * context_len, dtype) / GB
    labels, weights, kv_fit, kv_over, free, fits = [], [], [], [], [], []
    for size in gpu_sizes_gb:
        plan = plan_capacity(spec, size * GB, context_len, dtype)
        w = min(plan.weight_bytes, plan.gpu_memory_bytes) / GB
        budget = plan.kv_budget_bytes / GB
        labels.append(f"{size} GB")
        weights.append(w)
        kv_fit.append(min(need, budget))
        kv_over.append(max(0.0, need - budget))
        free.append(max(0.0, budget - need))
        fits.append(plan.max_seqs)
    fig = go.Figure()
    fig.add_bar(x=labels, y=weights, name="weights", marker_color="#7f7f7f")
    fig.add_bar(x=labels, y=kv_fit, name=f"KV of {num_requests} x {context_len:,} tokens", marker_color="#1f77b4")
    fig.add_bar(x=labels, y=kv_over, name="KV that does not fit", marker_color="#d62728")
    fig.add_bar(
        x=labels,
        y=free,
        name="free",
        marker_color="rgba(44,160,44,0.25)",
        text=[f"fits {n:,} seqs" for n in fits],
        textposition="inside",
    )
    fig.add_scatter(
        x=labels,
        y=list(gpu_sizes_gb),
        mode="markers",
        marker=dict(symbol="line-ew-open", size=40, color="black"),
        name="GPU memory",
    )
    fig.update_layout(
        barmode="stack",
        title=f"{spec.name} ({canonical_dtype(dtype)}): {need:,.1f} GB of KV for {num_requests} x {context_len:,} tokens",
        yaxis_title="GB",
        height=420,
        legend=dict(orientation="h", y=-0.15),
        margin=dict(t=60),
    )
    return fig


def capacity_readout(model: str | ModelSpec, dtype: str, context_len: int, num_requests: int,
                     gpu_sizes_gb: Sequence[int] = COMMON_GPU_SIZES_GB) -> str:
    """One line for the playground: KV needed, and which GPUs hold it beside the weights."""
    spec = as_spec(model)
    need = spec.kv_bytes(num_requests * context_len, dtype)
    fits = [s for s in gpu_sizes_gb if plan_capacity(spec, s * GB, context_len, dtype).max_seqs >= num_requests]
    where = ", ".join(f"{s} GB" for s in fits) if fits else "none of these GPUs"
    return (
        f"<b>{spec.name}</b>, {canonical_dtype(dtype)}: {spec.kv_bytes_per_token(dtype):,} B/token x "
        f"{num_requests} x {context_len:,} tokens = <b>{need / GB:,.2f} GB</b> of KV; fits beside the weights on: {where}"
    )


def catalogue_table(dtype: str = "bfloat16", context_len: int = 4096) -> go.Figure:
    """The catalogue as a table: shapes, attention kind, bytes per token, and a context's worth of KV."""
    specs = [get_spec(m) for m in list_specs()]
    cols = {
        "model": [s.name for s in specs],
        "layers": [s.num_layers for s in specs],
        "q heads": [s.num_heads for s in specs],
        "KV heads": [s.num_kv_heads for s in specs],
        "head dim": [s.head_dim for s in specs],
        "kind": [s.attention_kind for s in specs],
        "params (B)": [f"{s.num_params / 1e9:.2f}" for s in specs],
        f"KiB/token ({canonical_dtype(dtype)})": [f"{s.kv_bytes_per_token(dtype) / 1024:g}" for s in specs],
        f"GiB per {context_len:,} tokens": [f"{s.kv_bytes(context_len, dtype) / 2**30:.3f}" for s in specs],
    }
    fig = go.Figure(go.Table(header=dict(values=list(cols)), cells=dict(values=list(cols.values()))))
    fig.update_layout(height=80 + 28 * len(specs), margin=dict(l=10, r=10, t=10, b=10))
    return fig
