"""An fp8 KV cache: how K and V are stored in 8 bits and read back (vLLM's ``kv_cache_dtype="fp8"``).

A quantized cache holds ``torch.float8_e4m3fn`` numbers (1 sign, 4 exponent, 3 mantissa bits: about two
significant digits, finite up to +-448) and one float scale per layer for K and one for V, a
"per-tensor" scale. Storing divides by the scale, reading multiplies by it, as vLLM 0.32.0's kernels do:
the cache write ``reshape_and_cache_kernel_flash`` stores ``key / k_scale``
(``vllm/v1/attention/ops/triton_reshape_and_cache_flash.py``) and the attention kernel's
``_cast_kv_tile`` reads ``data.to(float32) * k_scale``
(``vllm/v1/attention/ops/triton_unified_attention.py``).

These two functions are the only place that does either: the ``"torch"`` and ``"reference"`` backends
call them on every store and every gather. A cache of the model's own dtype (``"auto"``) passes through
both unchanged, so the same code serves every cache.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn  # vLLM's fp8 KV dtype (``current_platform.fp8_dtype()`` on CUDA and CPU)
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0, its largest finite number: e4m3fn has no infinity
QUANTIZED_DTYPES = (FP8_DTYPE,)


def is_quantized(cache_dtype: torch.dtype) -> bool:
    """Whether a cache of this dtype holds scaled 8-bit numbers (so a store must quantize)."""
    return cache_dtype in QUANTIZED_DTYPES


def quantize_kv(x: torch.Tensor, cache_dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """The new tokens' K or V ``x`` as the cache stores them: ``x / scale`` rounded to fp8 (nearest),
    clamped to +-448 first, for a quantized cache; ``x`` cast to the cache dtype otherwise.

    The clamp makes saturation the rule rather than a property of one cast: torch 2.13's CPU cast
    saturates too, but e4m3fn has no infinity, and one NaN in the cache would reach every later token's
    softmax. vLLM's own torch quantizer clamps the same way before its cast (``scaled_quantize``,
    ``vllm/model_executor/layers/quantization/utils/quant_utils.py``)."""
    if not is_quantized(cache_dtype):
        return x.to(cache_dtype)
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(cache_dtype)


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """A quantized tensor as its raw bytes (``uint8``, same shape), for the ops torch has no fp8 kernel
    of on CPU (``index_copy_``, ``equal``); any other tensor as it is. A view: writes go through."""
    return t.view(torch.uint8) if is_quantized(t.dtype) else t


def dequantize_kv(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Cached K or V ``x`` back as float32 numbers: ``x * scale`` for a quantized cache, ``x`` as float32
    otherwise (a float cache is never scaled)."""
    if not is_quantized(x.dtype):
        return x.float()
    return x.float() * scale
