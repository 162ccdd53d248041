"""A Llama-family decoder written over the paged KV cache.

The weights come from the transformers model that ``paged_lab.models.load_model`` returns; the forward
is ours: embedding -> N x (RMSNorm, GQA attention with RoPE, RMSNorm, SwiGLU MLP) -> RMSNorm -> head.
Attention (:class:`PagedAttention`) reads and writes the per-layer paged caches through the backend
that ``paged_lab.kernels`` chose for them:

    store_kv(k, v, k_cache, v_cache, slot_mapping)  # the new tokens' K/V go into their slots
    prefill / store_and_decode(q, ...)              # then q attends over the block tables

One forward serves a whole engine step: the query tokens of every scheduled sequence are concatenated
into one flat batch ``[num_tokens, hidden]`` (no padding), so the matmuls see every sequence at once.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from paged_lab import kernels
from paged_lab.engine.linear import Linear, can_prepack
from paged_lab.kernels import checks, cpu_layer_ops


@dataclass(frozen=True, eq=False)
class AttentionMetadata:
    """Where one step's query tokens live in the paged cache: the step's tensors, which every layer
    reads, and nothing of any backend's (as vLLM's ``CommonAttentionMetadata``, "shared across layers and
    backends", ``vllm/v1/attention/backend.py``, vllm 0.32.0). What a backend precomputes from it, its
    plan of the step, lives with the backend (:class:`PagedAttention`). Built once per step and never
    changed: the plan is kept for this very object.

    A model with layer groups (sliding-window layers, ``engine.kv_groups``) has one per group per step:
    the same query tokens and lengths, the group's own block tables and slot mapping, and the group's
    ``sliding_window`` (vLLM copies the common metadata per KV cache group and swaps in
    ``block_table_tensor`` and ``slot_mapping``, ``_build_attention_metadata`` in
    ``vllm/v1/worker/gpu_model_runner.py``; its CPU backend's builder adds the group's window,
    ``_group_sliding_window`` in ``vllm/v1/attention/backends/cpu_attn.py``)."""

    slot_mapping: torch.Tensor  # int64 [num_tokens]: cache slot of every query token
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks]
    context_lens: torch.Tensor  # int32 [num_seqs]: tokens in cache after this step, query included
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]: cumsum of query lengths
    is_decode: bool  # every sequence has exactly one query token -> the decode kernel
    # The longest query and context of the step, as host ints: the engine knows them from its lists, so
    # no kernel or RoPE table has to read them back from the device (a sync per layer on a GPU).
    max_query_len: int | None = None
    max_context_len: int | None = None
    # How many of the first sequences have a one-token query (decodes): the engine puts them first,
    # as vLLM reorders a batch for its attention backends. 0: none, or not said.
    num_decodes: int = 0
    # The layers that read this attend to the last sliding_window positions only (None: the whole context);
    # their block tables may hold NULL_BLOCK before each query's window.
    sliding_window: int | None = None


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


def _linear(modules, prepack: bool, batch_hint: int | None) -> Linear:
    """transformers nn.Linear modules (one, or several reading the same input) as one ``Linear``."""
    modules = modules if isinstance(modules, (list, tuple)) else [modules]
    biases = [None if getattr(m, "bias", None) is None else m.bias.detach() for m in modules]
    return Linear([m.weight.detach() for m in modules], biases, prepack=prepack, batch_hint=batch_hint)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, computed in fp32 (as transformers' LlamaRMSNorm). On a CPU one C pass
    (``kernels.cpu_layer_ops``, the same formula): torch's version is about ten small ops."""
    if x.dim() == 2 and x.is_contiguous() and weight.dtype == x.dtype and cpu_layer_ops.usable(x):
        return cpu_layer_ops.rms_norm(x, weight, eps)
    if x.dtype == torch.float32:  # one fused op, same formula and result
        return F.rms_norm(x, weight.shape, weight, eps)
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


# --- the model -----------------------------------------------------------------------------------


@dataclass
class LayerWeights:
    """One decoder layer: the two norms' weights and the projections (``Linear``, biases inside)."""

    input_norm: torch.Tensor  # [hidden]
    qkv: Linear  # q [num_heads * head_dim, hidden], k and v [num_kv_heads * head_dim, hidden]
    o: Linear  # [hidden, num_heads * head_dim]
    post_norm: torch.Tensor  # [hidden]
    gate_up: Linear  # gate and up, each [intermediate, hidden]
    down: Linear  # [hidden, intermediate]


class PagedAttention:
    """The attention step of every layer, through ``paged_lab.kernels``: store the new tokens' K/V in
    their slots and attend over the block tables; a decode (one query token per sequence) does both in
    one ``store_and_decode`` call. ``attention(q, k, v, k_cache, v_cache, meta, scale, k_scale, v_scale)``;
    ``k_scale``/``v_scale``: the layer's fp8 cache scales (``KVCache.scales``; a float cache ignores them),
    which vLLM's ``Attention`` layer holds as ``_k_scale``/``_v_scale`` and passes to its kernels alike.

    The backend is chosen once (``kernels.choose_backend``): when the engine builds this with its cache
    (``like``: layer 0's (k_cache, v_cache) and the model's num_heads), else on the first call. A step's
    tensors are checked once, on the first layer that reads them, where the backend also builds its
    plan of the step (``kernels.dispatch.StepPlan``); the later layers get the same ``meta`` and reuse
    both (one plan per metadata object: a model with layer groups has one per group per step).
    ``stats``: a ``kernels.KernelStats`` that counts what ran. ``sliding_window``: some layers will attend
    through a window of that many tokens, so the backend must take one (``kernels.choose_backend``).

    A step that mixes one-token queries (decodes, first) with longer ones (prefills) is attended in two
    parts when the backend reads a plan (torch's prefill pads every sequence's queries to the longest:
    a decode beside a 50-token prefill would cost 50 query rows), the decodes through the decode kernel.
    vLLM's attention backends find the same boundary (``split_decodes_and_prefills`` in
    ``vllm/v1/attention/backends/utils.py``, vllm 0.32.0, once ``reorder_batch_to_split_decodes_and_prefills``
    has put the decodes first)."""

    def __init__(self, backend: str = "auto", stats=None, like: tuple | None = None,
                 num_heads: int | None = None, sliding_window: int | None = None):
        self.backend_name = backend
        self.stats = kernels.KernelStats() if stats is None else stats
        self.sliding_window = sliding_window
        self.backend = None  # kernels.ChosenBackend, once chosen
        # meta -> its parts and plans, for the metadata objects still alive (this step's)
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        if like is not None:
            self._choose(*like, num_heads)

    def _choose(self, k_cache, v_cache, num_heads: int | None, sliding_window: int | None = None):
        q = None if num_heads is None else k_cache.new_empty((0, num_heads, k_cache.shape[-1]))
        self.backend = kernels.choose_backend(self.backend_name, k_cache, v_cache, q, stats=self.stats,
                                              sliding_window=self.sliding_window or sliding_window)

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float, k_scale: float = 1.0,
                 v_scale: float = 1.0) -> torch.Tensor:
        if self.backend is None:
            self._choose(k_cache, v_cache, q.shape[1], meta.sliding_window)
        parts = self.prepare(meta, k_cache, v_cache)
        first_plan = parts[0][1]
        if not first_plan.checked:  # the first layer of the step: the shapes the later layers repeat
            checks.check_layer(q, k, v, k_cache, v_cache, meta.slot_mapping.shape[0], scale)
            first_plan.checked = True
        kv_scales = {"k_scale": k_scale, "v_scale": v_scale}
        if len(parts) == 1:
            return self._attend(q, k, v, k_cache, v_cache, *parts[0], scale, kv_scales)
        (decode, decode_plan), (prefill, prefill_plan) = parts
        n = decode.slot_mapping.shape[0]
        # Every token of the step is stored before anyone attends, as in vLLM's layers: a one-token query
        # sorted into the decode part may read a block that a prefill of this same step fills (two equal
        # prompts admitted together: the second hits the first one's blocks).
        self.backend.store_kv(k[n:], v[n:], k_cache, v_cache, prefill.slot_mapping, prefill_plan, **kv_scales)
        return torch.cat((
            self._attend(q[:n], k[:n], v[:n], k_cache, v_cache, decode, decode_plan, scale, kv_scales),
            self._prefill(q[n:], k_cache, v_cache, prefill, prefill_plan, scale, kv_scales)))

    def _attend(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, plan, scale: float,
                kv_scales: dict) -> torch.Tensor:
        if meta.is_decode:  # store every token's K/V, then attend: one call
            return self.backend.store_and_decode(q, k, v, k_cache, v_cache, meta.slot_mapping,
                                                 meta.block_tables, meta.context_lens, scale, plan,
                                                 **kv_scales)
        self.backend.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, plan, **kv_scales)
        return self._prefill(q, k_cache, v_cache, meta, plan, scale, kv_scales)

    def _prefill(self, q, k_cache, v_cache, meta: AttentionMetadata, plan, scale: float,
                 kv_scales: dict) -> torch.Tensor:
        return self.backend.prefill(q, k_cache, v_cache, meta.block_tables, meta.context_lens,
                                    meta.query_start_loc, scale, plan, max_query_len=meta.max_query_len,
                                    **kv_scales)

    def prepare(self, meta: AttentionMetadata, k_cache, v_cache) -> list:
        """Check the step's tensors and build the backend's plan of it: [(metadata, StepPlan)], one part,
        or the decodes and the prefills. The first layer that sees ``meta`` calls this (a caller may do it
        earlier); the others reuse the result."""
        parts = self._plans.get(meta)
        if parts is not None:
            return [(meta if m is None else m, plan) for m, plan in parts]
        if self.backend is None:
            self._choose(k_cache, v_cache, None, meta.sliding_window)
        checks.check_step(k_cache, v_cache, meta.slot_mapping, meta.block_tables, meta.context_lens,
                          None if meta.is_decode else meta.query_start_loc, meta.max_query_len,
                          meta.sliding_window)
        num_seqs = meta.block_tables.shape[0]
        split = self.backend.uses_plan and 0 < meta.num_decodes < num_seqs
        pieces = split_decodes_and_prefills(meta) if split else (meta,)
        block_size = k_cache.shape[1]
        parts = [(m, self.backend.plan(m.block_tables, m.context_lens, m.slot_mapping, block_size,
                                       None if m.is_decode else m.query_start_loc, m.max_context_len,
                                       m.max_query_len, m.sliding_window)) for m in pieces]
        # (None for ``meta`` itself: a value that held its weak key would keep every step's plan for ever)
        self._plans[meta] = [(None if m is meta else m, plan) for m, plan in parts]
        return parts


def split_decodes_and_prefills(meta: AttentionMetadata) -> tuple[AttentionMetadata, AttentionMetadata]:
    """A mixed step's metadata as (its ``num_decodes`` decodes, its prefills): views of its tensors. The
    query tokens [0, n) are the decodes' (one each), so the prefills' query_start_loc starts at n."""
    n = meta.num_decodes
    decode = AttentionMetadata(
        meta.slot_mapping[:n], meta.block_tables[:n], meta.context_lens[:n], meta.query_start_loc[:n + 1],
        is_decode=True, max_query_len=1, max_context_len=int(meta.context_lens[:n].max()), num_decodes=n,
        sliding_window=meta.sliding_window)
    prefill = AttentionMetadata(
        meta.slot_mapping[n:], meta.block_tables[n:], meta.context_lens[n:], meta.query_start_loc[n:] - n,
        is_decode=False, max_query_len=meta.max_query_len, max_context_len=int(meta.context_lens[n:].max()),
        sliding_window=meta.sliding_window)
    return decode, prefill


@dataclass(frozen=True)
class Dims:
    """The sizes a decoder layer needs besides its weights."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float  # RMSNorm's epsilon


def decoder_layer(x: torch.Tensor, w: LayerWeights, cos: torch.Tensor, sin: torch.Tensor, attend,
                  dims: Dims) -> torch.Tensor:
    """One Llama decoder layer, x ``[num_tokens, hidden]`` -> ``[num_tokens, hidden]``: RMSNorm -> q/k/v ->
    RoPE -> attention -> o -> residual, RMSNorm -> SwiGLU MLP -> residual. The eager forward and the
    compiled decode graph (``engine.compiled``) both run this function.

    cos, sin: ``[num_tokens, 1, head_dim]`` (sin pre-signed, see ``PagedLlama._extend_rope``);
    ``attend(q, k, v)`` stores the new K/V in the paged cache and returns
    ``[num_tokens, num_heads, head_dim]``.
    """
    nq, nkv, hd = dims.num_heads, dims.num_kv_heads, dims.head_dim
    h = rms_norm(x, w.input_norm, dims.eps)
    q, k, v = w.qkv.parts(h)
    q = q.view(-1, nq, hd)  # [num_tokens, num_heads, head_dim]
    k = k.view(-1, nkv, hd)  # [num_tokens, num_kv_heads, head_dim]
    v = v.view(-1, nkv, hd)
    q, k = rope(q, k, cos, sin)
    o = attend(q, k, v)  # [num_tokens, num_heads, head_dim]
    x = x + w.o(o.reshape(-1, nq * hd))
    h = rms_norm(x, w.post_norm, dims.eps)
    return x + w.down(swiglu(w.gate_up, h))


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
         sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE: x * cos + rotate_half(x) * sin, for q ``[num_tokens, num_heads, head_dim]`` and k; ``sin`` is
    pre-signed, so rotate_half is a roll (see ``PagedLlama._extend_rope``). On a CPU one C pass over both,
    in place (q and k are fresh outputs of the q/k/v matmul), instead of eight torch ops."""
    if cpu_layer_ops.usable(q) and cpu_layer_ops.rope_usable(q, k, cos):
        cpu_layer_ops.rope_(q, k, cos, sin)
        return q, k
    hd = q.shape[-1]
    return q * cos + q.roll(hd // 2, -1) * sin, k * cos + k.roll(hd // 2, -1) * sin


def swiglu(gate_up: Linear, h: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up of the MLP's gate/up projection of h -> ``[num_tokens, intermediate]``. On a CPU one
    C pass instead of two ops, over the two halves of the packed matmul's one output or over the two
    ``F.linear`` outputs of a long fp32 prefill (never glued into one tensor: a copy of about 12 MB per layer
    for a prefill of 1,000 tokens)."""
    gate, up = gate_up.parts(h)  # each [num_tokens, intermediate]
    if cpu_layer_ops.usable(h):
        return cpu_layer_ops.silu_mul(gate, up)
    return F.silu(gate) * up


# The decode batch oneDNN lays the prepacked weights out for (engine.linear.Linear's batch_hint).
PREPACK_BATCH_HINT = 8

_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # transformers model -> PagedLlama


class PagedLlama:
    """Llama / SmolLM2 / Qwen2-style decoder whose attention runs over a paged KV cache.

    Every weight is the transformers tensor itself. With ``prepack`` the projections and the head also
    keep a oneDNN-prepacked copy (``engine.linear``), which costs RAM and is much faster on CPU; that
    copy stacks q/k/v and gate/up into one matmul each. Without it they stay separate ``F.linear`` calls
    (stacking would mean a second copy of those weights, and with MKL it measured no faster).
    """

    def __init__(self, config: Any, embed: torch.Tensor, layers: list[LayerWeights],
                 final_norm: torch.Tensor, lm_head: Linear):
        self.config = config
        self.embed = embed  # [vocab, hidden]
        self.layers = layers
        self.final_norm = final_norm
        self.lm_head = lm_head  # [vocab, hidden] (its weight is the embedding itself when tied)
        self.prepacked = lm_head.is_prepacked
        self.num_layers = len(layers)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.hidden_size = config.hidden_size
        self.head_dim = getattr(config, "head_dim", None) or self.hidden_size // self.num_heads
        self.eps = float(getattr(config, "rms_norm_eps", 1e-6))
        self.scale = self.head_dim**-0.5
        self.dims = Dims(self.num_heads, self.num_kv_heads, self.head_dim, self.eps)
        self.max_model_len = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self.dtype = embed.dtype
        self.device = embed.device
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act={act!r} is not supported (Llama-family models use 'silu')")
        inv_freq, rope_scale = rope_inv_freq(config, self.head_dim)
        self._inv_freq = inv_freq.to(self.device)
        self._rope_scale = rope_scale
        self._cos = self._sin_signed = torch.empty(0, self.head_dim)
        self._extend_rope(min(self.max_model_len, 4096))

    # -- construction --
    @classmethod
    def from_hf(cls, model: Any, prepack: bool | None = None) -> PagedLlama:
        """Take the weights of a transformers Llama-family causal LM (LlamaForCausalLM and alike).

        prepack: also keep oneDNN-prepacked copies of the projections (``engine.linear``); None -> where
        the weights allow it (CPU, fp32/bf16). Cached per model object: several engines over one loaded
        model share one runner, rebuilt if the model's dtype or device changed or ``prepack`` differs."""
        weight = model.get_input_embeddings().weight
        if prepack is None:
            prepack = can_prepack(weight)
        cached = _RUNNERS.get(model)
        if (cached is not None and cached.dtype == weight.dtype and cached.device == weight.device
                and cached.embed.data_ptr() == weight.data_ptr() and cached.prepacked == prepack):
            return cached
        runner = cls._build(model, prepack, PREPACK_BATCH_HINT)
        _RUNNERS[model] = runner
        return runner

    @classmethod
    def _build(cls, model: Any, prepack: bool, batch_hint: int | None) -> PagedLlama:
        config = model.config
        core = model.model
        layers = []
        for layer in core.layers:
            a, m = layer.self_attn, layer.mlp
            layers.append(LayerWeights(
                input_norm=layer.input_layernorm.weight.detach(),
                qkv=_linear([a.q_proj, a.k_proj, a.v_proj], prepack, batch_hint),
                o=_linear(a.o_proj, prepack, batch_hint),
                post_norm=layer.post_attention_layernorm.weight.detach(),
                gate_up=_linear([m.gate_proj, m.up_proj], prepack, batch_hint),
                down=_linear(m.down_proj, prepack, batch_hint),
            ))
        return cls(config, core.embed_tokens.weight.detach(), layers, core.norm.weight.detach(),
                   _linear(model.lm_head, prepack, batch_hint))

    def _extend_rope(self, length: int) -> None:
        """cos/sin tables [length, head_dim] for positions 0..length-1 (grown on demand)."""
        pos = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = pos[:, None] * self._inv_freq[None, :]  # [length, head_dim // 2]
        emb = torch.cat((freqs, freqs), dim=-1)
        self._cos = (emb.cos() * self._rope_scale).to(self.dtype)
        sin = (emb.sin() * self._rope_scale).to(self.dtype)
        # RoPE is x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1). That equals
        # x.roll(half) * sin_signed with sin's first half negated (exactly: only signs move), 2 ops fewer.
        half = sin.shape[-1] // 2
        self._sin_signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)

    def rope_tables(self, positions: torch.Tensor, max_position: int
                    | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and pre-signed sin (see _extend_rope) of each position, each [num_tokens, 1, head_dim]; the
        tables grow when a position is past their end. ``max_position``: the largest position, when the
        caller knows it (else it is read from ``positions``: a device sync)."""
        top = int(positions.max()) if max_position is None else max_position
        if top >= self._cos.shape[0]:
            self._extend_rope(max(top + 1, 2 * self._cos.shape[0]))
        return self._cos[positions].unsqueeze(1), self._sin_signed[positions].unsqueeze(1)

    # -- forward --
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
        head_dim]; with kv_scales it also gets the layer's ``k_scale=``, ``v_scale=`` (so an attention
        function written for float caches keeps working).
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
            x = decoder_layer(x, w, cos, sin, attend, self.dims)
        return rms_norm(x, self.final_norm, self.eps)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[n, hidden] -> fp32 logits [n, vocab]; only the rows that will be sampled are passed in."""
        return self.lm_head(hidden).float()
