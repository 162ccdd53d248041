"""Compiled decode steps (``LLM(..., enforce_eager=False)``): one ``torch.compile`` graph per batch size.

A decode step on a CPU is a few rows times every weight of the model, so two things set its cost:
how fast the small-M matmuls stream the weights from memory, and how many tiny eager ops (norms,
RoPE, residual adds, SiLU) run in between. Inductor answers both: with ``freezing`` the weights
become constants that it packs once into its own blocked layout, ``max_autotune`` with the ``CPP``
GEMM backend generates register-blocked matmul kernels for the exact shapes, and the element-wise
ops between matmuls are fused into a few loops. vLLM's CPU backend also compiles its model with inductor
(``CpuPlatform.check_and_update_config`` in ``vllm/platforms/cpu.py``, vllm 0.32.0), without ``freezing``.

Attention stays outside the compiled code: the graph calls the custom op ``paged_lab::attention``,
which reads the step's block tables and the layer's KV cache from a forward context that the engine
sets before each call (as vLLM's ``unified_attention_with_output`` in
``vllm/model_executor/layers/attention/attention.py`` does), so the graph's shapes depend only on the
batch size, never on context lengths or tables. The attention itself is the eager engine's
(``attention.PagedAttention``, over the backend the engine chose), and so is each layer's math: the graph
calls ``llama.decoder_layer`` over the same ``LayerWeights`` with the plain torch ops (``llama.TORCH_OPS``:
``F.linear`` on the model's own tensors, biases included; inductor fuses the element-wise ops itself).

Each batch size is its own graph (``dynamic=False``), so the engine pads a decode batch of n sequences
up to the next captured size (``capture_sizes``, as vLLM pads to its CUDA-graph sizes); padding rows
store nothing and attend to nothing. Each size compiles once per engine, when it starts (how long that
takes: docs/benchmarks.md, "Compiled decode steps").
The math is the eager forward's, summed in another order: about 1e-7 relative.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from paged_lab.engine.llama import LayerWeights, Linear, decoder_layer, rms_norm

DEFAULT_CAPTURE_SIZES = (1, 2, 4)

# What the attention op needs and the graph must not see: set around each compiled call.
_CONTEXT: dict[str, Any] = {}


@contextlib.contextmanager
def forward_context(kv_caches: list, meta: Any, attention, scale: float, num_tokens: int):
    """The step's KV caches, metadata and attention function, for ``paged_lab::attention``."""
    _CONTEXT.update(kv_caches=kv_caches, meta=meta, attention=attention, scale=scale, num_tokens=num_tokens)
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
    k_cache, v_cache = ctx["kv_caches"][layer]
    # the same metadata for every layer: the attention checks it and plans it on layer 0 only
    o = ctx["attention"](q[:n], k[:n], v[:n], k_cache, v_cache, ctx["meta"], ctx["scale"])
    if n == q.shape[0]:
        return o
    out = q.new_zeros(q.shape)
    out[:n] = o
    return out


@attention_op.register_fake
def _(q, k, v, layer):
    return torch.empty_like(q)


class DecodeGraph(nn.Module):
    """The decode forward of ``PagedLlama`` as an ``nn.Module`` ending in the logits: the runner's
    ``LayerWeights`` through ``llama.decoder_layer``, every projection a plain ``F.linear``. The weights
    are registered as parameters that share storage with the transformers tensors (no copy here;
    inductor's freezing makes its packed copies from them)."""

    def __init__(self, runner: Any):
        super().__init__()
        self.weights = nn.ParameterList()  # every tensor below, so that freezing turns them into constants

        def param(t: torch.Tensor | None) -> nn.Parameter | None:
            if t is None:
                return None
            self.weights.append(nn.Parameter(t.detach(), requires_grad=False))
            return self.weights[-1]

        def linear(lin) -> Linear:  # the model's own tensors, never a packed copy (kernels.cpu)
            return Linear([param(w) for w in lin.weights], [param(b) for b in lin.biases])

        self.embed = param(runner.embed)  # [vocab, hidden]
        self.layers = [LayerWeights(param(w.input_norm), linear(w.qkv), linear(w.o), param(w.post_norm),
                                    linear(w.gate_up), linear(w.down)) for w in runner.layers]
        self.final_norm = param(runner.final_norm)
        self.lm_head = linear(runner.lm_head)  # [vocab, hidden]; the embedding itself when tied
        self.dims = runner.dims

    def forward(self, input_ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """input_ids: int64 [M]; cos, sin: [M, 1, hd] (sin pre-signed, see engine.rope.RopeTables)
        -> fp32 logits [M, vocab]."""
        x = self.embed[input_ids]  # [M, hidden]
        for i, w in enumerate(self.layers):
            x = decoder_layer(x, w, cos, sin, partial(torch.ops.paged_lab.attention, layer=i), self.dims)
        return self.lm_head(rms_norm(x, self.final_norm, self.dims.eps)).float()


def inductor_options() -> dict:
    """Inductor settings of the decode graphs: frozen weights, generated C++ GEMMs."""
    return {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}


class CompiledDecoder:
    """Compiled decode graphs for ``capture_sizes`` batch sizes over one model and runner."""

    def __init__(self, runner: Any, capture_sizes=DEFAULT_CAPTURE_SIZES):
        sizes = sorted({int(s) for s in capture_sizes})
        if not sizes or sizes[0] < 1:
            raise ValueError(f"capture_sizes must be integers >= 1, got {capture_sizes!r}")
        self.capture_sizes = tuple(sizes)
        self.runner = runner
        self.graph = DecodeGraph(runner).eval()
        self.fn = torch.compile(self.graph, dynamic=False)
        self.num_calls = dict.fromkeys(self.capture_sizes, 0)  # decode steps run per size (warm-up excluded)

    @classmethod
    def warmed(cls, runner: Any, capture_sizes, kv_caches: list, progress: bool) -> CompiledDecoder:
        """The decode graphs of ``capture_sizes`` (None: ``DEFAULT_CAPTURE_SIZES``), each compiled now."""
        compiled = cls(runner, DEFAULT_CAPTURE_SIZES if capture_sizes is None else capture_sizes)
        compiled.warm_up(kv_caches, progress=progress)
        return compiled

    def bucket(self, n: int) -> int | None:
        """The captured size a batch of n decode tokens is padded to; None when larger than all."""
        return next((s for s in self.capture_sizes if s >= n), None)

    @torch.no_grad()
    def warm_up(self, kv_caches: list, progress: bool = True) -> None:
        """Compile every capture size now (a dummy batch that stores and attends to nothing)."""
        from tqdm.auto import tqdm

        for size in tqdm(self.capture_sizes, desc="compiling decode graphs", unit="size",
                         disable=not progress):
            ids = torch.zeros(size, dtype=torch.long, device=self.runner.device)
            cos, sin = self.runner.rope_tables(ids, 0)
            with forward_context(kv_caches, None, None, self.runner.scale, 0), \
                    torch._inductor.config.patch(inductor_options()):
                self.fn(ids, cos, sin)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list, meta: Any,
                 attention) -> torch.Tensor:
        """Logits [n, vocab] of n decode tokens (input_ids, positions: int64 [n]), n <= max capture size;
        ``attention`` as ``PagedLlama.forward``'s (the eager engine's ``attention.PagedAttention``)."""
        n = input_ids.shape[0]
        size = self.bucket(n)
        if size is None:
            raise ValueError(f"a decode batch of {n} exceeds the largest capture size "
                             f"{self.capture_sizes[-1]}")
        if size != n:
            input_ids = F.pad(input_ids, (0, size - n))
            positions = F.pad(positions, (0, size - n))
        top = None if meta.max_context_len is None else meta.max_context_len - 1
        cos, sin = self.runner.rope_tables(positions, top)  # each [M, 1, hd]
        with forward_context(kv_caches, meta, attention, self.runner.scale, n), \
                torch._inductor.config.patch(inductor_options()):  # freezing is read outside `options`
            logits = self.fn(input_ids, cos, sin)
        self.num_calls[size] += 1
        return logits[:n]
