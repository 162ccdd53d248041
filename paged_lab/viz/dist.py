"""Figures and the playground readout of notebook 09: KV memory per GPU under tensor parallelism.

Pure functions over ``paged_lab.engine.dist.sizing`` (which counts as vLLM does: a GQA model's KV heads
split over the GPUs, an MLA latent on every GPU, decode context parallelism splitting the tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from paged_lab.engine.dist import sizing
from paged_lab.kv_math import GB, as_spec

TP_SIZES = (1, 2, 4, 8)


def fig_kv_per_gpu(models: Sequence[str], gpu_gb: float = 80, context: int = 4096, dtype: str = "bfloat16",
                   weight_dtype: str = "bfloat16", dcp: int = 1, tp_sizes: Sequence[int] = TP_SIZES,
                   highlight: str | None = None) -> go.Figure:
    """Two panels over the tensor-parallel size: KV bytes one token costs on each GPU, and the requests of
    ``context`` tokens a node of 8 GPUs holds (``sizing.tp_table``; a setting whose weights do not fit holds
    none and draws no point). Both log axes have fixed ranges. One line per model; ``highlight``: the model
    drawn thick."""
    from plotly.subplots import make_subplots

    rows = sizing.tp_table(models, tp_sizes, gpu_gb, context, dtype, weight_dtype, dcp=dcp)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=(
        "KV bytes per token on each GPU", f"requests of {context:,} tokens per node of 8 GPUs"))
    for name in models:
        mine = [r for r in rows if r["model"] == as_spec(name).name]
        tps = [r["tp"] for r in mine]
        width = 4 if name == highlight else 2
        kind = mine[0]["attention_kind"]
        per_token = [r["kv_bytes_per_token_per_gpu"] for r in mine]
        fig.add_trace(go.Scatter(x=tps, y=per_token, mode="lines+markers",
                                 name=f"{name} ({kind})", legendgroup=name, line_width=width), row=1, col=1)
        fig.add_trace(go.Scatter(x=tps, y=[r["requests_per_node"] for r in mine], mode="lines+markers",
                                 name=name, legendgroup=name, showlegend=False, line_width=width,
                                 line_color=fig.data[-1].line.color), row=1, col=2)
    # Fixed ranges (log10), so the playground's figure holds still while the controls move the lines: from
    # 1,000 to 1,000,000 bytes a token, from 1 to 100,000 requests (a node that holds none draws no point)
    fig.update_xaxes(type="log", tickvals=list(tp_sizes), range=[-0.1, math.log10(max(tp_sizes)) + 0.1],
                     title_text="tensor_parallel_size (GPUs)")
    fig.update_yaxes(type="log", range=[3, 6], title_text="bytes", row=1, col=1)
    fig.update_yaxes(type="log", range=[0, 5], title_text="requests", row=1, col=2)
    fig.update_layout(height=420, legend=dict(orientation="h", y=-0.3),
                      title=f"KV per GPU under tensor parallelism ({gpu_gb:g} GB GPUs, {dtype} KV, "
                            f"{weight_dtype} weights, dcp {dcp})")
    return fig


def kv_per_gpu_readout(model: str, tp: int, gpu_gb: float = 80, context: int = 4096, dtype: str = "bfloat16",
                       weight_dtype: str = "bfloat16", dcp: int = 1) -> list[str]:
    """The playground's readout for one model at one tp: heads and bytes per GPU, and what fits."""
    (row,) = sizing.tp_table([model], [tp], gpu_gb, context, dtype, weight_dtype, dcp=dcp)
    spec = as_spec(model)
    lines = [f"<b>{row['kv_bytes_per_token_per_gpu']:,.0f} B per token on each GPU</b>"]
    if spec.is_mla:
        lines.append("MLA: the whole latent on every GPU (no heads to split)")
    else:
        lines.append(f"{spec.num_kv_heads} KV heads over {tp} GPUs: {row['kv_heads_per_gpu']} on each")
    if row["dcp"] > 1:
        lines.append(f"dcp {row['dcp']} splits the tokens: each GPU keeps 1/{row['dcp']} of them")
    if row["kv_budget_bytes_per_gpu"] == 0:
        lines.append(f"The weights' share, {row['weight_bytes_per_gpu'] / GB:,.0f} GB per GPU, does not fit "
                     f"on a {gpu_gb:g} GB GPU: no room for KV")
    else:
        lines.append(f"{row['kv_budget_bytes_per_gpu'] / GB:,.1f} GB of KV per GPU: "
                     f"{row['requests_per_instance']:,} requests of {context:,} tokens per instance of {tp} "
                     f"GPUs, {row['requests_per_node']:,} per node of 8")
    return lines
