"""A Llama-family decoder written over the paged KV cache, in plain torch.

The weights come from the transformers model that ``paged_lab.models.load_model`` returns; the forward
is ours: embedding -> N x (RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP) -> RMSNorm -> head.
Attention goes through the block tables (``engine.attention.PagedAttention``): each layer stores its new
tokens' K/V in their cache slots, then attends over every sequence's blocks.

One forward serves a whole engine step: the query tokens of every scheduled sequence are concatenated
into one flat batch ``[num_tokens, hidden]`` (no padding), so the matmuls see every sequence at once.

The forward looks its few ops up in a table, :class:`Ops`, which is plain torch (``TORCH_OPS``): a faster
path registers its own versions there, and nothing here changes. The engine asks the CPU's
(``kernels.cpu.fast_path``) once, when it builds the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from paged_lab.engine.attention import AttentionMetadata, PagedAttention
from paged_lab.engine.rope import RopeTables

# --- the ops, in plain torch ---------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, computed in fp32 (as transformers' LlamaRMSNorm)."""
    if x.dtype == torch.float32:  # one fused op, same formula and result
        return F.rms_norm(x, weight.shape, weight, eps)
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
         sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE: x * cos + rotate_half(x) * sin, for q ``[num_tokens, num_heads, head_dim]`` and k; ``sin`` is
    pre-signed, so rotate_half is a roll (see ``engine.rope.RopeTables``)."""
    hd = q.shape[-1]
    return q * cos + q.roll(hd // 2, -1) * sin, k * cos + k.roll(hd // 2, -1) * sin


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation: SiLU(gate) * up, each ``[num_tokens, intermediate]``."""
    return F.silu(gate) * up


class Linear:
    """``y = x @ W.T + b`` for one projection, or several that read the same input (q/k/v, gate/up), over
    the transformers tensors themselves (never copied). weights: ``[out_i, in_features]`` each; biases:
    one per weight, each a tensor or None."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor | None]):
        self.weights, self.biases = list(weights), list(biases)

    @property
    def out_features(self) -> int:
        return sum(w.shape[0] for w in self.weights)

    def parts(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x ``[..., in_features]`` -> one ``[..., out_i]`` per weight."""
        return tuple(F.linear(x, w, b) for w, b in zip(self.weights, self.biases))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[..., in_features]`` -> ``[..., out_features]`` (the parts side by side)."""
        parts = self.parts(x)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


@dataclass(frozen=True)
class Ops:
    """The ops the forward looks up, so that a faster path can register its own (same arguments, same
    math): ``dataclasses.replace(TORCH_OPS, rms_norm=...)``, as ``kernels.cpu.fast_path.install`` does."""

    rms_norm: Callable = rms_norm  # (x [n, d], weight [d], eps) -> [n, d]
    rope: Callable = rope  # (q [n, nq, hd], k [n, nkv, hd], cos, sin [n, 1, hd]) -> (q, k)
    silu_mul: Callable = silu_mul  # (gate, up), each [n, intermediate] -> [n, intermediate]
    linear: Callable = Linear  # (weights, biases) -> a projection: proj(x), proj.parts(x)
    name: str = "torch"  # what runs, for reports


TORCH_OPS = Ops()


# --- the model -----------------------------------------------------------------------------------


@dataclass
class LayerWeights:
    """One decoder layer: the two norms' weights and the projections (``Ops.linear``, biases inside)."""

    input_norm: torch.Tensor  # [hidden]
    qkv: Linear  # q [num_heads * head_dim, hidden], k and v [num_kv_heads * head_dim, hidden]
    o: Linear  # [hidden, num_heads * head_dim]
    post_norm: torch.Tensor  # [hidden]
    gate_up: Linear  # gate and up, each [intermediate, hidden]
    down: Linear  # [hidden, intermediate]


@dataclass(frozen=True)
class Dims:
    """The sizes a decoder layer needs besides its weights."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float  # RMSNorm's epsilon


def decoder_layer(x: torch.Tensor, w: LayerWeights, cos: torch.Tensor, sin: torch.Tensor, attend,
                  dims: Dims, ops: Ops = TORCH_OPS) -> torch.Tensor:
    """One Llama decoder layer, x ``[num_tokens, hidden]`` -> ``[num_tokens, hidden]``: RMSNorm -> q/k/v ->
    RoPE -> attention -> o -> residual, RMSNorm -> SwiGLU MLP -> residual. The eager forward and the
    compiled decode graph (``engine.compiled``) both run this function.

    cos, sin: ``[num_tokens, 1, head_dim]`` (sin pre-signed, see ``engine.rope.RopeTables``);
    ``attend(q, k, v)`` stores the new K/V in the paged cache and returns
    ``[num_tokens, num_heads, head_dim]``.
    """
    nq, nkv, hd = dims.num_heads, dims.num_kv_heads, dims.head_dim
    h = ops.rms_norm(x, w.input_norm, dims.eps)
    q, k, v = w.qkv.parts(h)
    q = q.view(-1, nq, hd)  # [num_tokens, num_heads, head_dim]
    k = k.view(-1, nkv, hd)  # [num_tokens, num_kv_heads, head_dim]
    v = v.view(-1, nkv, hd)
    q, k = ops.rope(q, k, cos, sin)
    o = attend(q, k, v)  # [num_tokens, num_heads, head_dim]
    x = x + w.o(o.reshape(-1, nq * hd))
    h = ops.rms_norm(x, w.post_norm, dims.eps)
    gate, up = w.gate_up.parts(h)  # each [num_tokens, intermediate]
    return x + w.down(ops.silu_mul(gate, up))


class PagedLlama:
    """Llama / SmolLM2 / Qwen2-style decoder whose attention runs over a paged KV cache.

    Every weight is the transformers tensor itself, and ``ops`` computes with it (plain torch unless the
    engine installed a faster path). With the plain ops, q/k/v and gate/up stay separate ``F.linear`` calls:
    stacking them would mean a second copy of those weights, and with MKL it measured no faster.
    """

    def __init__(self, config: Any, embed: torch.Tensor, layers: list[LayerWeights],
                 final_norm: torch.Tensor, lm_head: Linear, ops: Ops = TORCH_OPS):
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act={act!r} is not supported (Llama-family models use 'silu')")
        self.config, self.ops = config, ops
        self.embed = embed  # [vocab, hidden]
        self.layers, self.num_layers = layers, len(layers)
        self.final_norm = final_norm  # [hidden]
        self.lm_head = lm_head  # [vocab, hidden] (its weight is the embedding itself when tied)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.hidden_size = config.hidden_size
        self.head_dim = getattr(config, "head_dim", None) or self.hidden_size // self.num_heads
        self.eps = float(getattr(config, "rms_norm_eps", 1e-6))
        self.scale = self.head_dim**-0.5
        self.dims = Dims(self.num_heads, self.num_kv_heads, self.head_dim, self.eps)
        self.max_model_len = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self.dtype, self.device = embed.dtype, embed.device
        # rope_tables(positions, max_position) -> cos, pre-signed sin, each [num_tokens, 1, head_dim]
        self.rope_tables = RopeTables(config, self.head_dim, self.device, self.dtype,
                                      min(self.max_model_len, 4096))

    @classmethod
    def from_hf(cls, model: Any, ops: Ops = TORCH_OPS) -> PagedLlama:
        """Take the weights of a transformers Llama-family causal LM (LlamaForCausalLM and alike); each
        projection made by ``ops.linear`` from the modules' own tensors (nothing is copied here)."""
        def linear(*modules) -> Linear:
            biases = [None if getattr(m, "bias", None) is None else m.bias.detach() for m in modules]
            return ops.linear([m.weight.detach() for m in modules], biases)

        core = model.model
        layers = []
        for layer in core.layers:  # transformers' decoder layer: self_attn, mlp and two norms
            attn, mlp = layer.self_attn, layer.mlp
            layers.append(LayerWeights(layer.input_layernorm.weight.detach(),
                                       linear(attn.q_proj, attn.k_proj, attn.v_proj), linear(attn.o_proj),
                                       layer.post_attention_layernorm.weight.detach(),
                                       linear(mlp.gate_proj, mlp.up_proj), linear(mlp.down_proj)))
        return cls(model.config, core.embed_tokens.weight.detach(), layers, core.norm.weight.detach(),
                   linear(model.lm_head), ops)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list,
                meta: AttentionMetadata | list[AttentionMetadata], attention=None,
                kv_scales: list | None = None) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] after the final norm.

        input_ids, positions: int64 [num_tokens], the query tokens of all scheduled sequences;
        meta: the step's AttentionMetadata, or one per layer (layer groups: each layer gets its group's);
        kv_caches: per layer (k_cache, v_cache), each [num_blocks, block_size, num_kv_heads, head_dim];
        kv_scales: per layer (k_scale, v_scale) of an fp8 cache (``KVCache.scales``), None for a float one;
        attention(q, k, v, k_cache, v_cache, meta, scale) stores k/v and returns [num_tokens, heads,
        head_dim] (given ``k_scale=``, ``v_scale=`` only with kv_scales: float-cache attention still works).
        """
        attention = attention or PagedAttention()
        metas = list(meta) if isinstance(meta, (list, tuple)) else [meta] * self.num_layers
        if len(metas) != self.num_layers:
            raise ValueError(f"meta: {len(metas)} AttentionMetadata for {self.num_layers} layers")
        top = None if metas[0].max_context_len is None else metas[0].max_context_len - 1
        cos, sin = self.rope_tables(positions, top)
        x = self.embed[input_ids]  # [num_tokens, hidden]
        for i, w in enumerate(self.layers):
            k_cache, v_cache = kv_caches[i]
            quant = {} if kv_scales is None else dict(zip(("k_scale", "v_scale"), kv_scales[i]))
            attend = partial(attention, k_cache=k_cache, v_cache=v_cache, meta=metas[i], scale=self.scale,
                             **quant)
            x = decoder_layer(x, w, cos, sin, attend, self.dims, self.ops)
        return self.ops.rms_norm(x, self.final_norm, self.eps)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> fp32 logits [n, vocab]; only the rows that will be sampled are passed in."""
        return self.lm_head(hidden).float()
