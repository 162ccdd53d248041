"""Public entry points: validate the arguments once, then run a backend from the one backend table.

Backends (``BACKEND_TABLE``; a backend's name says what runs):
- ``"triton"``: the Triton kernels (compiled on CUDA; Triton's interpreter on CPU — slow, for tests).
- ``"cpu"``: the C kernels of :mod:`paged_lab.kernels.cpu_paged` (CPU fp32, AVX-512), built on first use.
- ``"torch"``: the vectorized torch path (:mod:`paged_lab.kernels.torch_paged`), torch only.
- ``"reference"``: the per-sequence readable loop (:mod:`paged_lab.kernels.reference`).
- ``"auto"``: the first that can take the tensors of Triton on CUDA, ``"cpu"``, ``"torch"``.

One fallback rule (:func:`_run`): under ``"auto"``, a backend that raises (a launch on an untested GPU,
say) is logged and counted in a :class:`KernelStats`, and that call runs on the next candidate; the
next call tries the first again. A backend named explicitly raises its error instead.

Every check runs before any launch and names the argument and the limit. Checks of tensor
*values* (table entries in range, context lengths, query_start_loc) run when the tensors live on
the CPU; on CUDA they would force a device sync per layer, so there only shapes/dtypes are checked.

``plan`` (the ``"torch"`` and ``"cpu"`` backends read it) is the batch's precomputed
:class:`~paged_lab.kernels.torch_paged.GatherPlan`. It is an argument like the others: the checks
verify that it is the plan ``plan_gather`` builds from this call's tensors (one that is not raises
a ValueError naming ``plan``), because the backends index the cache through it unchecked.

``validate=False`` skips every check, the plan's included: for callers (the engine) that checked the
same block tables, context lengths, slot mapping and plan on the first layer of a step and pass the
very same tensors to every other layer. **Trusted input only.** The C kernels and the Triton kernels
(its CPU interpreter too) use every index as given, so an out-of-range block id, context length,
slot or query offset, or a plan from another batch, is undefined behaviour: it may read or write
outside the cache, return garbage, or crash the process (a segfault). Keep ``validate=True`` unless
the same arguments were validated already.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from paged_lab.kernels import cpu_paged, reference, torch_paged
from paged_lab.kernels._interpret import load_kernels, triton_available

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
TRITON_BLOCK_SIZES = (8, 16, 32, 64, 128, 256)
TRITON_HEAD_DIMS = (64, 128)


# ----------------------------------------------------------------------------------------- checks
def _check_ndim(name, t, ndim, shape_doc):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {shape_doc}, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims {shape_doc}, got shape {tuple(t.shape)}")


def _check_dtype(name, t, dtypes):
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} dtype must be one of ({allowed}), got {str(t.dtype).replace('torch.', '')}")


def _check_device(device, **tensors):
    for name, t in tensors.items():
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but the cache is on {device}; put all tensors on one device")


def _check_cache(k_cache, v_cache):
    """-> (num_blocks, block_size, num_kv_heads, head_dim)."""
    doc = "[num_blocks, block_size, num_kv_heads, head_dim]"
    _check_ndim("k_cache", k_cache, 4, doc)
    _check_ndim("v_cache", v_cache, 4, doc)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} must equal k_cache shape {tuple(k_cache.shape)}")
    _check_dtype("k_cache", k_cache, FLOAT_DTYPES)
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"v_cache dtype {v_cache.dtype} must equal k_cache dtype {k_cache.dtype}")
    if min(k_cache.shape[1:]) < 1:
        raise ValueError(f"k_cache {doc} has an empty dimension: shape {tuple(k_cache.shape)}")
    return tuple(k_cache.shape)


def _check_q(q, k_cache, ndoc):
    _, _, num_kv_heads, head_dim = k_cache.shape
    _check_ndim("q", q, 3, f"[{ndoc}, num_heads, head_dim]")
    if q.dtype != k_cache.dtype:
        raise TypeError(f"q dtype {q.dtype} must equal the cache dtype {k_cache.dtype}")
    if q.shape[2] != head_dim:
        raise ValueError(f"q head_dim {q.shape[2]} must equal the cache head_dim {head_dim}")
    if q.shape[1] % num_kv_heads:
        raise ValueError(
            f"q num_heads {q.shape[1]} must be a multiple of the cache num_kv_heads {num_kv_heads} (GQA groups); "
            f"is the cache laid out [num_blocks, block_size, num_kv_heads, head_dim]?"
        )


def _check_tables(block_tables, context_lens, num_seqs, k_cache, min_len):
    num_blocks, block_size = k_cache.shape[:2]
    _check_ndim("block_tables", block_tables, 2, "[num_seqs, max_blocks]")
    _check_dtype("block_tables", block_tables, INDEX_DTYPES)
    _check_ndim("context_lens", context_lens, 1, "[num_seqs]")
    _check_dtype("context_lens", context_lens, INDEX_DTYPES)
    if block_tables.shape[0] != num_seqs or context_lens.shape[0] != num_seqs:
        raise ValueError(
            f"block_tables has {block_tables.shape[0]} rows and context_lens {context_lens.shape[0]} entries; "
            f"both must equal num_seqs = {num_seqs}"
        )
    _check_device(k_cache.device, block_tables=block_tables, context_lens=context_lens)
    if k_cache.device.type != "cpu" or num_seqs == 0:
        return
    lens = context_lens.long()
    capacity = block_tables.shape[1] * block_size
    if int(lens.min()) < min_len:
        raise ValueError(f"context_lens must be >= {min_len}, got min {int(lens.min())}")
    if int(lens.max()) > capacity:
        raise ValueError(
            f"context_lens max {int(lens.max())} exceeds what block_tables can address: "
            f"{block_tables.shape[1]} blocks x block_size {block_size} = {capacity}"
        )
    used = torch.arange(block_tables.shape[1])[None, :] * block_size < lens[:, None]  # entries a kernel reads
    ids = block_tables.long()[used]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
        raise ValueError(
            f"block_tables entries in use must be in [0, num_blocks={num_blocks}), "
            f"got range [{int(ids.min())}, {int(ids.max())}]"
        )


def _check_plan(plan, k_cache, **tensors):
    """A ``plan`` must be the GatherPlan of this very call (see ``torch_paged.plan_mismatch``): the
    backends index the cache through it without checking it again."""
    if plan is None:
        return
    why = torch_paged.plan_mismatch(plan, k_cache.shape[1], **tensors)
    if why is not None:
        raise ValueError(why)


def _check_scale(scale):
    if not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float (usually head_dim ** -0.5), got {scale!r}")


def _triton_unsupported(k_cache, v_cache, q=None) -> str | None:
    """Why the Triton kernels cannot take this cache, or None when they can."""
    block_size, head_dim = k_cache.shape[1], k_cache.shape[3]
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
        return _triton(k_cache).unsupported_reason(k_cache.dtype, k_cache.device)
    return None


# ---------------------------------------------------------------------------------- the backends
def _tables(plan, block_tables, context_lens):
    """The C kernels read int64 tables and lengths: the step's plan holds them already (no per-layer copy)."""
    return (block_tables, context_lens) if plan is None else (plan.table, plan.lens)


def _cpu_decode(q, k_cache, v_cache, block_tables, context_lens, scale, plan=None, **_):
    tables, lens = _tables(plan, block_tables, context_lens)
    return cpu_paged.store_and_decode(q, None, None, k_cache, v_cache, None, tables, lens, scale)


def _cpu_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, plan=None, **_):
    tables, lens = _tables(plan, block_tables, context_lens)
    return cpu_paged.prefill(q, k_cache, v_cache, tables, lens, query_start_loc, scale)


def _cpu_store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale, plan=None):
    tables, lens = _tables(plan, block_tables, context_lens)
    return cpu_paged.store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, tables, lens, scale)


def _triton(k_cache):
    return load_kernels(k_cache.device.type)


@dataclass(frozen=True)
class Backend:
    """One backend: what it runs for each entry point, and what it cannot take.

    Every function has the entry point's arguments (``plan``: the step's GatherPlan or None;
    ``num_splits``/``max_query_len``: hints a backend may ignore). ``unsupported(k_cache, v_cache, q)``
    says why the backend cannot take these tensors, or None. ``uses_plan``: it reads the GatherPlan,
    so a caller running many layers should build one per step (``torch_paged.plan_gather``)."""

    name: str
    store_kv: Callable
    decode: Callable
    prefill: Callable
    store_and_decode: Callable
    unsupported: Callable[..., str | None] = lambda k_cache, v_cache, q=None: None
    uses_plan: bool = False


def _store_then_decode(store, decode):
    """store_and_decode for a backend that has no fused kernel: its store, then its decode."""
    def run(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale, plan=None):
        store(k, v, k_cache, v_cache, slot_mapping, plan=plan)
        return decode(q, k_cache, v_cache, block_tables, context_lens, scale, plan=plan)
    return run


def _reference_backend() -> Backend:
    store = lambda k, v, kc, vc, slots, plan=None: reference.store_kv(k, v, kc, vc, slots)
    decode = lambda q, kc, vc, bt, cl, scale, plan=None, **_: reference.paged_attention_decode(q, kc, vc, bt, cl, scale)
    prefill = lambda q, kc, vc, bt, cl, qsl, scale, plan=None, **_: reference.paged_attention_prefill(
        q, kc, vc, bt, cl, qsl, scale)
    return Backend("reference", store, decode, prefill, _store_then_decode(store, decode))


def _triton_backend() -> Backend:
    store = lambda k, v, kc, vc, slots, plan=None: _triton(kc).store_kv(k, v, kc, vc, slots)
    decode = lambda q, kc, vc, bt, cl, scale, plan=None, num_splits=None: _triton(kc).paged_attention_decode(
        q, kc, vc, bt, cl, scale, num_splits=num_splits)
    prefill = lambda q, kc, vc, bt, cl, qsl, scale, plan=None, max_query_len=None: _triton(
        kc).paged_attention_prefill(q, kc, vc, bt, cl, qsl, scale, max_query_len=max_query_len)
    return Backend("triton", store, decode, prefill, _store_then_decode(store, decode), _triton_unsupported)


def _torch_backend() -> Backend:
    decode = lambda q, kc, vc, bt, cl, scale, plan=None, **_: torch_paged.paged_attention_decode(
        q, kc, vc, bt, cl, scale, plan=plan)
    prefill = lambda q, kc, vc, bt, cl, qsl, scale, plan=None, max_query_len=None: torch_paged.paged_attention_prefill(
        q, kc, vc, bt, cl, qsl, scale, plan=plan, max_query_len=max_query_len)
    return Backend("torch", torch_paged.store_kv, decode, prefill, torch_paged.store_and_attend, uses_plan=True)


# The backend table: the name a caller passes -> what runs. "auto" is not a backend but a choice
# among these (see _candidates).
BACKEND_TABLE: dict[str, Backend] = {
    "triton": _triton_backend(),
    # C kernels (cpu_paged) for attention; they store K/V inside store_and_decode, a plain store_kv is torch's
    "cpu": Backend("cpu", torch_paged.store_kv, _cpu_decode, _cpu_prefill, _cpu_store_and_decode,
                   lambda k_cache, v_cache, q=None: cpu_paged.why_unusable(k_cache, v_cache, q), uses_plan=True),
    "torch": _torch_backend(),
    "reference": _reference_backend(),
}
BACKENDS = ("auto", *BACKEND_TABLE)


# ------------------------------------------------------------------------------ the fallback rule
logger = logging.getLogger("paged_lab.kernels")


@dataclass
class KernelStats:
    """What the dispatch ran: calls per backend, and the failures ``"auto"`` fell back from.
    Pass one as ``stats=`` (the engine keeps its own); without it calls count in ``dispatch.STATS``."""

    calls: Counter = field(default_factory=Counter)  # backend name -> calls it completed
    failures: Counter = field(default_factory=Counter)  # backend name -> calls that raised (then fell back)
    last_error: dict = field(default_factory=dict)  # backend name -> "op: ErrorType: message"

    def as_dict(self) -> dict:
        return {"calls": dict(self.calls), "failures": dict(self.failures), "last_error": dict(self.last_error)}


STATS = KernelStats()


def _candidates(backend: str, k_cache, v_cache, q=None) -> list[str]:
    """The backends to try, in order. A named backend is the only one (it raises when it cannot take
    these tensors); "auto" lists every backend that can: Triton on CUDA, then the C kernels, then torch."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        why = BACKEND_TABLE[backend].unsupported(k_cache, v_cache, q)
        if why is not None:
            raise ValueError(f"backend={backend!r} does not support {why}; use backend='torch'")
        return [backend]
    order = ["triton", "cpu", "torch"] if k_cache.is_cuda and triton_available() else ["cpu", "torch"]
    return [n for n in order if BACKEND_TABLE[n].unsupported(k_cache, v_cache, q) is None]


def resolve_backend(backend: str, k_cache, v_cache=None, q=None) -> str:
    """The concrete backend that runs for ``backend`` ("auto" included) on these tensors."""
    return _candidates(backend, k_cache, k_cache if v_cache is None else v_cache, q)[0]


def uses_plan(backend: str, k_cache, v_cache=None) -> bool:
    """Whether a backend that may run here reads a GatherPlan (worth building once per step)."""
    v_cache = k_cache if v_cache is None else v_cache
    return any(BACKEND_TABLE[n].uses_plan for n in _candidates(backend, k_cache, v_cache))


def _run(op: str, backend: str, stats: KernelStats | None, k_cache, v_cache, q, *args, **kwargs):
    """The one fallback rule: run ``op`` on the first candidate backend. Under "auto", a backend that
    raises is logged and counted, and the call runs on the next candidate; the next call tries the
    first one again (one failure does not switch a backend off). A named backend's error is raised."""
    stats = STATS if stats is None else stats
    names = _candidates(backend, k_cache, v_cache, q)
    for i, name in enumerate(names):
        try:
            out = getattr(BACKEND_TABLE[name], op)(*args, **kwargs)
        except Exception as e:  # a compile/launch error on an untested GPU, a library that cannot run
            if i == len(names) - 1:
                raise
            _record_failure(stats, name, op, e, names[i + 1])
            continue
        stats.calls[name] += 1
        return out


def _record_failure(stats: KernelStats, name: str, op: str, error: Exception, instead: str) -> None:
    message = f"{op}: {type(error).__name__}: {error}"
    if stats.last_error.get(name) != message:  # log each distinct error once, count every one
        logger.warning("backend='auto': %s failed (%s); this call runs on %r. Pass backend=%r to raise "
                       "the error instead.", name, message[:300], instead, name)
    stats.failures[name] += 1
    stats.last_error[name] = message


# ------------------------------------------------------------------------------------------- API
def store_kv(k, v, k_cache, v_cache, slot_mapping, backend: str = "auto", validate: bool = True,
             plan=None, stats: KernelStats | None = None) -> None:
    """Write each token's K/V into its slot of the paged cache, in place.

    k, v: ``[num_tokens, num_kv_heads, head_dim]``; k_cache, v_cache:
    ``[num_blocks, block_size, num_kv_heads, head_dim]``; slot_mapping: int ``[num_tokens]``,
    ``slot = block * block_size + offset``; a negative slot skips that token (padding).
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring).
    """
    if validate:
        _check_store_kv(k, v, k_cache, v_cache, slot_mapping)
        _check_plan(plan, k_cache, slot_mapping=slot_mapping)
    if k.shape[0] == 0:
        _candidates(backend, k_cache, v_cache)  # a bad backend name still raises
        return
    _run("store_kv", backend, stats, k_cache, v_cache, None, k, v, k_cache, v_cache, slot_mapping, plan=plan)


def _check_store_kv(k, v, k_cache, v_cache, slot_mapping):
    num_blocks, block_size, num_kv_heads, head_dim = _check_cache(k_cache, v_cache)
    doc = f"[num_tokens, num_kv_heads={num_kv_heads}, head_dim={head_dim}]"
    for name, t in (("k", k), ("v", v)):
        _check_ndim(name, t, 3, doc)
        if tuple(t.shape[1:]) != (num_kv_heads, head_dim):
            raise ValueError(f"{name} must be {doc} to match the cache, got shape {tuple(t.shape)}")
        _check_dtype(name, t, FLOAT_DTYPES)
    if v.shape != k.shape:
        raise ValueError(f"v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    _check_ndim("slot_mapping", slot_mapping, 1, "[num_tokens]")
    _check_dtype("slot_mapping", slot_mapping, INDEX_DTYPES)
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} entries but k has {k.shape[0]} tokens")
    _check_device(k_cache.device, k=k, v=v, v_cache=v_cache, slot_mapping=slot_mapping)
    num_slots = num_blocks * block_size
    if k_cache.device.type == "cpu" and slot_mapping.numel() and int(slot_mapping.max()) >= num_slots:
        raise ValueError(
            f"slot_mapping max {int(slot_mapping.max())} must be < num_blocks x block_size = {num_slots}"
        )


def paged_attention_decode(
    q, k_cache, v_cache, block_tables, context_lens, scale, backend: str = "auto", num_splits: int | None = None,
    validate: bool = True, plan=None, stats: KernelStats | None = None,
):
    """One query token per sequence over its paged context -> ``[num_seqs, num_heads, head_dim]``.

    q: ``[num_seqs, num_heads, head_dim]``; block_tables: int ``[num_seqs, max_blocks]``;
    context_lens: int ``[num_seqs]`` (includes the query token, already stored with :func:`store_kv`).
    ``num_splits`` (Triton only): split each sequence's context into that many partitions merged by
    log-sum-exp (flash-decoding); ``None`` lets the kernel choose, 1 forces the unsplit path.
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring).
    """
    if validate:
        _check_decode(q, k_cache, v_cache, block_tables, context_lens, scale)
        _check_plan(plan, k_cache, block_tables=block_tables, context_lens=context_lens)
    if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits must be a positive int or None, got {num_splits!r}")
    if q.shape[0] == 0:
        _candidates(backend, k_cache, v_cache)
        return torch.empty_like(q)
    return _run("decode", backend, stats, k_cache, v_cache, q, q, k_cache, v_cache, block_tables, context_lens,
                float(scale), plan=plan, num_splits=num_splits)


def _check_decode(q, k_cache, v_cache, block_tables, context_lens, scale):
    _check_cache(k_cache, v_cache)
    _check_q(q, k_cache, "num_seqs")
    _check_device(k_cache.device, q=q, v_cache=v_cache)
    _check_tables(block_tables, context_lens, q.shape[0], k_cache, min_len=1)
    _check_scale(scale)


def store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale,
                     backend: str = "auto", validate: bool = True, plan=None, stats: KernelStats | None = None):
    """:func:`store_kv` then :func:`paged_attention_decode`, in one call where the backend has one
    kernel for both (``"cpu"``; ``"torch"`` with a plan and a layer's K/V as the halves of one tensor,
    as ``engine.KVCache`` keeps them). A decode step calls this once per layer. Arguments as those two
    functions'; q ``[num_seqs, num_heads, head_dim]``, k, v ``[num_seqs, num_kv_heads, head_dim]``.
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring)."""
    if validate:
        _check_store_kv(k, v, k_cache, v_cache, slot_mapping)
        _check_decode(q, k_cache, v_cache, block_tables, context_lens, scale)
        _check_plan(plan, k_cache, block_tables=block_tables, context_lens=context_lens, slot_mapping=slot_mapping)
    if q.shape[0] == 0:
        _candidates(backend, k_cache, v_cache)
        return torch.empty_like(q)
    return _run("store_and_decode", backend, stats, k_cache, v_cache, q, q, k, v, k_cache, v_cache, slot_mapping,
                block_tables, context_lens, float(scale), plan=plan)


def paged_attention_prefill(
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, backend: str = "auto",
    validate: bool = True, plan=None, max_query_len: int | None = None, stats: KernelStats | None = None,
):
    """Several causal query tokens per sequence over its paged context -> ``[num_tokens, num_heads, head_dim]``.

    q: ``[num_tokens, num_heads, head_dim]``, sequences concatenated; query_start_loc: int
    ``[num_seqs + 1]`` (0, then the cumsum of query lengths). Sequence ``i``'s query tokens are the
    last ``query_len`` positions of its ``context_lens[i]`` tokens (chunked prefill and cached
    prefixes: the earlier context is read from the cache). ``max_query_len``: the longest query, when
    the caller knows it (the engine does); Triton sizes its grid with it, else reads it from the device.
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring).
    """
    if validate:
        _check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, max_query_len)
        _check_plan(plan, k_cache, block_tables=block_tables, context_lens=context_lens,
                    query_start_loc=query_start_loc)
    if q.shape[0] == 0:
        _candidates(backend, k_cache, v_cache)
        return torch.empty_like(q)
    return _run("prefill", backend, stats, k_cache, v_cache, q, q, k_cache, v_cache, block_tables, context_lens,
                query_start_loc, float(scale), plan=plan, max_query_len=max_query_len)


def _check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, max_query_len=None):
    _check_cache(k_cache, v_cache)
    _check_q(q, k_cache, "num_tokens")
    _check_device(k_cache.device, q=q, v_cache=v_cache)
    _check_ndim("query_start_loc", query_start_loc, 1, "[num_seqs + 1]")
    _check_dtype("query_start_loc", query_start_loc, INDEX_DTYPES)
    num_seqs = query_start_loc.shape[0] - 1
    if num_seqs < 0:
        raise ValueError("query_start_loc must have num_seqs + 1 >= 1 entries, got 0")
    _check_device(k_cache.device, query_start_loc=query_start_loc)
    _check_tables(block_tables, context_lens, num_seqs, k_cache, min_len=0)
    if k_cache.device.type == "cpu":
        qsl = query_start_loc.long()
        q_lens = qsl[1:] - qsl[:-1]
        if int(qsl[0]) != 0 or int(qsl[-1]) != q.shape[0]:
            raise ValueError(
                f"query_start_loc must start at 0 and end at num_tokens = {q.shape[0]}, "
                f"got {int(qsl[0])} .. {int(qsl[-1])}"
            )
        if num_seqs and int(q_lens.min()) < 0:
            raise ValueError("query_start_loc must be non-decreasing (query lengths >= 0)")
        bad = (q_lens > context_lens.long()).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(
                f"sequence {i}: query length {int(q_lens[i])} exceeds context_lens[{i}] = {int(context_lens[i])} "
                f"(context_lens counts the query tokens too)"
            )
        # Triton sizes its grid by max_query_len: a smaller one would leave query rows unwritten
        if max_query_len is not None and num_seqs and max_query_len < int(q_lens.max()):
            raise ValueError(f"max_query_len {max_query_len} is less than the longest query, "
                             f"{int(q_lens.max())} tokens")
    _check_scale(scale)


def paged_attention(
    q, k_cache, v_cache, block_tables, context_lens, scale, query_start_loc=None, backend: str = "auto", **kwargs
):
    """Decode when ``query_start_loc`` is None (one query per sequence), otherwise (chunked) prefill."""
    if query_start_loc is None:
        return paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale, backend, **kwargs)
    return paged_attention_prefill(
        q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, backend, **kwargs
    )
