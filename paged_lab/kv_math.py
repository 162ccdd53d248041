"""KV-cache size math: how many bytes one token of context costs, and how many fit.

Per token, every layer stores one K and one V vector per KV head:

    bytes/token = 2 (K and V) x num_layers x num_kv_heads x head_dim x bytes/element

GQA shares each KV head among a group of query heads, so only ``num_kv_heads`` counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from paged_lab._checks import check_int

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


def check_positive(name: str, value: float) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a size or count: a positive, finite number
    (``inf`` bytes of memory is a typo, not a plan)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


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

    def __post_init__(self):
        for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size", "vocab_size"):
            check_positive(field, getattr(self, field))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}"
            )

    # --- attention kind -------------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads that share one KV head (1 for MHA)."""
        return self.num_heads // self.num_kv_heads

    @property
    def attention_kind(self) -> str:
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    def as_mha(self) -> ModelSpec:
        """The same model if every query head had its own KV head."""
        return replace(self, name=f"{self.name} (as MHA)", num_kv_heads=self.num_heads)

    def as_mqa(self) -> ModelSpec:
        return replace(self, name=f"{self.name} (as MQA)", num_kv_heads=1)

    # --- sizes ----------------------------------------------------------------------------------
    def kv_bytes_per_token(self, dtype: Any = "bfloat16") -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes(dtype)

    def kv_bytes_per_token_mha(self, dtype: Any = "bfloat16") -> int:
        return self.as_mha().kv_bytes_per_token(dtype)

    def kv_savings_vs_mha(self) -> float:
        """How many times smaller the cache is than the MHA version of the model (= group size)."""
        return self.num_heads / self.num_kv_heads

    def kv_bytes(self, num_tokens: int, dtype: Any = "bfloat16") -> int:
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        return num_tokens * self.kv_bytes_per_token(dtype)

    def weight_bytes(self, dtype: Any = "bfloat16") -> int:
        return self.num_params * dtype_bytes(dtype)

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: Any, name: str | None = None) -> ModelSpec:
        """Build a spec from any transformers config (or a plain dict of the same keys)."""
        cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        cfg = cfg.get("text_config") or cfg  # multimodal wrappers keep the LM config inside
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        kv_heads = cfg.get("num_key_value_heads") or heads
        head_dim = cfg.get("head_dim") or hidden // heads
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
        )
        return replace(spec, num_params=spec.estimate_num_params(bias=bool(cfg.get("attention_bias"))))

    def estimate_num_params(self, bias: bool = False) -> int:
        """Parameter count of a Llama-style decoder with these shapes."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + (q + 2 * kv if bias else 0)
        mlp = 3 * h * self.intermediate_size
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + self.num_layers * per_layer + h + head


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
    "llama-3.1-70b": ModelSpec(
        "llama-3.1-70b", 80, 64, 8, 128, 8192, 128256, 70_553_706_496, 28672, 131072, False
    ),
}
_SPEC_ALIASES = {
    "meta-llama/llama-3.2-1b": "llama-3.2-1b",
    "meta-llama/llama-3.2-1b-instruct": "llama-3.2-1b",
    "meta-llama/llama-3.2-3b": "llama-3.2-3b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b",
    "mistralai/mistral-7b-v0.1": "mistral-7b",
    "qwen/qwen2.5-0.5b": "qwen2.5-0.5b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "huggingfacetb/smollm2-135m": "smollm2-135m",
    "huggingfacetb/smollm2-135m-instruct": "smollm2-135m",
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


def kv_bytes_per_token(model: str | ModelSpec, dtype: Any = "bfloat16") -> int:
    return as_spec(model).kv_bytes_per_token(dtype)


def num_kv_blocks(spec: ModelSpec, memory_bytes: int, block_size: int, dtype: Any = "bfloat16") -> int:
    """Whole KV blocks that fit in ``memory_bytes``: floor(memory / (block_size x bytes/token)), as vLLM."""
    check_positive("memory_bytes", memory_bytes)
    check_int("block_size", block_size, minimum=1)
    return int(memory_bytes // (block_size * spec.kv_bytes_per_token(dtype)))


def positions_processed(prompt_len: int, new_tokens: int, kv_cache: bool = True) -> int:
    """Token positions pushed through the model's layers to generate ``new_tokens`` after a prompt.

    Step ``i`` (``i = 0 .. new_tokens - 1``) samples one token. With a KV cache, step 0 processes the
    prompt and every later step only the one token sampled before it: ``prompt_len + new_tokens - 1``
    positions in all, linear in the output length. Without a cache, step ``i`` must process the whole
    sequence so far, ``prompt_len + i`` positions, so the total
    ``new_tokens * prompt_len + new_tokens * (new_tokens - 1) / 2`` grows with the *square* of the
    output length. (Attention itself reads all earlier positions' K and V at every step either way.)
    """
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
    max_tokens: int  # tokens of context that fit in the KV budget
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
    per_token = spec.kv_bytes_per_token(dtype)
    max_tokens = budget // per_token
    return CapacityPlan(
        gpu_memory_bytes=int(gpu_memory_bytes),
        weight_bytes=weights,
        kv_budget_bytes=budget,
        kv_bytes_per_token=per_token,
        max_tokens=max_tokens,
        seq_len=seq_len,
        max_seqs=max_tokens // seq_len,
    )


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as memory is counted)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    k = 0 if n < 1 else min(len(units) - 1, int(math.log(n, 1024)))
    value = n / 1024**k
    return f"{value:.0f} {units[k]}" if value == int(value) else f"{value:.1f} {units[k]}"
