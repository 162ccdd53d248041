"""vLLM as a whole, drawn from the engine that actually ran (notebook 07).

The article's picture of vLLM -- requests go into an engine (continuous batching, a paged KV cache, an
attention backend), the engine drives the device -- as the ``paged_lab`` engine a notebook built:

    requests  ->  [ Scheduler (continuous batching)  ->  BlockManager (paged KV cache)
                    ->  attention backend ]  ->  device

``engine_overview(llm)`` reads every name and number from the live ``LLM`` (its scheduler's
``max_num_seqs`` and token budget, its pool's blocks, the attention backend its kernels counted,
its device); ``fig_engine_overview`` draws them. Nothing is typed in by hand, so the picture of an
engine built with other settings, or on a GPU, says so. vLLM's own choice on NVIDIA GPUs,
FlashAttention, is named beside the backend that ran here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from paged_lab.viz.colors import PALETTE

# What each paged_lab backend is, in a few words (paged_lab.kernels.dispatch.BACKEND_TABLE's names).
BACKEND_WORDS = {
    "cpu": "attention in C (kernels/cpu/attention.py)",
    "torch": "PyTorch gathers (kernels/torch_paged.py)",
    "triton": "Triton GPU kernels (kernels/triton_paged.py)",
    "reference": "reference loops (kernels/reference.py)",
}
# vLLM 0.32.0's CUDA platform tries FlashAttention first, FlashInfer first only on compute capability 10.x
# (B200-class Blackwell; the SM12x Blackwells try FlashAttention first): docs/vllm_claims.md C36
VLLM_ON_GPUS = "vLLM on NVIDIA GPUs: FlashAttention<br>(FlashInfer first on compute capability 10.x)"


@dataclass(frozen=True)
class EngineOverview:
    """The facts the overview draws, read from one live ``LLM`` (``engine_overview``)."""

    model: str  # its name or path (on hover: a path is no word to translate)
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    num_requests: int | None  # prompts of the run drawn (None: not given)
    max_num_seqs: int
    max_num_batched_tokens: int | None  # None: no token budget, a prompt is never chunked
    preemption: str
    num_blocks: int
    block_size: int
    prefix_caching: bool
    kv_cache_bytes: int
    backend: str  # the attention backend that ran (most calls), or the one chosen if none ran yet
    backend_ran: bool
    device: str


def _backend(llm) -> tuple[str, bool]:
    """The backend whose kernels ran most (the engine's KernelStats), else the one it would choose."""
    from paged_lab import kernels

    calls = llm.kernel_stats.calls
    if calls:
        return calls.most_common(1)[0][0], True
    return kernels.resolve_backend(llm.attention_backend, *llm.kv.layers[0]), False


def _device(device) -> str:
    import torch

    if device.type == "cuda":  # the compute capability, not the card's name: a name is not translated
        major, minor = torch.cuda.get_device_capability(device)
        return f"CUDA GPU {device.index or 0} (sm_{major}{minor})"
    threads = torch.get_num_threads()
    return f"{device.type.upper()}, {threads} thread" + ("" if threads == 1 else "s")


def engine_overview(llm, requests: Sequence | None = None) -> EngineOverview:
    """The overview of ``llm`` (a ``paged_lab.LLM``); ``requests``: the ``RequestOutput`` list of the
    run to draw (its prompts are counted)."""
    backend, ran = _backend(llm)
    sched = llm.scheduler
    return EngineOverview(
        model=llm.model_name, num_layers=llm.spec.num_layers, num_kv_heads=llm.spec.num_kv_heads,
        head_dim=llm.spec.head_dim, dtype=llm.dtype,
        num_requests=None if requests is None else len(requests),
        max_num_seqs=sched.max_num_seqs, max_num_batched_tokens=sched.max_num_batched_tokens,
        preemption=sched.preemption, num_blocks=llm.num_blocks, block_size=llm.block_size,
        prefix_caching=llm.enable_prefix_caching, kv_cache_bytes=llm.kv.bytes,
        backend=backend, backend_ran=ran, device=_device(llm.device))


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def overview_boxes(ov: EngineOverview) -> dict[str, tuple[str, str]]:
    """Box name -> (heading, body) of the figure, left to right: the texts ``fig_engine_overview`` shows."""
    budget = ("no token budget" if ov.max_num_batched_tokens is None
              else f"token budget {ov.max_num_batched_tokens:,} per step")
    return {
        "requests": ("requests", ("prompts" if ov.num_requests is None else f"{ov.num_requests} prompts")
                     + ",<br>each with its SamplingParams"),
        "scheduler": ("Scheduler: continuous batching",
                      f"max_num_seqs = {ov.max_num_seqs}<br>{budget}<br>preemption by {ov.preemption}"),
        "kv_cache": ("BlockManager: the paged KV cache",
                     f"{ov.num_blocks:,} blocks × {ov.block_size} tokens<br>"
                     f"{_mib(ov.kv_cache_bytes)} ({ov.dtype})<br>"
                     f"prefix caching {'on' if ov.prefix_caching else 'off'}"),
        "attention": (f"attention backend: {ov.backend}"
                      + ("" if ov.backend_ran else " (chosen, not run yet)"),
                      f"{BACKEND_WORDS.get(ov.backend, ov.backend)}<br>{VLLM_ON_GPUS}"),
        "device": ("device",
                   f"{ov.device}<br>{ov.num_layers} layers, {ov.num_kv_heads} KV heads of {ov.head_dim}"),
    }


# Where each box sits: (x0, x1, y0, y1) in axis units; the engine's three parts are stacked inside it.
LAYOUT = {
    "requests": (0.0, 2.5, 2.4, 4.7),
    "scheduler": (3.1, 7.0, 3.4, 4.7),
    "kv_cache": (3.1, 7.0, 1.85, 3.15),
    "attention": (3.1, 7.0, 0.3, 1.6),
    "device": (7.9, 10.4, 0.3, 2.6),
}
ENGINE = (2.8, 7.3, 0.0, 5.4)  # the engine's frame around its three parts
# (from, to, what passes): the arrows, in the order the data flows through one step
FLOW = (("requests", "scheduler", "prompts"), ("scheduler", "kv_cache", "slots for this step's tokens"),
        ("kv_cache", "attention", "block tables"), ("attention", "device", "one forward<br>per step"))
COLORS = {"requests": "#f2f2f2", "scheduler": PALETTE[0], "kv_cache": PALETTE[2], "attention": PALETTE[1],
          "device": "#f2f2f2"}


def _arrow(src: str, dst: str) -> tuple[float, float, float, float]:
    """(x, y) where an arrow from ``src`` to ``dst`` starts and ends: down between the engine's stacked
    parts, else sideways at the height of whichever of the two boxes is the smaller."""
    sx0, sx1, sy0, sy1 = LAYOUT[src]
    dx0, dx1, dy0, dy1 = LAYOUT[dst]
    if sx0 == dx0:  # stacked: bottom of src -> top of dst
        return (sx0 + sx1) / 2, sy0, (dx0 + dx1) / 2, dy1
    y = (sy0 + sy1) / 2 if sy1 - sy0 < dy1 - dy0 else (dy0 + dy1) / 2
    return sx1, y, dx0, y


def _translucent(color: str, alpha: float = 0.25) -> str:
    """``#rrggbb`` as ``rgba(r, g, b, alpha)``: a box's fill, light enough to read its text on."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def fig_engine_overview(llm_or_overview, requests: Sequence | None = None,
                        title: str = "The engine that ran, as a whole: what vLLM is built of") -> go.Figure:
    """Requests -> the engine (Scheduler, BlockManager, attention backend) -> the device, with the live
    engine's names and numbers (``engine_overview``; pass an ``LLM`` or an ``EngineOverview``).

    Every box is a filled outline (one trace per part, in ``overview_boxes`` order) under an annotation
    named after its part (``"scheduler"``, ...: heading and body), every arrow an annotation named
    ``"from -> to"``: a test reads what the figure shows from ``fig.layout.annotations``."""
    ov = llm_or_overview
    if not isinstance(ov, EngineOverview):
        ov = engine_overview(ov, requests)
    boxes = overview_boxes(ov)
    shapes = [dict(type="rect", x0=ENGINE[0], x1=ENGINE[1], y0=ENGINE[2], y1=ENGINE[3], name="engine",
                   line=dict(color="#444444", width=2, dash="dot"), fillcolor="white", layer="below")]
    notes = [dict(x=(ENGINE[0] + ENGINE[1]) / 2, y=ENGINE[3] - 0.15, xref="x", yref="y", showarrow=False,
                  yanchor="top", name="engine", text="<b>the engine</b>: paged_lab's LLM, built like vLLM's",
                  font=dict(size=12))]
    parts = []  # each part's box: a closed outline, filled (a trace, so the page draws data, not only shapes)
    for name, (heading, body) in boxes.items():
        x0, x1, y0, y1 = LAYOUT[name]
        fill = COLORS[name]
        parts.append(go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines", fill="toself",
                                fillcolor=_translucent(fill), hoverinfo="skip", showlegend=False,
                                line=dict(color=fill if fill != "#f2f2f2" else "#999999", width=2)))
        notes.append(dict(x=(x0 + x1) / 2, y=(y0 + y1) / 2, xref="x", yref="y", showarrow=False, name=name,
                          text=f"<b>{heading}</b><br>{body}", font=dict(size=11), align="center",
                          hovertext=f"the model: {ov.model}" if name == "device" else None))
    for src, dst, what in FLOW:
        ax, ay, x, y = _arrow(src, dst)
        notes.append(dict(x=x, y=y, ax=ax, ay=ay, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                          arrowhead=2, arrowwidth=1.5, arrowcolor="#444444", text="", name=f"{src} -> {dst}"))
        notes.append(dict(x=(x + ax) / 2 + (0.1 if ax == x else 0), y=(y + ay) / 2 + (0 if ax == x else 0.08),
                          xref="x", yref="y", showarrow=False, xanchor="left" if ax == x else "center",
                          yanchor="middle" if ax == x else "bottom", name=f"{src} -> {dst}: label",
                          text=f"<i>{what}</i>", font=dict(size=10, color="#555555")))
    fig = go.Figure(parts)
    fig.update_layout(title=title, shapes=shapes, annotations=notes, plot_bgcolor="white", height=430,
                      margin=dict(t=60, b=10, l=10, r=10),
                      xaxis=dict(visible=False, range=[-0.1, 10.5]),
                      yaxis=dict(visible=False, range=[-0.1, 5.5]))
    return fig
