"""The engine's small matmuls in C for the CPU: ``y = x @ W.T + bias`` for the few rows of a decode step.

A decode step multiplies one row per running sequence by every weight of the model, so its matmuls are
bound by how fast the weights stream from memory, not by arithmetic. ``csrc/panel_gemm.c`` reads every
weight once, in memory order, from a copy packed once into panels of 16 output features (:func:`pack`),
and keeps up to 8 rows x 32 outputs in registers (the file's comment gives the loop). For a few rows it
beats oneDNN's prepacked matmul; from a few hundred rows on, the matmul is compute-bound and MKL/oneDNN are
as fast or faster (bf16: oneDNN's AMX from 8 rows), so ``kernels.cpu.linear`` uses this for up to
:data:`MAX_ROWS` rows only (measured: ``benchmarks/linear_bench.py``; docs/benchmarks.md, "The decode
matmuls in C").

Each output is summed in input order, 64 terms at a time and then the blocks (one running sum erred 5x
more against float64), so a row's result does not depend on which rows share its batch; against
``F.linear`` it differs by summation order only (about 1e-6 relative in fp32).
bf16 weights are widened to fp32 exactly and summed in fp32; the caller rounds the result to bf16 once.
Built on first use by :mod:`~paged_lab.kernels.cpu.build` (AVX-512 only), as the C attention is.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import torch

from paged_lab.kernels.cpu.build import CLibrary

SOURCE = Path(__file__).with_name("csrc") / "panel_gemm.c"
PANEL = 16  # output features per panel: one AVX-512 register of fp32
# Up to this many rows the packed loop beat torch's matmuls (docs/benchmarks.md, "The decode matmuls in
# C"); more rows go to them (cpu.linear).
MAX_ROWS = {torch.float32: 256, torch.bfloat16: 4}


def _declare(lib: ctypes.CDLL) -> None:
    p, n = ctypes.c_void_p, ctypes.c_long
    lib.panel_gemm.restype = None
    lib.panel_gemm.argtypes = [p, p, ctypes.c_int, p, p, n, n, n, ctypes.c_int]


LIBRARY = CLibrary(SOURCE, _declare)  # built on first use, as the attention kernels
_lib = LIBRARY.lib


def why_unusable(weight: torch.Tensor) -> str | None:
    """Why :func:`pack` cannot take this ``[N, K]`` weight, or None when it can."""
    if weight.device.type != "cpu" or weight.dtype not in (torch.float32, torch.bfloat16):
        return f"a {weight.dtype} weight on {weight.device} (the C matmul takes CPU float32 or bfloat16)"
    if weight.dim() != 2 or weight.shape[0] % PANEL:
        return f"weight shape {tuple(weight.shape)} (needs [N, K] with N a multiple of {PANEL})"
    _lib()
    return None if LIBRARY.why is None else f"the C matmul is not loaded ({LIBRARY.why})"


# A decode step streams every packed weight from memory once, and with 4 KB pages the CPU's hardware
# prefetcher stops at every page boundary and every page costs a TLB entry (a read of the packed weights in
# 4 KB and in 2 MB pages, measured: docs/benchmarks.md, "Packed panels in 2 MB pages"). So the panels
# ask Linux for 2 MB pages ("transparent huge pages", madvise(MADV_HUGEPAGE) before the first write);
# where the system does not give them (another OS, THP "never") they are ordinary memory.
HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def empty_in_huge_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous tensor that starts on a 2 MB boundary, its memory advised into 2 MB pages
    (every whole 2 MB of it; the tail under 2 MB stays in 4 KB pages, so no page is held half unused). It
    lives in its own anonymous mapping (``mmap``; the tensor keeps the mapping alive), so the extra 2 MB
    taken for the alignment is never touched and never resident (a malloc'd buffer may reuse heap pages
    that already are: that cost notebook 07 about 60 MB)."""
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if _libc is None or nbytes < HUGE_PAGE:
        return torch.empty(shape, dtype=dtype)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # untouched
    buf = torch.frombuffer(mapping, dtype=torch.uint8)
    start = -buf.data_ptr() % HUGE_PAGE
    out = buf[start:start + nbytes].view(dtype).view(shape)
    _libc.madvise(ctypes.c_void_p(out.data_ptr()), ctypes.c_size_t(nbytes // HUGE_PAGE * HUGE_PAGE),
                  MADV_HUGEPAGE)  # advice only: on failure (errno) the pages are 4 KB ones, nothing else
    return out


def pack(weights: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """``[N, K]``, or several weights with one K stacked (q/k/v), -> panels ``[sum(N) / 16, K, 16]``:
    panel p holds outputs 16p..16p+15, input k's 16 weights side by side (a copy, in 2 MB pages where Linux
    gives them: the transformers tensors stay as they are). Each weight goes straight into its own panels,
    with no stacked ``torch.cat`` copy in between: freed, such copies stayed in the heap, resident (building
    SmolLM2's runner peaked at 1,668 MiB with them, 1,536 without)."""
    parts = [weights] if isinstance(weights, torch.Tensor) else list(weights)
    k = parts[0].shape[1]
    panels = empty_in_huge_pages((sum(w.shape[0] for w in parts) // PANEL, k, PANEL), parts[0].dtype)
    first = 0
    for w in parts:  # w: [n, K] -> panels[first : first + n / 16]
        count = w.shape[0] // PANEL
        panels[first:first + count].copy_(w.detach().reshape(count, PANEL, k).transpose(1, 2))
        first += count
    return panels


def matmul(x: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[M, K]`` (fp32, or bf16 with bf16 panels) times the packed weight -> ``[M, N]`` in x's dtype.
    bf16: x is widened to fp32 and the fp32 sums rounded to bf16 once, at the end."""
    m, k = x.shape
    n = panels.shape[0] * PANEL
    if panels.shape[1] != k:
        raise ValueError(f"x has {k} features but the packed weight takes {panels.shape[1]}")
    xf = x.to(torch.float32).contiguous()
    y = torch.empty(m, n, dtype=torch.float32)
    if bias is not None:
        bias = bias.to(torch.float32).contiguous()
    if m:
        _lib().panel_gemm(xf.data_ptr(), panels.data_ptr(), int(panels.dtype == torch.bfloat16),
                          None if bias is None else bias.data_ptr(), y.data_ptr(), m, n, k,
                          torch.get_num_threads())
    return y if x.dtype == torch.float32 else y.to(x.dtype)
