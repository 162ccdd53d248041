"""A Llama-family decoder written over the paged KV cache.

The weights come from the transformers model that ``paged_lab.models.load_model`` returns; the forward
is ours: embedding -> N x (RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP) -> RMSNorm -> head.
Attention reads and writes the per-layer paged caches through ``paged_lab.kernels``:

    store_kv(k, v, k_cache, v_cache, slot_mapping)          # the new tokens' K/V go into their slots
    paged_attention_prefill / paged_attention_decode(q, ...) # then q attends over block tables

One forward serves a whole engine step: the query tokens of every scheduled sequence are concatenated
into one flat batch ``[num_tokens, hidden]`` (no padding), so the matmuls see every sequence at once.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    """Where one step's query tokens live in the paged cache (shared by all layers)."""

    slot_mapping: torch.Tensor  # int64 [num_tokens]: cache slot of every query token
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks]
    context_lens: torch.Tensor  # int32 [num_seqs]: tokens in cache after this step, query included
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]: cumsum of query lengths
    is_decode: bool  # every sequence has exactly one query token -> the decode kernel
    # The torch backend's gather indices and masks (kernels.torch_paged.GatherPlan), built once per step
    # by the engine; None -> the kernel builds them itself (per layer).
    plan: Any = None
    # True once the tensors above passed the kernels' argument checks (layer 0 of a forward runs them;
    # the other layers see the same tensors and skip the checks).
    validated: bool = False


# --- RoPE ----------------------------------------------------------------------------------------


def rope_parameters(config: Any) -> dict:
    """The RoPE settings of a transformers config: ``rope_parameters`` (transformers 5) or the older
    ``rope_theta`` + ``rope_scaling`` pair, as one dict with at least ``rope_type`` and ``rope_theta``."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    legacy = getattr(config, "rope_scaling", None) or {}
    for key, value in dict(legacy).items():
        params.setdefault(key, value)
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params["type"]
    params.setdefault("rope_type", "default")
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def rope_inv_freq(config: Any, head_dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim // 2] and the cos/sin scale, as transformers computes them."""
    params = rope_parameters(config)
    kind = params["rope_type"]
    base = float(params["rope_theta"])
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / params["factor"], 1.0
    if kind == "llama3":
        # Llama 3.1+: long wavelengths (low frequencies) are stretched by `factor`, short ones kept,
        # the band in between interpolated smoothly.
        factor = params["factor"]
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        old_len = params["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, smoothed, scaled), 1.0
    # Other schemes (yarn, longrope, ...): use transformers' own initialiser rather than a second copy.
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"rope_type={kind!r} is not supported; known: default, linear, llama3, "
                         f"{', '.join(ROPE_INIT_FUNCTIONS)}")
    inv_freq, scale = ROPE_INIT_FUNCTIONS[kind](config, None)
    return inv_freq.float().cpu(), float(scale)


def _bias(linear) -> torch.Tensor | None:
    return None if getattr(linear, "bias", None) is None else linear.bias.detach()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, computed in fp32 (as transformers' LlamaRMSNorm)."""
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# --- the model -----------------------------------------------------------------------------------


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [hidden]
    q: torch.Tensor  # [num_heads * head_dim, hidden]
    k: torch.Tensor  # [num_kv_heads * head_dim, hidden]
    v: torch.Tensor  # [num_kv_heads * head_dim, hidden]
    q_bias: torch.Tensor | None
    k_bias: torch.Tensor | None
    v_bias: torch.Tensor | None
    o: torch.Tensor  # [hidden, num_heads * head_dim]
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor  # [hidden]
    gate: torch.Tensor  # [intermediate, hidden]
    up: torch.Tensor  # [intermediate, hidden]
    down: torch.Tensor  # [hidden, intermediate]
    gate_bias: torch.Tensor | None = None
    up_bias: torch.Tensor | None = None
    down_bias: torch.Tensor | None = None


def paged_attention(backend: str = "auto"):
    """The attention step of every layer, through ``paged_lab.kernels``: store the new tokens' K/V in
    their slots, then attend over the block tables (decode kernel when every query is one token)."""
    from paged_lab import kernels

    def attend(q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        check = not meta.validated
        kernels.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, backend=backend, validate=check)
        if meta.is_decode:
            return kernels.paged_attention_decode(q, k_cache, v_cache, meta.block_tables, meta.context_lens,
                                                  scale, backend=backend, validate=check, plan=meta.plan)
        return kernels.paged_attention_prefill(q, k_cache, v_cache, meta.block_tables, meta.context_lens,
                                               meta.query_start_loc, scale, backend=backend, validate=check,
                                               plan=meta.plan)

    return attend


_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # transformers model -> PagedLlama


class PagedLlama:
    """Llama / SmolLM2 / Qwen2-style decoder whose attention runs over a paged KV cache.

    ``PagedLlama.from_hf(model)`` copies nothing: every weight is the transformers tensor itself (fusing
    q/k/v or gate/up would double those weights in RAM and measured no faster on CPU).
    """

    def __init__(self, config: Any, embed: torch.Tensor, layers: list[LayerWeights],
                 final_norm: torch.Tensor, lm_head: torch.Tensor):
        self.config = config
        self.embed = embed  # [vocab, hidden]
        self.layers = layers
        self.final_norm = final_norm
        self.lm_head = lm_head  # [vocab, hidden] (the embedding itself when tied)
        self.num_layers = len(layers)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.hidden_size = config.hidden_size
        self.head_dim = getattr(config, "head_dim", None) or self.hidden_size // self.num_heads
        self.eps = float(getattr(config, "rms_norm_eps", 1e-6))
        self.scale = self.head_dim**-0.5
        self.max_model_len = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self.dtype = embed.dtype
        self.device = embed.device
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act={act!r} is not supported (Llama-family models use 'silu')")
        inv_freq, rope_scale = rope_inv_freq(config, self.head_dim)
        self._inv_freq = inv_freq.to(self.device)
        self._rope_scale = rope_scale
        self._cos = self._sin = torch.empty(0, self.head_dim)
        self._extend_rope(min(self.max_model_len, 4096))

    # -- construction --
    @classmethod
    def from_hf(cls, model: Any) -> PagedLlama:
        """Take the weights of a transformers Llama-family causal LM (LlamaForCausalLM and alike).

        Cached per model object: several engines over one loaded model share one runner."""
        cached = _RUNNERS.get(model)
        if cached is not None:
            return cached
        runner = cls._build(model)
        _RUNNERS[model] = runner
        return runner

    @classmethod
    def _build(cls, model: Any) -> PagedLlama:
        config = model.config
        core = model.model
        layers = []
        for layer in core.layers:
            a, m = layer.self_attn, layer.mlp
            layers.append(LayerWeights(
                input_norm=layer.input_layernorm.weight.detach(),
                q=a.q_proj.weight.detach(), k=a.k_proj.weight.detach(), v=a.v_proj.weight.detach(),
                q_bias=_bias(a.q_proj), k_bias=_bias(a.k_proj), v_bias=_bias(a.v_proj),
                o=a.o_proj.weight.detach(), o_bias=_bias(a.o_proj),
                post_norm=layer.post_attention_layernorm.weight.detach(),
                gate=m.gate_proj.weight.detach(), up=m.up_proj.weight.detach(), down=m.down_proj.weight.detach(),
                gate_bias=_bias(m.gate_proj), up_bias=_bias(m.up_proj), down_bias=_bias(m.down_proj),
            ))
        return cls(config, core.embed_tokens.weight.detach(), layers, core.norm.weight.detach(),
                   model.lm_head.weight.detach())

    def _extend_rope(self, length: int) -> None:
        """cos/sin tables [length, head_dim] for positions 0..length-1 (grown on demand)."""
        pos = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = pos[:, None] * self._inv_freq[None, :]  # [length, head_dim // 2]
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos = (emb.cos() * self._rope_scale).to(self.dtype)
        self._sin = (emb.sin() * self._rope_scale).to(self.dtype)

    # -- forward --
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list,
                meta: AttentionMetadata, attention=None) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] after the final norm.

        input_ids, positions: int64 [num_tokens], the query tokens of all scheduled sequences;
        kv_caches: per layer (k_cache, v_cache), each [num_blocks, block_size, num_kv_heads, head_dim];
        attention(q, k, v, k_cache, v_cache, meta, scale) stores k/v and returns [num_tokens, heads, head_dim].
        """
        attention = attention or paged_attention()
        # Layer 0 checks the metadata; every later layer gets the same tensors, marked as checked.
        checked = meta if meta.validated else dataclasses.replace(meta, validated=True)
        if int(positions.max()) >= self._cos.shape[0]:
            self._extend_rope(max(int(positions.max()) + 1, 2 * self._cos.shape[0]))
        cos = self._cos[positions].unsqueeze(1)  # [num_tokens, 1, head_dim]
        sin = self._sin[positions].unsqueeze(1)
        nq, nkv, hd = self.num_heads, self.num_kv_heads, self.head_dim
        q_size = nq * hd
        x = self.embed[input_ids]  # [num_tokens, hidden]
        for i, w in enumerate(self.layers):
            h = rms_norm(x, w.input_norm, self.eps)
            q = F.linear(h, w.q, w.q_bias).view(-1, nq, hd)  # [num_tokens, num_heads, head_dim]
            k = F.linear(h, w.k, w.k_bias).view(-1, nkv, hd)  # [num_tokens, num_kv_heads, head_dim]
            v = F.linear(h, w.v, w.v_bias).view(-1, nkv, hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache, v_cache = kv_caches[i]
            o = attention(q, k, v, k_cache, v_cache, meta if i == 0 else checked, self.scale)  # [num_tokens, nq, hd]
            x = x + F.linear(o.reshape(-1, q_size), w.o, w.o_bias)
            h = rms_norm(x, w.post_norm, self.eps)
            mlp = F.silu(F.linear(h, w.gate, w.gate_bias)) * F.linear(h, w.up, w.up_bias)  # [num_tokens, inter]
            x = x + F.linear(mlp, w.down, w.down_bias)
        return rms_norm(x, self.final_norm, self.eps)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> fp32 logits [n, vocab]; only the rows that will be sampled are passed in."""
        return F.linear(hidden, self.lm_head).float()
