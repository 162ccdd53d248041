"""Load the Triton kernels lazily, under Triton's interpreter when there is no CUDA GPU, and say which
caches they can take before loading them (:func:`triton_unsupported`, the dispatch's question).

``@triton.jit`` decides at decoration time whether a function is compiled or interpreted, by
reading ``TRITON_INTERPRET``. That includes triton's own ``tl.cdiv``, ``tl.sum``, ``tl.max``...,
decorated when ``triton`` is first imported: so on a CPU-only machine the variable must be set
before *triton* is first imported, not just before our kernels are. ``paged_lab.kernels`` sets a
default on import when triton is not loaded yet; this loader then *checks* the result, so a session
that imported triton earlier without the interpreter gets a clear error instead of a crash deep
inside a launch ("Cannot call @triton.jit'd outside of the scope of a kernel").
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from paged_lab.kernels.quant import is_quantized

_ENV = "TRITON_INTERPRET"
TRITON_BLOCK_SIZES = (8, 16, 32, 64, 128, 256)  # what the Triton kernels are written and tested for
TRITON_HEAD_DIMS = (64, 128)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_interpreter_env() -> None:
    """No CUDA device: make Triton interpret kernels (respects a value the user already set)."""
    if "triton" not in sys.modules and not cuda_available():
        os.environ.setdefault(_ENV, "1")


def triton_available() -> bool:
    """Is the ``triton`` package importable (without importing it)?"""
    import importlib.util

    return "triton" in sys.modules or importlib.util.find_spec("triton") is not None


def load_kernels(device_type: str) -> ModuleType:
    """Import :mod:`paged_lab.kernels.triton_paged` ready to launch on ``device_type`` ("cuda" or "cpu")."""
    if not triton_available():
        raise ImportError("backend='triton' needs the 'triton' package: pip install triton (or use "
                          "backend='torch')")
    if device_type != "cuda" and "triton" not in sys.modules:
        # a value the user set explicitly (e.g. 0) is respected, and reported below
        os.environ.setdefault(_ENV, "1")
    from paged_lab.kernels import triton_paged

    if device_type != "cuda" and not (triton_paged.is_interpreted()
                                      and triton_paged.triton_lang_interpreted()):
        _raise_not_interpreted()
    if device_type == "cuda" and triton_paged.is_interpreted():
        raise RuntimeError(
            f"backend='triton' on CUDA tensors, but the Triton kernels were loaded under the interpreter "
            f"({_ENV}={os.environ.get(_ENV)!r}); unset {_ENV} before starting Python to compile them"
        )
    return triton_paged


def _raise_not_interpreted():
    raise RuntimeError(
        f"backend='triton' on CPU tensors needs Triton's interpreter, but triton was imported without it "
        f"({_ENV}={os.environ.get(_ENV)!r} now). Set {_ENV}=1 before triton is first imported (e.g. import "
        f"paged_lab.kernels first, or export {_ENV}=1 in the shell), or use backend='torch'."
    )


def triton_unsupported(k_cache, v_cache, q=None) -> str | None:
    """Why the Triton kernels cannot take this cache, or None when they can."""
    block_size, head_dim = k_cache.shape[1], k_cache.shape[3]
    if is_quantized(k_cache.dtype):
        return (f"a {str(k_cache.dtype).removeprefix('torch.')} cache (the Triton kernels read float caches; "
                f"the torch backend dequantizes fp8)")
    if block_size not in TRITON_BLOCK_SIZES:
        return f"block_size {block_size} (the Triton kernels support {TRITON_BLOCK_SIZES})"
    if head_dim not in TRITON_HEAD_DIMS:
        return f"head_dim {head_dim} (the Triton kernels support {TRITON_HEAD_DIMS})"
    if k_cache.stride(3) != 1 or v_cache.stride() != k_cache.stride():
        return (
            f"cache strides k {k_cache.stride()} / v {v_cache.stride()} (the Triton kernels need head_dim "
            f"contiguous and both caches laid out alike; pass .contiguous() caches)"
        )
    if k_cache.is_cuda and triton_available():  # the GPU itself (older than sm_75: not checked)
        return load_kernels(k_cache.device.type).unsupported_reason(k_cache.dtype, k_cache.device)
    return None
