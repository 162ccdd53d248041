"""KV-cache size math: how many bytes one token of context costs, and how many fit.

Per token, every layer stores one K and one V vector per KV head:

    bytes/token = 2 (K and V) x num_layers x num_kv_heads x head_dim x bytes/element

GQA shares each KV head among a group of query heads, so only ``num_kv_heads`` counts. Two kinds of
today's models change the formula:

- MLA (DeepSeek-V2/V3) caches one latent per token and layer instead of a K and a V per head:
  ``num_layers x (kv_lora_rank + qk_rope_head_dim) x bytes``.
- Sliding-window layers (gpt-oss, Gemma 3) attend only to the last ``sliding_window`` tokens, so they
  keep at most that many: past the window, a request's cache grows only in its full-attention layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from paged_lab._checks import check_int, check_keys, check_positive

GB = 10**9  # GPU memory sizes are sold in decimal gigabytes ("80 GB")
GiB = 2**30
COMMON_GPU_SIZES_GB = (16, 24, 40, 80, 141)

# Bytes per element of the cache dtypes the series discusses. Aliases map to one canonical name.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}
_DTYPE_ALIASES = {
    "fp32": "float32", "float": "float32", "f32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16", "half": "float16", "f16": "float16",
    "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
}
LAYER_TYPES = ("full_attention", "sliding_attention")  # HF's names per layer (config.json "layer_types")


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) in integers: the blocks ``a`` tokens occupy when a block holds ``b`` (the last one maybe
    partly filled). vLLM and Triton call it ``cdiv`` too (``vllm.utils.cdiv``, ``triton.cdiv``)."""
    return -(-a // b)


def canonical_dtype(dtype: Any) -> str:
    """Map 'bf16', torch.bfloat16, 'bfloat16' ... to one of DTYPE_BYTES' keys."""
    name = str(dtype).removeprefix("torch.").lower()
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPE_BYTES)}")
    return name


def dtype_bytes(dtype: Any) -> int:
    return DTYPE_BYTES[canonical_dtype(dtype)]


@dataclass(frozen=True)
class ModelSpec:
    """The config facts that decide KV-cache size (and weight size, for capacity planning)."""

    name: str
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    num_params: int
    intermediate_size: int = 0
    max_position_embeddings: int = 0
    tie_word_embeddings: bool = False
    # MLA (multi-head latent attention): the cached latent's width; 0 = not MLA
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0  # MLA: the RoPE part of each key, cached beside the latent
    sliding_window: int = 0  # tokens a sliding-window layer attends to (and keeps)
    layer_types: tuple[str, ...] = ()  # HF's name per layer (LAYER_TYPES); () = every layer full

    def __post_init__(self):
        for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size", "vocab_size"):
            check_int(field, getattr(self, field), minimum=1)  # whole numbers: 2.5 layers is a typo
        for field in ("num_params", "intermediate_size", "max_position_embeddings"):  # 0: not known
            check_int(field, getattr(self, field), minimum=0)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}"
            )
        for field in ("kv_lora_rank", "qk_rope_head_dim", "sliding_window"):
            check_int(field, getattr(self, field), minimum=0)
        if self.qk_rope_head_dim and not self.kv_lora_rank:
            raise ValueError(f"qk_rope_head_dim={self.qk_rope_head_dim} is an MLA field: "
                             "it needs kv_lora_rank > 0")
        self._check_layer_types()

    def _check_layer_types(self) -> None:
        types = tuple(self.layer_types)
        unknown = sorted(set(types) - set(LAYER_TYPES))
        if unknown:
            raise ValueError(f"layer_types may hold only {list(LAYER_TYPES)}, got {unknown}")
        if types and len(types) != self.num_layers:
            raise ValueError(f"layer_types has {len(types)} entries; it needs num_layers={self.num_layers}")
        if "sliding_attention" in types and self.sliding_window < 1:
            raise ValueError("sliding_window must be >= 1 when layer_types has sliding_attention layers, "
                             f"got {self.sliding_window}")
        if self.sliding_window and "sliding_attention" not in types:
            raise ValueError(f"sliding_window={self.sliding_window} is set, but no layer in layer_types is "
                             "'sliding_attention' (use as_full_attention() for the all-full model)")
        # one spelling per model: all-full is (), so a config that lists every layer equals the catalogue's
        object.__setattr__(self, "layer_types", () if set(types) <= {"full_attention"} else types)

    # --- attention kind -------------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads that share one KV head (1 for MHA)."""
        return self.num_heads // self.num_kv_heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_kind(self) -> str:
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    @property
    def num_sliding_layers(self) -> int:
        return self.layer_types.count("sliding_attention")

    @property
    def num_full_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    def as_mha(self) -> ModelSpec:
        """The same model if every query head had its own KV head (and cached its K and V, not a latent)."""
        return replace(self, name=f"{self.name} (as MHA)", num_kv_heads=self.num_heads, kv_lora_rank=0,
                       qk_rope_head_dim=0)

    def as_mqa(self) -> ModelSpec:
        return replace(self, name=f"{self.name} (as MQA)", num_kv_heads=1, kv_lora_rank=0, qk_rope_head_dim=0)

    def as_full_attention(self) -> ModelSpec:
        """The same model if every layer attended to the whole context (no sliding window)."""
        return replace(self, name=f"{self.name} (all full attention)", layer_types=(), sliding_window=0)

    # --- sizes ----------------------------------------------------------------------------------
    def kv_bytes_per_layer_token(self, dtype: Any = "bfloat16", tensor_parallel_size: int = 1) -> int:
        """What one layer stores for one token: K and V of every KV head, or MLA's one latent (no V). On
        one GPU of ``tensor_parallel_size``: vLLM gives each rank ``max(1, num_kv_heads // tp)`` KV heads
        and MLA's latent whole (``ModelConfig.get_num_kv_heads``, ``vllm/config/model.py``, vllm 0.32.0)."""
        check_int("tensor_parallel_size", tensor_parallel_size, minimum=1)
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes(dtype)
        return 2 * max(1, self.num_kv_heads // tensor_parallel_size) * self.head_dim * dtype_bytes(dtype)

    def kv_bytes_per_token(self, dtype: Any = "bfloat16", tensor_parallel_size: int = 1) -> int:
        """Bytes per token in every layer (on one GPU of ``tensor_parallel_size``): the cost of a short
        context (within any sliding window)."""
        return self.num_layers * self.kv_bytes_per_layer_token(dtype, tensor_parallel_size)

    def kv_bytes_per_token_mha(self, dtype: Any = "bfloat16") -> int:
        return self.as_mha().kv_bytes_per_token(dtype)

    def kv_savings_vs_mha(self) -> float:
        """How many times smaller the cache is than the MHA version of the model (the group size for GQA)."""
        return self.kv_bytes_per_token_mha() / self.kv_bytes_per_token()

    def kv_bytes_for_context(self, num_tokens: int, dtype: Any = "bfloat16") -> int:
        """Bytes one request of ``num_tokens`` tokens keeps: every token in a full-attention layer, the
        last ``sliding_window`` at most in a sliding-window layer (counted in tokens, not blocks)."""
        check_int("num_tokens", num_tokens, minimum=0)
        in_window = min(num_tokens, self.sliding_window)
        layer_tokens = self.num_full_layers * num_tokens + self.num_sliding_layers * in_window
        return layer_tokens * self.kv_bytes_per_layer_token(dtype)

    def kv_bytes(self, num_tokens: int, dtype: Any = "bfloat16") -> int:  # (kv_bytes_for_context's old name)
        return self.kv_bytes_for_context(num_tokens, dtype)

    def kv_blocks_for_context(self, num_tokens: int, block_size: int) -> dict[str, int]:
        """Blocks one layer of each kind holds for a request of ``num_tokens`` computed tokens:
        ``{"full_attention": ..., "sliding_attention": ...}`` (the kinds the model has)."""
        check_int("num_tokens", num_tokens, minimum=0)
        check_int("block_size", block_size, minimum=1)
        blocks = {}
        if self.num_full_layers:
            blocks["full_attention"] = cdiv(num_tokens, block_size)
        if self.num_sliding_layers:
            blocks["sliding_attention"] = window_blocks_held(num_tokens, block_size, self.sliding_window)
        return blocks

    def weight_bytes(self, dtype: Any = "bfloat16") -> int:
        return self.num_params * dtype_bytes(dtype)

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: Any, name: str | None = None) -> ModelSpec:
        """Build a spec from any transformers config (or a plain dict of the same keys)."""
        cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        cfg = cfg.get("text_config") or cfg  # multimodal wrappers keep the LM config inside
        check_keys("config", cfg, ("num_attention_heads", "hidden_size", "num_hidden_layers", "vocab_size"))
        heads = check_int("config['num_attention_heads']", cfg["num_attention_heads"], minimum=1)
        hidden = cfg["hidden_size"]
        kv_heads = cfg.get("num_key_value_heads") or heads
        head_dim = cfg.get("head_dim") or hidden // heads
        kv_lora_rank = cfg.get("kv_lora_rank") or 0
        if kv_lora_rank:  # MLA: a head's width is qk_nope_head_dim (d_h in the DeepSeek-V2 paper, Table 1)
            head_dim = cfg.get("qk_nope_head_dim") or head_dim
        layer_types = _layer_types(cfg)
        spec = cls(
            name=name or cfg.get("_name_or_path") or cfg.get("model_type", "model"),
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            hidden_size=hidden,
            vocab_size=cfg["vocab_size"],
            num_params=0,
            intermediate_size=cfg.get("intermediate_size") or 4 * hidden,
            max_position_embeddings=cfg.get("max_position_embeddings") or 0,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=(cfg.get("qk_rope_head_dim") or 0) if kv_lora_rank else 0,
            sliding_window=(cfg.get("sliding_window") or 0) if "sliding_attention" in layer_types else 0,
            layer_types=layer_types,
        )
        return replace(spec, num_params=spec.estimate_num_params(bias=bool(cfg.get("attention_bias"))))

    def estimate_num_params(self, bias: bool = False) -> int:
        """Parameter count of a dense Llama-style decoder with these shapes (MoE and MLA models have
        other weights: their catalogue entries take num_params from the model card)."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + (q + 2 * kv if bias else 0)
        mlp = 3 * h * self.intermediate_size
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + self.num_layers * per_layer + h + head


def _layer_types(cfg: dict) -> tuple[str, ...]:
    """Each layer's attention kind from an HF config: ``layer_types`` if it lists them, else Gemma-3's
    ``sliding_window_pattern`` (every pattern-th layer full, the others sliding), else all full. A
    ``sliding_window`` without either (Mistral-7B v0.1, Qwen2's unused one) reads as all full: the
    short-context upper bound."""
    num_layers = cfg["num_hidden_layers"]
    if cfg.get("layer_types"):
        return tuple(cfg["layer_types"])
    pattern = cfg.get("sliding_window_pattern")
    if pattern and cfg.get("sliding_window"):
        check_int("sliding_window_pattern", pattern, minimum=1)
        return tuple("full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                     for i in range(num_layers))
    return ()


# gpt-oss-20b's 24 layers alternate, sliding first (config.json's layer_types; vLLM's
# vllm/model_executor/models/gpt_oss.py: a window when layer_idx % 2 == 0)
_GPT_OSS_20B_LAYERS = ("sliding_attention", "full_attention") * 12
# Gemma 3 27B: 5 local (sliding) layers, then 1 global, repeated over 62 layers (sliding_window_pattern 6)
_GEMMA_3_27B_LAYERS = _layer_types(
    {"num_hidden_layers": 62, "sliding_window": 1024, "sliding_window_pattern": 6}
)

# Facts copied from each model's config.json on the Hugging Face hub; num_params from its model card.
_CATALOGUE = {
    "smollm2-135m": ModelSpec("smollm2-135m", 30, 9, 3, 64, 576, 49152, 134_515_008, 1536, 8192, True),
    "qwen2.5-0.5b": ModelSpec("qwen2.5-0.5b", 24, 14, 2, 64, 896, 151936, 494_032_768, 4864, 32768, True),
    "llama-3.2-1b": ModelSpec("llama-3.2-1b", 16, 32, 8, 64, 2048, 128256, 1_235_814_400, 8192, 131072, True),
    "llama-3.2-3b": ModelSpec("llama-3.2-3b", 28, 24, 8, 128, 3072, 128256, 3_212_749_824, 8192, 131072,
                              True),
    "llama-2-7b": ModelSpec("llama-2-7b", 32, 32, 32, 128, 4096, 32000, 6_738_415_616, 11008, 4096, False),
    "falcon-7b": ModelSpec("falcon-7b", 32, 71, 1, 64, 4544, 65024, 6_921_720_704, 18176, 2048, True),
    "mistral-7b": ModelSpec("mistral-7b", 32, 32, 8, 128, 4096, 32000, 7_241_732_096, 14336, 32768, False),
    "qwen2.5-7b": ModelSpec("qwen2.5-7b", 28, 28, 4, 128, 3584, 152064, 7_615_616_512, 18944, 131072, False),
    "llama-3.1-8b": ModelSpec("llama-3.1-8b", 32, 32, 8, 128, 4096, 128256, 8_030_261_248, 14336, 131072,
                              False),
    # openai/gpt-oss-20b config.json: 24 layers, 64 q / 8 kv heads, head_dim 64, hidden 2880, vocab 201088,
    # intermediate 2880 (per expert), sliding_window 128; model card: 21B parameters (3.6B active)
    "gpt-oss-20b": ModelSpec("gpt-oss-20b", 24, 64, 8, 64, 2880, 201088, 21_000_000_000, 2880, 131072, False,
                             sliding_window=128, layer_types=_GPT_OSS_20B_LAYERS),
    # google/gemma-3-27b-it config.json text_config: 62 layers, 32 q / 16 kv heads, head_dim 128,
    # hidden 5376, vocab 262208, intermediate 21504, sliding_window 1024, sliding_window_pattern 6;
    # model card: 27B
    "gemma-3-27b": ModelSpec("gemma-3-27b", 62, 32, 16, 128, 5376, 262208, 27_000_000_000, 21504, 131072,
                             True, sliding_window=1024, layer_types=_GEMMA_3_27B_LAYERS),
    "llama-3.1-70b": ModelSpec(
        "llama-3.1-70b", 80, 64, 8, 128, 8192, 128256, 70_553_706_496, 28672, 131072, False
    ),
    # deepseek-ai/DeepSeek-V3 config.json: 61 layers, 128 heads (num_key_value_heads 128), kv_lora_rank
    # 512, qk_rope_head_dim 64, qk_nope_head_dim 128 (head_dim here), hidden 7168, vocab 129280,
    # intermediate 18432, max_position_embeddings 163840; model card: 671B total parameters (37B active)
    "deepseek-v3": ModelSpec("deepseek-v3", 61, 128, 128, 128, 7168, 129280, 671_000_000_000, 18432, 163840,
                             False, kv_lora_rank=512, qk_rope_head_dim=64),
}
_SPEC_ALIASES = {  # Hugging Face ids (lower case) -> catalogue names
    "meta-llama/llama-3.2-1b": "llama-3.2-1b", "meta-llama/llama-3.2-1b-instruct": "llama-3.2-1b",
    "meta-llama/llama-3.2-3b": "llama-3.2-3b", "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b", "mistralai/mistral-7b-v0.1": "mistral-7b",
    "qwen/qwen2.5-0.5b": "qwen2.5-0.5b", "qwen/qwen2.5-7b": "qwen2.5-7b",
    "huggingfacetb/smollm2-135m": "smollm2-135m", "huggingfacetb/smollm2-135m-instruct": "smollm2-135m",
    "openai/gpt-oss-20b": "gpt-oss-20b", "google/gemma-3-27b-it": "gemma-3-27b",
    "google/gemma-3-27b-pt": "gemma-3-27b", "deepseek-ai/deepseek-v3": "deepseek-v3",
}


def list_specs() -> list[str]:
    """Catalogue names, smallest model first."""
    return list(_CATALOGUE)


def get_spec(name: str) -> ModelSpec:
    key = _SPEC_ALIASES.get(name.lower(), name.lower())
    if key not in _CATALOGUE:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(list_specs())}")
    return _CATALOGUE[key]


def as_spec(model: str | ModelSpec) -> ModelSpec:
    """A ModelSpec as is, or a catalogue name looked up."""
    return model if isinstance(model, ModelSpec) else get_spec(model)


def kv_bytes_per_token(model: str | ModelSpec, dtype: Any = "bfloat16", tensor_parallel_size: int = 1) -> int:
    return as_spec(model).kv_bytes_per_token(dtype, tensor_parallel_size)


def num_kv_blocks(spec: ModelSpec, memory_bytes: int, block_size: int, dtype: Any = "bfloat16") -> int:
    """Whole KV blocks that fit in ``memory_bytes``: floor(memory / (block_size x bytes/token)), as vLLM.
    A block here spans every layer; with sliding-window layers vLLM pages each layer group apart."""
    check_positive("memory_bytes", memory_bytes)
    check_int("block_size", block_size, minimum=1)
    return int(memory_bytes // (block_size * spec.kv_bytes_per_token(dtype)))


def window_blocks_held(num_tokens: int, block_size: int, sliding_window: int) -> int:
    """Blocks a sliding-window layer still holds for a request of ``num_tokens`` computed tokens, as
    vLLM V1 keeps them (``SlidingWindowManager`` in ``vllm/v1/core/single_type_kv_cache_manager.py``).

    The next token attends to itself and the last ``sliding_window - 1`` computed tokens, so
    ``get_num_skipped_tokens`` skips ``num_tokens - sliding_window + 1`` of them, and
    ``remove_skipped_blocks`` frees the blocks lying wholly among those (a block partly inside the
    window stays whole). Window 128, blocks of 16, 1,000 tokens: 873 skipped, blocks 54-62 held."""
    check_int("num_tokens", num_tokens, minimum=0)
    check_int("block_size", block_size, minimum=1)
    check_int("sliding_window", sliding_window, minimum=1)
    num_skipped_tokens = max(0, num_tokens - sliding_window + 1)
    return cdiv(num_tokens, block_size) - num_skipped_tokens // block_size


def page_size_bytes(spec: ModelSpec, block_size: int, dtype: Any = "bfloat16",
                    kind: str = "full_attention") -> int:
    """Bytes of one block of ONE layer, as vLLM sizes a page (``page_size_bytes`` of ``FullAttentionSpec``,
    ``SlidingWindowSpec`` and ``MLAAttentionSpec`` in ``vllm/v1/kv_cache_interface.py``):
    ``num_kv_heads x block_size x (head_size + head_size_v) x bytes``. ``kind`` is the layer's
    ``layer_types`` name; a sliding layer's page is the same size as a full one's (it holds fewer pages).

    MLA has no factor 2: ``MLAAttentionSpec`` has one "head" of ``kv_lora_rank + qk_rope_head_dim`` and
    ``head_size_v = 0``. fp8 halves bf16's page through the dtype (``"fp8"`` is ``torch.uint8``, 1 byte,
    viewed as the platform's ``fp8_dtype()`` when read);
    ``cache_dtype_str`` changes the size only for DeepSeek-V3.2's packed ``fp8_ds_mla`` / ``nvfp4_ds_mla``
    layouts (656 / 352 bytes a token, ``MLAAttention.get_kv_cache_spec`` in
    ``vllm/model_executor/layers/attention/mla_attention.py``), which paged_lab does not model."""
    check_int("block_size", block_size, minimum=1)
    if kind not in LAYER_TYPES:
        raise ValueError(f"kind must be one of {list(LAYER_TYPES)}, got {kind!r}")
    count = spec.num_sliding_layers if kind == "sliding_attention" else spec.num_full_layers
    if not count:
        raise ValueError(f"kind={kind!r}: {spec.name} has no {kind} layers")
    return block_size * spec.kv_bytes_per_layer_token(dtype)


def positions_processed(prompt_len: int, new_tokens: int, kv_cache: bool = True) -> int:
    """Token positions pushed through the model's layers to generate ``new_tokens`` after a prompt: with a
    KV cache step 0 processes the prompt and every later step one token, ``prompt_len + new_tokens - 1``
    in all; without one, step ``i`` processes all ``prompt_len + i`` so far, a total that grows with the
    *square* of the output length. (Attention reads all earlier K and V at every step either way.)"""
    for name, value in (("prompt_len", prompt_len), ("new_tokens", new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if kv_cache:
        return prompt_len + new_tokens - 1
    return new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2


@dataclass(frozen=True)
class CapacityPlan:
    gpu_memory_bytes: int
    weight_bytes: int
    kv_budget_bytes: int  # what is left for the KV cache (0 when the weights do not fit)
    kv_bytes_per_token: int
    max_tokens: int  # tokens of context that fit in the KV budget (in requests of seq_len tokens)
    seq_len: int
    max_seqs: int  # concurrent sequences of seq_len tokens

    @property
    def weights_fit(self) -> bool:
        return self.weight_bytes <= self.gpu_memory_bytes


def plan_capacity(
    spec: ModelSpec,
    gpu_memory_bytes: float,
    seq_len: int,
    dtype: Any = "bfloat16",
    weight_dtype: Any = None,
    gpu_memory_utilization: float = 1.0,
) -> CapacityPlan:
    """How many tokens, and how many sequences of ``seq_len``, fit after the weights are loaded.

    ``gpu_memory_utilization`` is the fraction of memory the server may use (vLLM V1 defaults to 0.92:
    ``CacheConfig.gpu_memory_utilization`` in ``vllm/config/cache.py``, vllm 0.32.0).
    Activations are ignored: this is the KV-cache upper bound.
    """
    check_positive("gpu_memory_bytes", gpu_memory_bytes)
    check_positive("seq_len", seq_len)
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    usable = int(gpu_memory_bytes * gpu_memory_utilization)
    weights = spec.weight_bytes(weight_dtype or dtype)
    budget = max(0, usable - weights)
    max_tokens, max_seqs = _fit(spec, budget, seq_len, dtype)
    return CapacityPlan(
        gpu_memory_bytes=int(gpu_memory_bytes),
        weight_bytes=weights,
        kv_budget_bytes=budget,
        kv_bytes_per_token=spec.kv_bytes_per_token(dtype),
        max_tokens=max_tokens,
        seq_len=seq_len,
        max_seqs=max_seqs,
    )


def _fit(spec: ModelSpec, budget: int, seq_len: int, dtype: Any) -> tuple[int, int]:
    """(tokens, requests of ``seq_len`` tokens) that fit in ``budget`` bytes, a request costing what its
    context keeps (seq_len x bytes/token without sliding layers): tokens = budget x seq_len // that."""
    per_request = spec.kv_bytes_for_context(int(seq_len), dtype)
    return budget * int(seq_len) // per_request, budget // per_request


def layer_group_split(layers_per_kind: dict[str, int]) -> tuple[int, dict[str, int]]:
    """(layers per group, groups of each kind) as vLLM's ``_get_kv_cache_groups_uniform_page_size``
    (``vllm/v1/core/kv_cache_utils.py``): one size, the smallest kind's layer count (the largest's when
    none has 1.5x the smallest); n layers make cdiv(n, size) groups, padded (gemma-3-27b: 10 and 1 + 6)."""
    counts = {kind: n for kind, n in layers_per_kind.items() if n}
    if not counts:
        raise ValueError(f"layers_per_kind: needs at least one layer, got {layers_per_kind!r}")
    size = min(counts.values())
    if max(counts.values()) < 1.5 * size:
        size = max(counts.values())
    return size, {kind: cdiv(n, size) for kind, n in counts.items()}


def kv_models_table(names: Sequence[str] | None = None, dtype: Any = "bfloat16", memory_gib: float = 80,
                    context: int = 4096, block_size: int = 16) -> list[dict]:
    """One row per model (default: the whole catalogue): what a request of ``context`` tokens costs and
    how many fit in ``memory_gib`` GiB of KV-cache memory (the KV pool alone: weights not counted).
    Keys: ``model``, ``attention_kind``, ``num_layers``, ``num_sliding_layers``, ``sliding_window``,
    ``kv_bytes_per_token`` (every layer), ``kv_bytes_per_request`` (``kv_bytes_for_context``),
    ``bytes_per_token`` (that / context), ``kv_cache_groups``, ``layers_per_group``, ``padding_layers``
    (``layer_group_split``), ``pool_bytes_per_request`` (its blocks in every group, as vLLM lays out the
    pool, padding included), ``max_tokens``, ``max_requests`` (in that layout), and the arguments."""
    check_positive("memory_gib", memory_gib)
    check_int("context", context, minimum=1)
    budget, rows = int(memory_gib * GiB), []
    for spec in (as_spec(n) for n in (names if names is not None else list_specs())):
        per_request = spec.kv_bytes_for_context(context, dtype)
        size, groups = layer_group_split({"full_attention": spec.num_full_layers,
                                          "sliding_attention": spec.num_sliding_layers})
        held = spec.kv_blocks_for_context(context, block_size)  # blocks of one layer of each kind
        pool = sum(n * held[k] for k, n in groups.items()) * size * page_size_bytes(spec, block_size, dtype)
        rows.append({
            "model": spec.name, "attention_kind": spec.attention_kind, "num_layers": spec.num_layers,
            "num_sliding_layers": spec.num_sliding_layers, "sliding_window": spec.sliding_window,
            "kv_bytes_per_token": spec.kv_bytes_per_token(dtype), "kv_bytes_per_request": per_request,
            "bytes_per_token": per_request / context, "kv_cache_groups": sum(groups.values()),
            "layers_per_group": size, "padding_layers": sum(groups.values()) * size - spec.num_layers,
            "pool_bytes_per_request": pool, "max_tokens": budget * context // pool,
            "max_requests": budget // pool, "context": context, "memory_gib": memory_gib,
            "dtype": canonical_dtype(dtype), "block_size": block_size,
        })  # fmt: skip
    return rows


def human_bytes(n: float) -> str:  # 1536 -> '1.5 KiB' (binary units, as memory is counted)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    k = 0 if n < 1 else min(len(units) - 1, int(math.log(n, 1024)))
    value = n / 1024**k
    return f"{value:.0f} {units[k]}" if value == int(value) else f"{value:.1f} {units[k]}"
