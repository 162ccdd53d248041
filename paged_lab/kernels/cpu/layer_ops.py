"""A decoder layer's element-wise steps in C for the CPU: RMSNorm, RoPE, SiLU(gate) * up.

In a decode step these touch a few thousand numbers each, and torch spends more time dispatching its
ops than computing them: F.rms_norm is about ten ops, RoPE eight, and in bf16 every
op converts to fp32 and back. ``csrc/layer_ops.c`` does each in one vectorized pass, in the same order
of operations as the torch code (``engine.llama``) that stays the readable version and the fallback
(``kernels.cpu.fast_path``):
fp32 results differ from it only in a mean's summation order and the last bit of rsqrt and e^x, bf16 is
rounded wherever the torch code rounds. Built on first use by :mod:`~paged_lab.kernels.cpu.build`.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from paged_lab.kernels.cpu.build import CLibrary

SOURCE = Path(__file__).with_name("csrc") / "layer_ops.c"
DTYPES = (torch.float32, torch.bfloat16)


def _declare(lib: ctypes.CDLL) -> None:
    p, n, i = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    lib.rms_norm.argtypes = [p, p, p, n, n, ctypes.c_float, i, i]
    lib.rope.argtypes = [p, n, n, p, n, n, p, p, n, n, i, i]
    lib.silu_mul.argtypes = [p, n, p, n, p, n, n, i, i]
    for f in (lib.rms_norm, lib.rope, lib.silu_mul):
        f.restype = None


LIBRARY = CLibrary(SOURCE, _declare)  # built on first use, as the attention kernels
_lib = LIBRARY.lib


def usable(x: torch.Tensor) -> bool:
    """Whether these ops take ``x``'s kind of tensor: CPU fp32/bf16, the library loaded, and not inside a
    ``torch.compile`` trace (the compiled decode graph fuses the torch versions itself)."""
    return (x.device.type == "cpu" and x.dtype in DTYPES and not torch.compiler.is_compiling()
            and _lib() is not None)


def _bf16(x: torch.Tensor) -> int:
    return int(x.dtype == torch.bfloat16)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x ``[rows, n]`` (contiguous) -> x / rms(x) * weight, in x's dtype."""
    out = torch.empty_like(x)
    _lib().rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1], eps, _bf16(x),
                    torch.get_num_threads())
    return out


def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> None:
    """RoPE in place on q ``[rows, nq, hd]`` and k ``[rows, nkv, hd]`` (views whose rows may be strided, each
    head's hd contiguous); cos, sin_signed ``[rows, 1, hd]`` contiguous (see ``engine.rope.RopeTables``)."""
    rows, nq, hd = q.shape
    _lib().rope(q.data_ptr(), q.stride(0), nq, k.data_ptr(), k.stride(0), k.shape[1], cos.data_ptr(),
                sin_signed.data_ptr(), rows, hd, _bf16(q), torch.get_num_threads())


def rope_usable(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> bool:
    """The layouts :func:`rope_` takes: heads of contiguous hd (half of it a multiple of 16) laid out one
    after the other in each row, and contiguous tables of the same dtype."""
    hd = q.shape[-1]
    return (hd % 32 == 0 and all(t.stride(2) == 1 and t.stride(1) == hd for t in (q, k))
            and cos.is_contiguous() and cos.dtype == q.dtype == k.dtype)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up ``[rows, n]`` -> silu(gate) * up ``[rows, n]``. Each may be a column slice of one fused
    gate/up output (its rows strided) or a tensor of its own: each row's n values contiguous."""
    rows, n = gate.shape
    if up.shape != gate.shape or up.dtype != gate.dtype or gate.stride(1) != 1 or up.stride(1) != 1:
        raise ValueError(f"gate {tuple(gate.shape)} {gate.dtype} and up {tuple(up.shape)} {up.dtype}: "
                         "silu_mul needs the same shape and dtype, each row contiguous")
    out = torch.empty(rows, n, dtype=gate.dtype)
    _lib().silu_mul(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0), out.data_ptr(), rows, n,
                    _bf16(gate), torch.get_num_threads())
    return out
