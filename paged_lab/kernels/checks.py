"""The argument checks of the kernels' entry points: every one runs before any launch and names the
argument and the limit.

The C kernels and the Triton kernels (its CPU interpreter too) use every index as given: an
out-of-range block id, context length, slot or query offset reads or writes outside the cache. So
the public entry points (:mod:`paged_lab.kernels.dispatch`) call :func:`check_store_kv`,
:func:`check_decode` or :func:`check_prefill` first, and :func:`check_plan` when a caller passes its
own GatherPlan.

Checks of tensor *values* (table entries in range, context lengths, query_start_loc) run when the
tensors live on the CPU; on CUDA they would force a device sync per call, so there only shapes and
dtypes are checked.

An engine step checks in two parts (``engine.attention.PagedAttention``): :func:`check_step` checks the
step's indices (slot_mapping, block tables, context lengths, query_start_loc) once, since every layer
reads the same ones, and :func:`check_layer` checks the q, k, v of the first layer that reads them
(their shapes only: no tensor value is read).
"""

from __future__ import annotations

import torch

from paged_lab.kernels import torch_paged
from paged_lab.kernels.quant import QUANTIZED_DTYPES, is_quantized

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CACHE_DTYPES = FLOAT_DTYPES + QUANTIZED_DTYPES  # an fp8 cache holds scaled numbers (kernels.quant)
INDEX_DTYPES = (torch.int32, torch.int64)


# ------------------------------------------------------------------------------- one tensor each
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
            raise ValueError(f"{name} is on {t.device} but the cache is on {device}; "
                             f"put all tensors on one device")


def check_cache(k_cache, v_cache):
    """-> (num_blocks, block_size, num_kv_heads, head_dim)."""
    doc = "[num_blocks, block_size, num_kv_heads, head_dim]"
    _check_ndim("k_cache", k_cache, 4, doc)
    _check_ndim("v_cache", v_cache, 4, doc)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} must equal k_cache shape "
                         f"{tuple(k_cache.shape)}")
    _check_dtype("k_cache", k_cache, CACHE_DTYPES)
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"v_cache dtype {v_cache.dtype} must equal k_cache dtype {k_cache.dtype}")
    if min(k_cache.shape[1:]) < 1:
        raise ValueError(f"k_cache {doc} has an empty dimension: shape {tuple(k_cache.shape)}")
    return tuple(k_cache.shape)


def _check_q(q, k_cache, ndoc):
    _, _, num_kv_heads, head_dim = k_cache.shape
    _check_ndim("q", q, 3, f"[{ndoc}, num_heads, head_dim]")
    if is_quantized(k_cache.dtype):  # an fp8 cache serves a model of any float dtype
        _check_dtype("q", q, FLOAT_DTYPES)
    elif q.dtype != k_cache.dtype:
        raise TypeError(f"q dtype {q.dtype} must equal the cache dtype {k_cache.dtype}")
    if q.shape[2] != head_dim:
        raise ValueError(f"q head_dim {q.shape[2]} must equal the cache head_dim {head_dim}")
    if q.shape[1] % num_kv_heads:
        raise ValueError(
            f"q num_heads {q.shape[1]} must be a multiple of the cache num_kv_heads {num_kv_heads} "
            f"(GQA groups); is the cache laid out [num_blocks, block_size, num_kv_heads, head_dim]?"
        )


def _check_new_kv(k, v, k_cache):
    """k, v: the new tokens' keys and values, ``[num_tokens, num_kv_heads, head_dim]`` as the cache."""
    _, _, num_kv_heads, head_dim = k_cache.shape
    doc = f"[num_tokens, num_kv_heads={num_kv_heads}, head_dim={head_dim}]"
    for name, t in (("k", k), ("v", v)):
        _check_ndim(name, t, 3, doc)
        if tuple(t.shape[1:]) != (num_kv_heads, head_dim):
            raise ValueError(f"{name} must be {doc} to match the cache, got shape {tuple(t.shape)}")
        _check_dtype(name, t, FLOAT_DTYPES)
    if v.shape != k.shape:
        raise ValueError(f"v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")


def check_scale(scale):
    if not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive float (usually head_dim ** -0.5), got {scale!r}")


def check_kv_scales(k_scale, v_scale):
    """An fp8 cache's per-tensor scales: positive finite numbers (x / scale is what the cache stores)."""
    for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"{name} must be a positive finite number (1.0: vLLM's default), got {value!r}")


def check_num_splits(num_splits):
    if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits must be a positive int or None, got {num_splits!r}")


# ------------------------------------------------------------------------------------ the indices
def _check_slot_mapping(slot_mapping, num_tokens, k_cache):
    """Where each new token goes: int ``[num_tokens]``, every slot below num_blocks x block_size."""
    num_blocks, block_size = k_cache.shape[:2]
    _check_ndim("slot_mapping", slot_mapping, 1, "[num_tokens]")
    _check_dtype("slot_mapping", slot_mapping, INDEX_DTYPES)
    if slot_mapping.shape[0] != num_tokens:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} entries but k has {num_tokens} tokens")
    _check_device(k_cache.device, slot_mapping=slot_mapping)
    num_slots = num_blocks * block_size
    if k_cache.device.type == "cpu" and slot_mapping.numel() and int(slot_mapping.max()) >= num_slots:
        raise ValueError(
            f"slot_mapping max {int(slot_mapping.max())} must be < num_blocks x block_size = {num_slots}"
        )


def check_sliding_window(sliding_window) -> dict:
    """None (full attention) or an integer >= 1; returns the keyword to pass on (``{}`` for None)."""
    if sliding_window is None:
        return {}
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(f"sliding_window must be None or an integer >= 1, got {sliding_window!r}")
    return {"sliding_window": sliding_window}


def _check_tables(block_tables, context_lens, num_seqs, k_cache, min_len, q_lens=None, sliding_window=None):
    """The tables' shapes and the entries a kernel reads: every block that holds a position in
    ``[first, context_len)``, ``first`` 0 or, with a window, the first query's window start (the
    entries before it may be NULL_BLOCK). ``q_lens``: each sequence's query length (decode: 1)."""
    num_blocks, block_size = k_cache.shape[:2]
    _check_ndim("block_tables", block_tables, 2, "[num_seqs, max_blocks]")
    _check_dtype("block_tables", block_tables, INDEX_DTYPES)
    _check_ndim("context_lens", context_lens, 1, "[num_seqs]")
    _check_dtype("context_lens", context_lens, INDEX_DTYPES)
    if block_tables.shape[0] != num_seqs or context_lens.shape[0] != num_seqs:
        raise ValueError(
            f"block_tables has {block_tables.shape[0]} rows and context_lens {context_lens.shape[0]} "
            f"entries; both must equal num_seqs = {num_seqs}"
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
    first_pos = torch.arange(block_tables.shape[1])[None, :] * block_size
    used = first_pos < lens[:, None]  # entries a kernel reads
    if sliding_window is not None:
        q_lens = torch.ones_like(lens) if q_lens is None else q_lens
        first = (lens - q_lens - sliding_window + 1).clamp(min=0)
        used &= first_pos + block_size > first[:, None]
    ids = block_tables.long()[used]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
        raise ValueError(
            f"block_tables entries in use must be in [0, num_blocks={num_blocks}), "
            f"got range [{int(ids.min())}, {int(ids.max())}]"
        )


def _check_queries(query_start_loc, num_tokens, block_tables, context_lens, k_cache, max_query_len=None,
                   sliding_window=None):
    """query_start_loc int ``[num_seqs + 1]``: 0, then where each sequence's queries end (the last at
    num_tokens); each query at most its context; then the tables of those num_seqs sequences."""
    _check_ndim("query_start_loc", query_start_loc, 1, "[num_seqs + 1]")
    _check_dtype("query_start_loc", query_start_loc, INDEX_DTYPES)
    num_seqs = query_start_loc.shape[0] - 1
    if num_seqs < 0:
        raise ValueError("query_start_loc must have num_seqs + 1 >= 1 entries, got 0")
    _check_device(k_cache.device, query_start_loc=query_start_loc)
    if k_cache.device.type != "cpu":
        _check_tables(block_tables, context_lens, num_seqs, k_cache, min_len=0)
        return
    qsl = query_start_loc.long()
    q_lens = qsl[1:] - qsl[:-1]
    if int(qsl[0]) != 0 or int(qsl[-1]) != num_tokens:
        raise ValueError(
            f"query_start_loc must start at 0 and end at num_tokens = {num_tokens}, "
            f"got {int(qsl[0])} .. {int(qsl[-1])}"
        )
    if num_seqs and int(q_lens.min()) < 0:
        raise ValueError("query_start_loc must be non-decreasing (query lengths >= 0)")
    _check_tables(block_tables, context_lens, num_seqs, k_cache, 0, q_lens, sliding_window)
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


# ---------------------------------------------------------------------------- per entry point
def check_store_kv(k, v, k_cache, v_cache, slot_mapping):
    check_cache(k_cache, v_cache)
    _check_new_kv(k, v, k_cache)
    _check_device(k_cache.device, k=k, v=v, v_cache=v_cache)
    _check_slot_mapping(slot_mapping, k.shape[0], k_cache)


def check_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window=None):
    check_cache(k_cache, v_cache)
    _check_q(q, k_cache, "num_seqs")
    _check_device(k_cache.device, q=q, v_cache=v_cache)
    _check_tables(block_tables, context_lens, q.shape[0], k_cache, 1, sliding_window=sliding_window)
    check_scale(scale)


def check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale,
                  max_query_len=None, sliding_window=None):
    check_cache(k_cache, v_cache)
    _check_q(q, k_cache, "num_tokens")
    _check_device(k_cache.device, q=q, v_cache=v_cache)
    _check_queries(query_start_loc, q.shape[0], block_tables, context_lens, k_cache, max_query_len,
                   sliding_window)
    check_scale(scale)


def check_plan(plan, k_cache, sliding_window=None, **tensors):
    """A caller's ``plan`` must be the GatherPlan of this very call (see ``torch_paged.plan_mismatch``),
    built for the call's ``sliding_window``: the backends index the cache through it without checking
    it again."""
    if plan is None:
        return
    if getattr(plan, "sliding_window", None) != sliding_window:
        raise ValueError(f"plan was built for sliding_window={getattr(plan, 'sliding_window', None)!r}, but "
                         f"this call has sliding_window={sliding_window!r}; build it with plan_gather(..., "
                         f"sliding_window={sliding_window!r})")
    why = torch_paged.plan_mismatch(plan, k_cache.shape[1], **tensors)
    if why is not None:
        raise ValueError(why)


# ------------------------------------------------------------------------------ an engine step
def check_step(k_cache, v_cache, slot_mapping, block_tables, context_lens, query_start_loc=None,
               max_query_len=None, sliding_window=None):
    """The indices of one step, which every layer of one group reads: ``query_start_loc`` None for a
    decode (one query token per sequence). The same checks as the entry points', once per step."""
    check_cache(k_cache, v_cache)
    _check_ndim("slot_mapping", slot_mapping, 1, "[num_tokens]")
    num_tokens = slot_mapping.shape[0]
    _check_slot_mapping(slot_mapping, num_tokens, k_cache)
    check_sliding_window(sliding_window)
    if query_start_loc is None:
        _check_tables(block_tables, context_lens, num_tokens, k_cache, 1, sliding_window=sliding_window)
    else:
        _check_queries(query_start_loc, num_tokens, block_tables, context_lens, k_cache, max_query_len,
                       sliding_window)


def check_layer(q, k, v, k_cache, v_cache, num_tokens: int, scale):
    """One layer's q ``[num_tokens, num_heads, head_dim]``, k, v ``[num_tokens, num_kv_heads, head_dim]``
    and caches, against the step's ``num_tokens``: shapes, dtypes and devices, no tensor value read."""
    check_cache(k_cache, v_cache)
    _check_q(q, k_cache, "num_tokens")
    _check_new_kv(k, v, k_cache)
    if q.shape[0] != num_tokens or k.shape[0] != num_tokens:
        raise ValueError(f"q has {q.shape[0]} tokens and k {k.shape[0]}; "
                         f"the step's slot_mapping has {num_tokens}")
    _check_device(k_cache.device, q=q, k=k, v=v, v_cache=v_cache)
    check_scale(scale)
