"""Compiled decode steps (``LLM(..., enforce_eager=False)``): one ``torch.compile`` graph per batch size.

A decode step on a CPU is a few rows times every weight of the model, so two things set its cost:
how fast the small-M matmuls stream the weights from memory, and how many tiny eager ops (norms,
RoPE, residual adds, SiLU) run in between. Inductor answers both: with ``freezing`` the weights
become constants that it packs once into its own blocked layout, ``max_autotune`` with the ``CPP``
GEMM backend generates register-blocked matmul kernels for the exact shapes, and the element-wise
ops between matmuls are fused into a few loops. vLLM's CPU backend compiles its model the same way.

Attention stays outside the compiled code: the graph calls the custom op ``paged_lab::attention``,
which reads the step's block tables and the layer's KV cache from a forward context that the engine
sets before each call (vLLM's ``unified_attention`` does the same), so the graph's shapes depend only
on the batch size, never on context lengths or tables.

Each batch size is its own graph (``dynamic=False``), so the engine pads a decode batch of n sequences
up to the next captured size (``capture_sizes``, as vLLM pads to its CUDA-graph sizes); padding rows
store nothing and attend to nothing. Compiling takes about a minute per size on the development machine
(2 cores), once per engine.
The math is the eager forward's (``PagedLlama.forward``), summed in another order: about 1e-7 relative.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from paged_lab.kernels import torch_paged

DEFAULT_CAPTURE_SIZES = (1, 2, 4)

# What the attention op needs and the graph must not see: set around each compiled call.
_CONTEXT: dict[str, Any] = {}


@contextlib.contextmanager
def forward_context(kv_caches: list, meta: Any, attention, scale: float, num_tokens: int, kv_data=None):
    """The step's KV caches, metadata and attention function, for ``paged_lab::attention``.
    ``kv_data``: ``KVCache.data`` when the torch backend's plan allows the fused store-and-attend path."""
    _CONTEXT.update(kv_caches=kv_caches, meta=meta, attention=attention, scale=scale, num_tokens=num_tokens,
                    kv_data=kv_data)
    try:
        yield
    finally:
        _CONTEXT.clear()


@torch.library.custom_op("paged_lab::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
    """q [M, nq, hd], k/v [M, nkv, hd] -> [M, nq, hd]: store the first ``num_tokens`` rows' K/V into layer
    ``layer``'s cache and attend over the step's block tables; padding rows (past num_tokens) give 0."""
    ctx = _CONTEXT
    n = ctx["num_tokens"]
    if n == 0:  # warm-up: compile without touching the cache
        return q.new_zeros(q.shape)
    meta = ctx["meta"]
    if ctx["kv_data"] is not None and layer:  # the torch backend's fewer-ops path; layer 0 runs the kernels' checks
        o = torch_paged.store_and_decode(q[:n], k[:n], v[:n], ctx["kv_data"][layer], meta.plan, ctx["scale"])
    else:
        k_cache, v_cache = ctx["kv_caches"][layer]
        if layer:  # layer 0 checks the metadata, the others reuse the check (as the eager forward does)
            meta = ctx.setdefault("checked", meta.checked())
        o = ctx["attention"](q[:n], k[:n], v[:n], k_cache, v_cache, meta, ctx["scale"])
    if n == q.shape[0]:
        return o
    out = q.new_zeros(q.shape)
    out[:n] = o
    return out


@attention_op.register_fake
def _(q, k, v, layer):
    return torch.empty_like(q)


class DecodeGraph(nn.Module):
    """The decode forward of ``PagedLlama`` as an ``nn.Module`` ending in the logits. Its parameters
    share storage with the transformers weights (no copy here; freezing makes inductor's packed copies
    from them)."""

    def __init__(self, model: Any, runner: Any):
        super().__init__()

        def param(t):
            return nn.Parameter(t.detach(), requires_grad=False)

        def plist(get):
            return nn.ParameterList([param(get(layer)) for layer in model.model.layers])

        core = model.model
        self.embed = param(core.embed_tokens.weight)  # [vocab, hidden]
        self.input_norm = plist(lambda layer: layer.input_layernorm.weight)
        self.wq = plist(lambda layer: layer.self_attn.q_proj.weight)  # [nq * hd, hidden]
        self.wk = plist(lambda layer: layer.self_attn.k_proj.weight)  # [nkv * hd, hidden]
        self.wv = plist(lambda layer: layer.self_attn.v_proj.weight)
        self.wo = plist(lambda layer: layer.self_attn.o_proj.weight)  # [hidden, nq * hd]
        self.post_norm = plist(lambda layer: layer.post_attention_layernorm.weight)
        self.w_gate = plist(lambda layer: layer.mlp.gate_proj.weight)  # [inter, hidden]
        self.w_up = plist(lambda layer: layer.mlp.up_proj.weight)
        self.w_down = plist(lambda layer: layer.mlp.down_proj.weight)  # [hidden, inter]
        self.final_norm = param(core.norm.weight)
        self.lm_head = param(model.lm_head.weight)  # [vocab, hidden]; the embedding itself when tied
        biased = [m for m in model.modules() if isinstance(m, nn.Linear) and m.bias is not None]
        if biased:
            raise ValueError("enforce_eager=False supports Llama-style projections without biases")
        self.nq, self.nkv, self.hd = runner.num_heads, runner.num_kv_heads, runner.head_dim
        self.eps = runner.eps
        self.num_layers = len(core.layers)

    def forward(self, input_ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """input_ids: int64 [M]; cos, sin: [M, 1, hd] (sin pre-signed, see PagedLlama._extend_rope)
        -> fp32 logits [M, vocab]."""
        nq, nkv, hd, eps = self.nq, self.nkv, self.hd, self.eps
        x = self.embed[input_ids]  # [M, hidden]
        shape = (x.shape[-1],)
        for i in range(self.num_layers):
            h = F.rms_norm(x, shape, self.input_norm[i], eps)
            q = F.linear(h, self.wq[i]).view(-1, nq, hd)  # [M, nq, hd]
            k = F.linear(h, self.wk[i]).view(-1, nkv, hd)  # [M, nkv, hd]
            v = F.linear(h, self.wv[i]).view(-1, nkv, hd)
            q = q * cos + q.roll(hd // 2, -1) * sin  # RoPE, as PagedLlama.forward
            k = k * cos + k.roll(hd // 2, -1) * sin
            o = torch.ops.paged_lab.attention(q, k, v, i)  # [M, nq, hd]
            x = x + F.linear(o.reshape(-1, nq * hd), self.wo[i])
            h = F.rms_norm(x, shape, self.post_norm[i], eps)
            x = x + F.linear(F.silu(F.linear(h, self.w_gate[i])) * F.linear(h, self.w_up[i]), self.w_down[i])
        x = F.rms_norm(x, shape, self.final_norm, eps)
        return F.linear(x, self.lm_head).float()


def inductor_options() -> dict:
    """Inductor settings of the decode graphs: frozen weights, generated C++ GEMMs."""
    return {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}


class CompiledDecoder:
    """Compiled decode graphs for ``capture_sizes`` batch sizes over one model and runner."""

    def __init__(self, model: Any, runner: Any, capture_sizes=DEFAULT_CAPTURE_SIZES):
        sizes = sorted({int(s) for s in capture_sizes})
        if not sizes or sizes[0] < 1:
            raise ValueError(f"capture_sizes must be integers >= 1, got {capture_sizes!r}")
        self.capture_sizes = tuple(sizes)
        self.runner = runner
        self.graph = DecodeGraph(model, runner).eval()
        self.fn = torch.compile(self.graph, dynamic=False)
        self.num_calls = dict.fromkeys(self.capture_sizes, 0)  # decode steps run per size (warm-up excluded)

    def bucket(self, n: int) -> int | None:
        """The captured size a batch of n decode tokens is padded to; None when larger than all."""
        return next((s for s in self.capture_sizes if s >= n), None)

    @torch.no_grad()
    def warm_up(self, kv_caches: list, progress: bool = True) -> None:
        """Compile every capture size now (a dummy batch that stores and attends to nothing)."""
        from tqdm.auto import tqdm

        for size in tqdm(self.capture_sizes, desc="compiling decode graphs", unit="size", disable=not progress):
            ids = torch.zeros(size, dtype=torch.long, device=self.runner.device)
            cos, sin = self.runner.rope_tables(ids)
            with forward_context(kv_caches, None, None, self.runner.scale, 0), \
                    torch._inductor.config.patch(inductor_options()):
                self.fn(ids, cos, sin)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list, meta: Any,
                 attention, kv_data: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [n, vocab] of n decode tokens (input_ids, positions: int64 [n]), n <= max capture size.
        kv_data: ``KVCache.data`` to let layers 1.. use ``torch_paged.store_and_decode`` (meta.plan must
        be the torch backend's, with the step's slot_mapping and no padding slots)."""
        n = input_ids.shape[0]
        size = self.bucket(n)
        if size is None:
            raise ValueError(f"a decode batch of {n} exceeds the largest capture size {self.capture_sizes[-1]}")
        if size != n:
            input_ids = F.pad(input_ids, (0, size - n))
            positions = F.pad(positions, (0, size - n))
        cos, sin = self.runner.rope_tables(positions)  # each [M, 1, hd]
        with forward_context(kv_caches, meta, attention, self.runner.scale, n, kv_data), \
                torch._inductor.config.patch(inductor_options()):  # freezing is read outside `options`
            logits = self.fn(input_ids, cos, sin)
        self.num_calls[size] += 1
        return logits[:n]
