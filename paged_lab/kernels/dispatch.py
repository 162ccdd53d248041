"""Public entry points: validate the arguments once, then run the chosen backend.

Backends:
- ``"triton"``: the Triton kernels (compiled on CUDA; Triton's interpreter on CPU — slow, for tests).
- ``"torch"``: the vectorized torch path (:mod:`paged_lab.kernels.torch_paged`), fast on CPU.
- ``"reference"``: the per-sequence readable loop (:mod:`paged_lab.kernels.reference`).
- ``"auto"``: Triton on CUDA when the shapes are ones the kernels support, otherwise ``"torch"``.
  If the Triton kernels fail to compile or launch on this GPU, ``"auto"`` warns once and uses
  ``"torch"`` for the rest of the session (``backend="triton"`` raises the error instead).

Every check runs before any launch and names the argument and the limit. Checks of tensor
*values* (table entries in range, context lengths, query_start_loc) run when the tensors live on
the CPU; on CUDA they would force a device sync per layer, so there only shapes/dtypes are checked.

``validate=False`` skips every check: for callers (the engine) that checked the same block tables,
context lengths and slot mapping once per step and then call these for every layer. ``plan`` (torch
backend only) is the batch's precomputed :class:`~paged_lab.kernels.torch_paged.GatherPlan`.
"""

from __future__ import annotations

import warnings

import torch

from paged_lab.kernels import reference, torch_paged
from paged_lab.kernels._interpret import load_kernels, triton_available

BACKENDS = ("auto", "triton", "torch", "reference")
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


def _check_scale(scale):
    if not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float (usually head_dim ** -0.5), got {scale!r}")


def _triton_unsupported(k_cache, v_cache) -> str | None:
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


def resolve_backend(backend: str, k_cache, v_cache=None) -> str:
    """Turn ``backend`` ("auto" included) into the concrete backend that will run."""
    v_cache = k_cache if v_cache is None else v_cache
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        ok = k_cache.is_cuda and triton_available() and _triton_unsupported(k_cache, v_cache) is None
        return "triton" if ok and _auto_triton_error is None else "torch"
    if backend == "triton":
        why = _triton_unsupported(k_cache, v_cache)
        if why is not None:
            raise ValueError(f"backend='triton' does not support {why}; use backend='torch'")
    return backend


def _triton(k_cache):
    return load_kernels(k_cache.device.type)


_auto_triton_error: str | None = None  # set when the Triton kernels failed under backend="auto"


def _run_triton(auto: bool, run_triton, run_torch):
    """Run the Triton path; under ``"auto"`` a failure warns once and falls back to torch for the session."""
    global _auto_triton_error
    if not auto:
        return run_triton()
    try:
        return run_triton()
    except Exception as e:  # compile/launch errors on an untested GPU or Triton version
        _auto_triton_error = f"{type(e).__name__}: {e}"
        warnings.warn(
            f"backend='auto': the Triton kernels failed here ({_auto_triton_error[:300]}); using "
            f"backend='torch' from now on. Pass backend='triton' to raise the error instead.",
            RuntimeWarning,
            stacklevel=3,
        )
        return run_torch()


# ------------------------------------------------------------------------------------------- API
def store_kv(k, v, k_cache, v_cache, slot_mapping, backend: str = "auto", validate: bool = True,
             plan=None) -> None:
    """Write each token's K/V into its slot of the paged cache, in place.

    k, v: ``[num_tokens, num_kv_heads, head_dim]``; k_cache, v_cache:
    ``[num_blocks, block_size, num_kv_heads, head_dim]``; slot_mapping: int ``[num_tokens]``,
    ``slot = block * block_size + offset``; a negative slot skips that token (padding).
    """
    if validate:
        _check_store_kv(k, v, k_cache, v_cache, slot_mapping)
    which = resolve_backend(backend, k_cache, v_cache)
    if k.shape[0] == 0:
        return
    if which == "torch":
        run_torch = lambda: torch_paged.store_kv(k, v, k_cache, v_cache, slot_mapping, plan=plan)
    else:
        run_torch = lambda: reference.store_kv(k, v, k_cache, v_cache, slot_mapping)
    if which == "triton":
        run_triton = lambda: _triton(k_cache).store_kv(k, v, k_cache, v_cache, slot_mapping)
        _run_triton(backend == "auto", run_triton, run_torch)
    else:
        run_torch()


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
    validate: bool = True, plan=None,
):
    """One query token per sequence over its paged context -> ``[num_seqs, num_heads, head_dim]``.

    q: ``[num_seqs, num_heads, head_dim]``; block_tables: int ``[num_seqs, max_blocks]``;
    context_lens: int ``[num_seqs]`` (includes the query token, already stored with :func:`store_kv`).
    ``num_splits`` (Triton only): split each sequence's context into that many partitions merged by
    log-sum-exp (flash-decoding); ``None`` lets the kernel choose, 1 forces the unsplit path.
    """
    if validate:
        _check_cache(k_cache, v_cache)
        _check_q(q, k_cache, "num_seqs")
        _check_device(k_cache.device, q=q, v_cache=v_cache)
        _check_tables(block_tables, context_lens, q.shape[0], k_cache, min_len=1)
        _check_scale(scale)
    if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits must be a positive int or None, got {num_splits!r}")
    which = resolve_backend(backend, k_cache, v_cache)
    if which == "reference":
        run_torch = lambda: reference.paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, float(scale))
    else:
        run_torch = lambda: torch_paged.paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens,
                                                               float(scale), plan=plan)
    if which == "triton":
        return _run_triton(
            backend == "auto",
            lambda: _triton(k_cache).paged_attention_decode(
                q, k_cache, v_cache, block_tables, context_lens, float(scale), num_splits=num_splits
            ),
            run_torch,
        )
    return run_torch()


def paged_attention_prefill(
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, backend: str = "auto",
    validate: bool = True, plan=None,
):
    """Several causal query tokens per sequence over its paged context -> ``[num_tokens, num_heads, head_dim]``.

    q: ``[num_tokens, num_heads, head_dim]``, sequences concatenated; query_start_loc: int
    ``[num_seqs + 1]`` (0, then the cumsum of query lengths). Sequence ``i``'s query tokens are the
    last ``query_len`` positions of its ``context_lens[i]`` tokens (chunked prefill and cached
    prefixes: the earlier context is read from the cache).
    """
    if validate:
        _check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale)
    which = resolve_backend(backend, k_cache, v_cache)
    args = (q, k_cache, v_cache, block_tables, context_lens, query_start_loc, float(scale))
    if which == "reference":
        return reference.paged_attention_prefill(*args)
    run_torch = lambda: torch_paged.paged_attention_prefill(*args, plan=plan)
    if which == "triton":
        run_triton = lambda: _triton(k_cache).paged_attention_prefill(*args)
        return _run_triton(backend == "auto", run_triton, run_torch)
    return run_torch()


def _check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale):
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
