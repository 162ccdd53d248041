"""Figures and the playground readout of notebook 08: what one request's KV cache holds in today's models.

Pure functions over the package's own numbers: ``kv_math`` (bytes per token, a block's bytes as vLLM's
spec classes count them, the blocks a sliding-window layer still holds) and, for section 3's picture,
the series that ``paged_lab.memory.hybrid.blocks_held_over_time`` records from the real
``HybridBlockManager``. Nothing here runs a model or a manager.

Counting unit: a **layer block**, the ``block_size`` tokens of one layer (``kv_math.page_size_bytes``
bytes, vLLM's ``page_size_bytes``). A full-attention layer holds one per ``block_size`` tokens of the
request; a sliding-window layer only those that overlap its last ``sliding_window`` tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import plotly.graph_objects as go

from paged_lab import kv_math
from paged_lab.kv_math import GB, ModelSpec, as_spec, canonical_dtype, cdiv

GIB = 2**30
_COLORS = {"as built": "#1f77b4", "every layer full": "#7f7f7f"}


def with_sliding_window(spec: ModelSpec, sliding_window: int | None) -> ModelSpec:
    """``spec`` with its sliding-window layers' window set to ``sliding_window`` (``None``: as it is).
    A model without sliding-window layers comes back unchanged: the window has nothing to act on."""
    if sliding_window is None or not spec.num_sliding_layers:
        return spec
    kv_math.check_positive("sliding_window", sliding_window)
    return replace(spec, sliding_window=int(sliding_window))


@dataclass(frozen=True)
class RequestKV:
    """One request of ``num_tokens`` tokens: the layer blocks and bytes its KV cache holds."""

    model: str
    dtype: str
    num_tokens: int
    block_size: int
    blocks_per_full_layer: int     # cdiv(num_tokens, block_size) (what every layer would hold if full)
    blocks_per_sliding_layer: int  # the blocks overlapping the last sliding_window tokens
    num_full_layers: int
    num_sliding_layers: int
    block_bytes: int               # one layer block (vLLM's page_size_bytes)

    @property
    def layer_blocks(self) -> int:
        """Layer blocks the request holds, every layer counted."""
        return (self.num_full_layers * self.blocks_per_full_layer
                + self.num_sliding_layers * self.blocks_per_sliding_layer)

    @property
    def layer_blocks_all_full(self) -> int:
        """What it would hold if every layer attended to every token."""
        return (self.num_full_layers + self.num_sliding_layers) * self.blocks_per_full_layer

    @property
    def kv_bytes(self) -> int:
        return self.layer_blocks * self.block_bytes

    @property
    def kv_bytes_all_full(self) -> int:
        return self.layer_blocks_all_full * self.block_bytes


def request_kv(model: str | ModelSpec, num_tokens: int, dtype: str = "bfloat16", block_size: int = 16,
               sliding_window: int | None = None) -> RequestKV:
    """The KV cache one request of ``num_tokens`` tokens holds, block by block (``kv_math``'s counts)."""
    kv_math.check_positive("num_tokens", num_tokens)
    kv_math.check_positive("block_size", block_size)
    spec = with_sliding_window(as_spec(model), sliding_window)
    held = spec.kv_blocks_for_context(num_tokens, block_size)  # blocks one layer of each kind holds
    # a sliding-window layer's page is a full one's (vLLM's SlidingWindowSpec only frees more of them)
    kind = "full_attention" if spec.num_full_layers else "sliding_attention"
    return RequestKV(spec.name, canonical_dtype(dtype), num_tokens, block_size,
                     cdiv(num_tokens, block_size), held.get("sliding_attention", 0), spec.num_full_layers,
                     spec.num_sliding_layers, kv_math.page_size_bytes(spec, block_size, dtype, kind))


EXACT_BLOCKS = 256  # every step of the staircase is drawn up to this many blocks (4,096 tokens of 16)
GRID_RATIO = 1.01  # past them, block boundaries this far apart: a log axis draws finer steps under a pixel


def block_points(context_len: int, block_size: int, offsets: Sequence[int] = (1,)) -> list[int]:
    """The token counts 1..``context_len`` a block count is drawn at: ``k * block_size + o`` for every
    offset ``o`` (1: the token that opens block ``k + 1``; a sliding window ``w`` adds ``(w - 1) %
    block_size``, where a block falls out of it) and every ``k`` up to ``EXACT_BLOCKS``, then ``k`` on a
    fixed grid ``GRID_RATIO`` apart. Drawn as steps (``line_shape="hv"``) the curve is exact where the
    steps can be seen, and its shape is the block size's: the points do not depend on ``context_len``,
    which only ends them (an even spread over the context moved the first step with the slider)."""
    kv_math.check_positive("context_len", context_len)
    kv_math.check_positive("block_size", block_size)
    ks, k, last = set(range(EXACT_BLOCKS + 1)), float(EXACT_BLOCKS), context_len // block_size + 1
    while k < last:
        k *= GRID_RATIO
        ks.add(int(k))
    pts = {q * block_size + o for q in ks for o in offsets} | {1, context_len}
    return sorted(p for p in pts if 1 <= p <= context_len)


def fig_blocks_held(series: Mapping[str, Sequence[int]], first_token: int = 1,
                    title: str = "KV blocks one request holds as it grows",
                    x: Sequence[int] | None = None, yaxis_title: str = "blocks held") -> go.Figure:
    """One line per entry of ``series`` (its name → blocks held after each token), against the number of
    tokens in the request (``first_token``, ``first_token + 1``, ... or the given ``x``)."""
    if not series:
        raise ValueError("series is empty: pass {name: blocks held after each token}")
    fig = go.Figure()
    for name, held in series.items():
        if not len(held):
            raise ValueError(f"series {name!r} is empty")
        xs = list(x) if x is not None else list(range(first_token, first_token + len(held)))
        if len(xs) != len(held):
            raise ValueError(f"series {name!r} has {len(held)} values for {len(xs)} token counts")
        fig.add_trace(go.Scatter(x=xs, y=list(held), name=name, mode="lines", line_shape="hv",
                                 line_color=_COLORS.get(name)))
    fig.update_layout(title=title, xaxis_title="tokens in the request", yaxis_title=yaxis_title,
                      height=380, legend=dict(orientation="h", y=-0.25))
    return fig


def fig_kv_today(model: str, cache_dtype: str, context_len: int, sliding_window: int, gpu_gb: int,
                 block_size: int = 16, max_context: int = 131072,
                 models: Sequence[str | ModelSpec] | None = None) -> go.Figure:
    """The playground's figure: the layer blocks one request holds while it grows to ``context_len``
    tokens, as the model is built and as if every layer were full (``gpu_gb`` is the readout's).

    Both axes are logarithmic and fixed by ``max_context`` (the context slider's end) and the most
    layers among ``models`` (the model dropdown's; default: every model of ``kv_math.list_specs()``), so
    the figure holds still whatever the controls say, the model included, and only the lines change.
    The lines are drawn at block boundaries (``block_points``): their steps are the block size's. The
    numbers are the readout's."""
    if context_len > max_context:
        raise ValueError(f"context_len={context_len} is past max_context={max_context}")
    spec = with_sliding_window(as_spec(model), sliding_window)
    offsets = (1, (spec.sliding_window - 1) % block_size) if spec.num_sliding_layers else (1,)
    xs = block_points(context_len, block_size, offsets)
    at = [request_kv(spec, n, cache_dtype, block_size) for n in xs]
    # Both lines for every model, so the legend and the plot area keep their size when the model changes
    # (one line fewer moved the plot by 9 px); without sliding-window layers they are one line.
    series = {"as built": [r.layer_blocks for r in at],
              "every layer full": [r.layer_blocks_all_full for r in at]}
    dtype = canonical_dtype(cache_dtype)
    title = f"{spec.name}: the layer blocks one request holds as it grows ({dtype} cache)"
    fig = fig_blocks_held(series, x=xs, title=title, yaxis_title="layer blocks held (all layers)")
    fig.update_traces(selector=dict(name="every layer full"), line_dash="dot")  # the blue shows under it
    layers = max(as_spec(m).num_layers for m in (kv_math.list_specs() if models is None else models))
    most = layers * cdiv(max_context, block_size)  # every layer full at the longest context
    fig.update_xaxes(type="log", range=[0, math.log10(max_context)])
    fig.update_yaxes(type="log", range=[0, math.log10(2 * most)])
    return fig


def requests_that_fit(model: str | ModelSpec, cache_dtype: str, context_len: int, gpu_gb: int,
                      block_size: int = 16, sliding_window: int | None = None,
                      weight_dtype: str = "bfloat16") -> tuple[int, int]:
    """(as built, if every layer were full): requests of ``context_len`` tokens whose KV blocks fit in
    what a ``gpu_gb`` GB GPU leaves after the weights (``kv_math.plan_capacity``'s budget)."""
    spec = with_sliding_window(as_spec(model), sliding_window)
    budget = kv_math.plan_capacity(spec, gpu_gb * GB, context_len, cache_dtype,
                                   weight_dtype=weight_dtype).kv_budget_bytes
    need = request_kv(spec, context_len, cache_dtype, block_size)
    return budget // need.kv_bytes, budget // need.kv_bytes_all_full


def kv_today_readout(model: str, cache_dtype: str, context_len: int, sliding_window: int, gpu_gb: int,
                     block_size: int = 16) -> list[str]:
    """The playground's readout, one line each: bytes per token and why, what one request's layers hold,
    and how many such requests fit beside the weights (or why none can on one GPU)."""
    spec = with_sliding_window(as_spec(model), sliding_window)
    dtype = canonical_dtype(cache_dtype)
    r = request_kv(spec, context_len, dtype, block_size)
    per_number = kv_math.dtype_bytes(dtype)
    if spec.attention_kind == "MLA":
        why = (f"MLA: {spec.num_layers} layers × one latent of {spec.kv_lora_rank} + "
               f"{spec.qk_rope_head_dim} numbers × {per_number} B")
    else:
        why = (f"{spec.attention_kind}: 2 × {spec.num_layers} layers × {spec.num_kv_heads} KV heads × "
               f"{spec.head_dim} numbers × {per_number} B")
    lines = [f"<b>{spec.kv_bytes_per_token(dtype):,} B per token</b> ({why})"]
    if spec.num_sliding_layers:
        lines.append(f"{context_len:,} tokens: {spec.num_sliding_layers} sliding-window layers (window "
                     f"{spec.sliding_window:,}) hold {r.blocks_per_sliding_layer:,} blocks each, "
                     f"{spec.num_full_layers} full layers {r.blocks_per_full_layer:,} each: "
                     f"{r.kv_bytes / GIB:,.2f} GiB instead of {r.kv_bytes_all_full / GIB:,.2f} GiB")
    else:
        lines.append(f"{context_len:,} tokens: every layer is full attention, {r.blocks_per_full_layer:,} "
                     f"blocks of {block_size} each, {r.kv_bytes / GIB:,.2f} GiB (no sliding-window layer, "
                     "so the sliding window changes nothing)")
    plan = kv_math.plan_capacity(spec, gpu_gb * GB, context_len, dtype, weight_dtype="bfloat16")
    if not plan.weights_fit:
        lines.append(f"The bf16 weights alone ({plan.weight_bytes / GB:,.0f} GB) do not fit on one "
                     f"{gpu_gb} GB GPU: a server splits this model over several")
        return lines
    built, full = requests_that_fit(spec, dtype, context_len, gpu_gb, block_size)
    if spec.num_sliding_layers:
        lines.append(f"<b>{built:,}</b> such requests fit beside the weights on a {gpu_gb} GB GPU "
                     f"({full:,} if every layer were full)")
    else:
        lines.append(f"<b>{built:,}</b> such requests fit beside the weights on a {gpu_gb} GB GPU")
    return lines
