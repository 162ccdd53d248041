"""Paged attention in C for the CPU: the dispatch's ``"cpu"`` backend.

The torch path (:mod:`~paged_lab.kernels.torch_paged`) gathers every sequence's blocks into a padded
copy, zeroes the padding and calls SDPA with a mask. That is about ten torch ops per layer and a
copy of all K and V (what that cost, measured: ``docs/benchmarks.md``, "Paged attention in C").
``csrc/paged_attention.c`` does the same math in one call per layer. For a decode it stores the new
tokens' K/V, then reads each sequence's K and V rows straight from the cache through its block table,
once, in memory order. A prefill's query tokens each attend causally the same way. It uses AVX-512 over
``head_dim`` and torch's OpenMP threads over sequences (decode) or query tokens (prefill). Its comment
gives the algorithm, and :mod:`~paged_lab.kernels.reference` stays the readable truth that tests hold it
to. ``benchmarks/cpu_attention_bench.py`` measures it against the torch path.

The library is built on first use (``kernels.cpu.build``: this user's private cache, verified before
it is loaded). :func:`usable` says whether a call can take it. It cannot with no AVX-512, no C compiler,
``PAGED_LAB_CPU_KERNELS=0``, a tensor that is not CPU fp32 or bf16, or a ``head_dim`` that is not a multiple
of 16 up to 256. These kernels are the dispatch's ``"cpu"`` backend: ``"auto"`` picks it where it can run,
and the torch path otherwise. :func:`why_unavailable` says why the library is not loaded. Results match
the torch path to about 1e-6: the same fp32 math, summed in another order. A bf16 cache is read as it is
(each element widened to fp32 exactly) and all the math is fp32; q goes in as fp32 and the output is
rounded to bf16 once.

The backend interface (:mod:`~paged_lab.kernels.reference`'s three functions, with its signatures) is at the
end: :func:`paged_attention_decode`, :func:`store_and_decode` and :func:`paged_attention_prefill` call the
C kernels :func:`decode` and :func:`prefill`; :func:`store_kv` alone is the torch path's (the C code stores
K/V only inside a decode). They read float caches over the whole context: the dispatch gives them no fp8
cache (:func:`unsupported`) and no window, so the scales and ``sliding_window`` are unused here.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from paged_lab.kernels import torch_paged
from paged_lab.kernels.cpu.build import CLibrary

SOURCE = Path(__file__).with_name("csrc") / "paged_attention.c"
KV_DTYPES = (torch.float32, torch.bfloat16)  # what the C kernels read (bf16 widened to fp32 exactly)


def _declare(lib: ctypes.CDLL) -> None:
    p, n, i = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    lib.paged_decode.restype = lib.paged_prefill.restype = ctypes.c_int
    lib.paged_decode.argtypes = [p, n, p, n, p, n, p, p, p, p, n, p, n, n, n, n, n, ctypes.c_float, p, i, i]
    lib.paged_prefill.argtypes = [p, p, p, p, p, n, p, n, n, n, n, n, ctypes.c_float, p, i, i]


LIBRARY = CLibrary(SOURCE, _declare)
_lib = LIBRARY.lib


def available() -> bool:
    """True when the compiled library is loaded (it is built on the first call)."""
    return _lib() is not None


def why_unavailable() -> str | None:
    """None when the library is loaded, else why the torch path runs instead."""
    _lib()
    return LIBRARY.why


def unsupported(k_cache: torch.Tensor, v_cache: torch.Tensor, q: torch.Tensor | None = None) -> str | None:
    """Why :func:`decode` and :func:`prefill` cannot take these tensors, or None when they can
    (the dispatch's ``"cpu"`` backend asks this; ``q`` None checks the caches only)."""
    tensors = (k_cache, v_cache) if q is None else (q, k_cache, v_cache)
    if any(t.device.type != "cpu" for t in tensors):
        return f"tensors on {k_cache.device} (the C kernels run on the CPU)"
    if any(t.dtype not in KV_DTYPES or t.dtype != k_cache.dtype for t in tensors):
        return (f"dtype {k_cache.dtype if q is None else q.dtype} "
                "(the C kernels take float32 or bfloat16, all alike)")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return "caches that are not contiguous"
    head_dim, kv_heads = k_cache.shape[-1], k_cache.shape[2]
    if head_dim % 16 or head_dim > 256:
        return f"head_dim {head_dim} (the C kernels take multiples of 16 up to 256)"
    if q is not None and (q.shape[-1] != head_dim or q.shape[1] % kv_heads or q.shape[1] // kv_heads > 64):
        return f"q of shape {tuple(q.shape)} over {kv_heads} KV heads (GQA groups up to 64)"
    why = why_unavailable()
    return None if why is None else f"this machine: the C kernels are not loaded ({why})"


def usable(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether :func:`decode` and :func:`prefill` take these tensors (see :func:`unsupported`)."""
    return unsupported(k_cache, v_cache, q) is None


def _contiguous_q_and_out(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q as contiguous fp32 ``[rows, H, d]``, and a contiguous fp32 ``out`` of that shape. The C code reads q
    and writes out as packed fp32 rows (row r at offset ``r * H * d``), so neither may be a strided view: q
    may be one (a transpose, a slice of a fused projection), and ``torch.empty_like(q)`` would copy its
    strides into ``out``, so the kernel's packed rows would land in the wrong places."""
    q = q.to(torch.float32).contiguous()
    return q, torch.empty(q.shape, dtype=torch.float32, device=q.device)


def _packed_heads(t: torch.Tensor) -> torch.Tensor:
    """t ``[rows, heads, d]`` with each row's heads side by side (``heads * d`` contiguous numbers), its rows
    any stride apart: a column slice of the fused q/k/v output passes as it is, anything else is copied."""
    return t if t.stride(2) == 1 and (t.shape[1] == 1 or t.stride(1) == t.shape[2]) else t.contiguous()


def decode(q, k, v, k_cache, v_cache, slots, tables, lens, scale: float) -> torch.Tensor:
    """The C decode kernel, which the ``"cpu"`` backend runs for both its decode and its store_and_decode.

    Store k/v (``[S, kv_heads, d]``) at ``slots`` (int64 ``[S]``, negative: not stored; None: store
    nothing), then attend q ``[S, H, d]`` over ``tables`` (int64 ``[S, max_blocks]``) up to ``lens``
    (int64 ``[S]``, the new token included) -> ``[S, H, d]``. q, k and v may be the views the q/k/v
    projection's one output is split into (their rows strided): the kernel reads them in place. The
    arguments must already have passed the checks (``kernels.checks``) and :func:`usable`: the C code
    trusts every index."""
    S, H, d = q.shape
    dtype = q.dtype
    q = _packed_heads(q.to(torch.float32))
    out = torch.empty(S, H, d)  # fp32, contiguous: the kernel writes packed rows
    if S == 0:
        return out.to(dtype)
    tables, lens = tables.to(torch.long).contiguous(), lens.to(torch.long).contiguous()
    if slots is not None:
        # stored as the cache holds them
        k, v = _packed_heads(k.to(k_cache.dtype)), _packed_heads(v.to(k_cache.dtype))
        slots = slots.to(torch.long).contiguous()
    rc = _lib().paged_decode(
        q.data_ptr(), q.stride(0), 0 if slots is None else k.data_ptr(), 0 if slots is None else k.stride(0),
        0 if slots is None else v.data_ptr(), 0 if slots is None else v.stride(0),
        k_cache.data_ptr(), v_cache.data_ptr(), 0 if slots is None else slots.data_ptr(), tables.data_ptr(),
        tables.shape[1], lens.data_ptr(), S, H, k_cache.shape[2], d, k_cache.shape[1], scale, out.data_ptr(),
        torch.get_num_threads(), int(k_cache.dtype == torch.bfloat16))
    if rc != 0:
        raise MemoryError(f"paged_decode could not allocate its score buffers (S={S}, max context "
                          f"{int(lens.max())})")
    return out.to(dtype)


def prefill(q, k_cache, v_cache, tables, lens, query_start_loc, scale: float) -> torch.Tensor:
    """Causal attention of the query tokens q ``[num_tokens, H, d]`` (sequence s's are rows
    ``query_start_loc[s]:query_start_loc[s + 1]``, the last positions of its context of ``lens[s]``) over
    their paged contexts -> ``[num_tokens, H, d]``; their K/V must be stored already. Same trust rules
    as :func:`decode`."""
    dtype = q.dtype
    q, out = _contiguous_q_and_out(q)
    if q.shape[0] == 0:
        return out.to(dtype)
    tables, lens = tables.to(torch.long).contiguous(), lens.to(torch.long).contiguous()
    qsl = query_start_loc.to(torch.long).contiguous()
    rc = _lib().paged_prefill(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), qsl.data_ptr(),
                              tables.data_ptr(),
                              tables.shape[1], lens.data_ptr(), lens.shape[0], q.shape[1], k_cache.shape[2],
                              q.shape[2], k_cache.shape[1], scale, out.data_ptr(), torch.get_num_threads(),
                              int(k_cache.dtype == torch.bfloat16))
    if rc != 0:
        raise MemoryError(f"paged_prefill could not allocate its buffers ({q.shape[0]} query tokens, max "
                          f"context {int(lens.max())})")
    return out.to(dtype)


# ------------------------------------------------------------------------------ the backend interface
def _tables(plan, block_tables, context_lens):
    """The C kernels read int64 tables and lengths: the step's plan holds them already (no per-layer copy)."""
    return (block_tables, context_lens) if plan is None else (plan.table, plan.lens)


def store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale: float = 1.0, v_scale: float = 1.0, *,
             plan=None) -> None:
    """The torch path's store (:func:`paged_lab.kernels.torch_paged.store_kv`)."""
    torch_paged.store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale, plan=plan)


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale: float,
                           k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                           plan=None, num_splits: int | None = None) -> torch.Tensor:
    tables, lens = _tables(plan, block_tables, context_lens)
    return decode(q, None, None, k_cache, v_cache, None, tables, lens, scale)


def store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale: float,
                     k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                     plan=None) -> torch.Tensor:
    tables, lens = _tables(plan, block_tables, context_lens)
    return decode(q, k, v, k_cache, v_cache, slot_mapping, tables, lens, scale)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale: float,
                            k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                            plan=None, max_query_len: int | None = None) -> torch.Tensor:
    tables, lens = _tables(plan, block_tables, context_lens)
    return prefill(q, k_cache, v_cache, tables, lens, query_start_loc, scale)
