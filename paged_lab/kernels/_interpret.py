"""Load the Triton kernels lazily, under Triton's interpreter when there is no CUDA GPU.

``@triton.jit`` decides at decoration time whether a function is compiled or interpreted, by
reading ``TRITON_INTERPRET``. That includes triton's own ``tl.cdiv``, ``tl.sum``, ``tl.max``...,
decorated when ``triton`` is first imported: so on a CPU-only machine the variable must be set
before *triton* is first imported, not just before our kernels are. ``paged_lab.kernels`` sets a
default on import when triton is not loaded yet; this loader then *checks* the result, so a session
that imported triton earlier without the interpreter gets a clear error instead of a crash deep
inside a launch ("Cannot call @triton.jit'd outside of the scope of a kernel").
"""

from __future__ import annotations

import functools
import os
import sys
from types import ModuleType

_ENV = "TRITON_INTERPRET"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_interpreter_env() -> None:
    """No CUDA device: make Triton interpret kernels (respects a value the user already set)."""
    if "triton" not in sys.modules and not cuda_available():
        os.environ.setdefault(_ENV, "1")


def triton_available() -> bool:
    """Is the ``triton`` package importable (without importing it)? Asked on every choice of a backend,
    so the search for it (a few microseconds of file system) runs once per process."""
    return "triton" in sys.modules or _triton_installed()


@functools.cache
def _triton_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def load_kernels(device_type: str) -> ModuleType:
    """Import :mod:`paged_lab.kernels.triton_paged` ready to launch on ``device_type`` ("cuda" or "cpu")."""
    if not triton_available():
        raise ImportError("backend='triton' needs the 'triton' package: pip install triton (or use "
                          "backend='torch')")
    if device_type != "cuda" and "triton" not in sys.modules:
        # a value the user set explicitly (e.g. 0) is respected, and reported below
        os.environ.setdefault(_ENV, "1")
    import triton.language as tl

    from paged_lab.kernels import triton_paged

    ours, triton_own = triton_paged._decode_kernel, tl.cdiv  # both must be interpreted on a CPU
    if device_type != "cuda" and not (is_interpreted(ours) and is_interpreted(triton_own)):
        _raise_not_interpreted()
    if device_type == "cuda" and is_interpreted(ours):
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


def is_interpreted(jitted) -> bool:
    """Was this ``@triton.jit`` function (one of our kernels, or triton's own ``tl.cdiv``...) decorated
    under Triton's interpreter (TRITON_INTERPRET=1) rather than as a compiled function?"""
    import triton

    return not isinstance(jitted, triton.runtime.JITFunction)
