"""The CPU fast path, plugged into the model's forward by one mechanism: it registers its own ops.

The forward (``engine.llama``) calls its few ops through a table, ``engine.llama.Ops``, that is plain
torch. :func:`install` is the one place that decides what replaces them, and the engine calls it once, as
it builds the model:

- where the weights are CPU float32/bfloat16 (:func:`applies`): RMSNorm, RoPE and SiLU(gate) * up in C
  (``kernels.cpu.layer_ops``, one pass each instead of several torch ops). Each falls back to the torch op
  it replaced for a tensor it does not take (another layout, another dtype, inside ``torch.compile``). They
  hold no memory, so they are on wherever they apply;
- with ``prepack=True`` (``LLM(cpu_prepack=True)``) also the projections: :class:`~paged_lab.kernels.cpu.
  linear.PackedLinear`, a packed copy of every weight (the C panel matmul, oneDNN), made once per model and
  shared by every engine over it.

Why packing is off unless asked for: it holds a second copy of the weights (+540 MB for SmolLM2 in fp32;
bf16 also keeps oneDNN's copy for prefills). Binder gives a notebook 2 GB; notebook 07 peaked at 1,756 MiB
headless with it and past 2 GB in a browser, 1,298 MiB without it. The speed it buys is the decode
matmuls' (``docs/benchmarks.md``); the benchmarks against vLLM turn it on, as vLLM's CPU backend packs its
weights too.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch

from paged_lab.kernels.cpu import layer_ops
from paged_lab.kernels.cpu.linear import PackedLinear, check_packable

# model -> (its embedding's (data_ptr, dtype, device), {the weights' data_ptrs: PackedLinear}): the packed
# copies of one model, shared by its engines; a model moved to another dtype or device is packed anew.
_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def applies(weight: torch.Tensor) -> bool:
    """Whether this path serves a model whose weights are like ``weight``: CPU float32/bfloat16."""
    return weight.device.type == "cpu" and weight.dtype in layer_ops.DTYPES


def install(ops: Any, model: Any, prepack: bool = False) -> Any:
    """``ops`` (the forward's plain torch ops, ``engine.llama.TORCH_OPS``) with this path's ops registered
    over them, for the transformers ``model``: ``ops`` itself where the path does not apply. ``prepack``:
    the projections too, from a packed copy (raises where the weights cannot be packed)."""
    weight = model.get_input_embeddings().weight
    if prepack:
        check_packable(weight)
    if not applies(weight):
        return ops
    ops = with_c_layer_ops(ops)
    if prepack:
        ops = dataclasses.replace(ops, linear=_packed_linears(model, weight),
                                  name="cpu: C ops, packed weights")
    return ops


def with_c_layer_ops(ops: Any) -> Any:
    """``ops`` with RMSNorm, RoPE and SiLU(gate) * up in C where a tensor suits them, its own elsewhere."""
    torch_rms_norm, torch_rope, torch_silu_mul = ops.rms_norm, ops.rope, ops.silu_mul

    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if x.dim() == 2 and x.is_contiguous() and weight.dtype == x.dtype and layer_ops.usable(x):
            return layer_ops.rms_norm(x, weight, eps)
        return torch_rms_norm(x, weight, eps)

    def rope(q, k, cos, sin):
        # in place: q and k are fresh outputs of the q/k/v matmul
        if layer_ops.usable(q) and layer_ops.rope_usable(q, k, cos):
            layer_ops.rope_(q, k, cos, sin)
            return q, k
        return torch_rope(q, k, cos, sin)

    def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        # over the two halves of the packed matmul's one output, or two F.linear outputs: never glued into
        # one tensor (a copy of about 12 MB per layer for an fp32 prefill of 1,000 tokens)
        return layer_ops.silu_mul(gate, up) if layer_ops.usable(gate) else torch_silu_mul(gate, up)

    return dataclasses.replace(ops, rms_norm=rms_norm, rope=rope, silu_mul=silu_mul, name="cpu: C ops")


def _packed_linears(model: Any, weight: torch.Tensor):
    """A ``linear(weights, biases)`` factory that packs each projection of ``model`` once."""
    key = (weight.data_ptr(), weight.dtype, weight.device)
    held = _PACKED.get(model)
    if held is None or held[0] != key:  # first engine, or the model's tensors changed: the old copies go
        held = _PACKED[model] = (key, {})
    packed = held[1]

    def linear(weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> PackedLinear:
        ptrs = tuple(w.data_ptr() for w in weights)
        if ptrs not in packed:
            packed[ptrs] = PackedLinear(weights, biases)
        return packed[ptrs]

    return linear

