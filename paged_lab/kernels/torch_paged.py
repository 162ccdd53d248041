"""Vectorized torch paged attention: the fast CPU path (``backend="torch"``).

Same math as :mod:`paged_lab.kernels.reference`, but batched instead of looping over sequences:
one index op gathers every sequence's pages into a padded ``[num_seqs, max_ctx, kv_heads, d]``
tensor, then one ``scaled_dot_product_attention`` call with a mask does the rest. The engine's
CPU path runs this for every layer of every step, so it must not loop in Python.

GQA without copying K/V: the ``group`` query heads that share a KV head are laid out as extra
query rows of that KV head (``[num_seqs, kv_heads, group * num_q, d]``), so SDPA sees plain MHA.

An fp8 cache is quantized where K/V are stored and dequantized where they are gathered, by the two
functions of :mod:`~paged_lab.kernels.quant` (``k_scale``/``v_scale``: the layer's per-tensor scales;
a float cache ignores them).

This is torch only. The same attention in C (:mod:`~paged_lab.kernels.cpu.attention`, no gathered copy) is
the dispatch's ``"cpu"`` backend, which ``"auto"`` picks where it can run. :func:`store_kv`,
:func:`paged_attention_decode` and :func:`paged_attention_prefill` have the reference's signatures (the
backend interface); :func:`store_and_decode` does both in one pass where it can.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from paged_lab.kernels import reference
from paged_lab.kernels.quant import as_bits, dequantize_kv, is_quantized, quantize_kv
from paged_lab.kv_math import cdiv


@dataclass
class GatherPlan:
    """The index work of one batch, shared by every layer (the tables and lengths do not change
    between layers of one step, so the engine builds this once per step instead of 30 times).

    table: long ``[S, nb]`` (padding entries set to block 0); valid: bool ``[S, T]``;
    unused: long ``[n]``, flat ``[S * T]`` rows past each context (zeroed after the gather);
    decode_mask: bool ``[S, 1, 1, T]`` (broadcasts over heads); for prefill also seq_of / row
    (``[num_tokens]``: owning sequence, index within its query), max_q and the causal mask
    ``[S, max_q, T]``. Given the batch's slot_mapping, also store_slots (long ``[n]``, the slots
    that are not padding) and store_rows (the tokens they belong to; None when every token is stored).
    With ``sliding_window`` W, ``valid`` also drops each sequence's positions before its first query's
    window (and ``table`` sets their blocks, which may be NULL_BLOCK, to block 0: gathered, then zeroed),
    and the masks drop each query's keys before ``p - W + 1``.
    """

    table: torch.Tensor
    valid: torch.Tensor
    unused: torch.Tensor
    decode_mask: torch.Tensor
    seq_of: torch.Tensor | None = None
    row: torch.Tensor | None = None
    max_q: int = 1
    mask: torch.Tensor | None = None
    store_slots: torch.Tensor | None = None
    store_rows: torch.Tensor | None = None
    lens: torch.Tensor | None = None  # long [S]: the context lengths (what the C kernels read, with table)
    sliding_window: int | None = None  # the window the masks were built for (None: full attention)

    @property
    def can_fuse(self) -> bool:
        """Store and attend in one pass (:func:`fused_store_and_decode`): the plan knows where every
        token goes."""
        return self.store_slots is not None and self.store_rows is None


def plan_gather(block_tables, context_lens, block_size: int, max_ctx: int | None = None,
                query_start_loc=None, slot_mapping=None, max_query_len: int | None = None,
                sliding_window: int | None = None) -> GatherPlan:
    """Build the :class:`GatherPlan` of a batch; ``query_start_loc`` (prefill) adds the causal mask,
    ``slot_mapping`` the indices :func:`store_kv` writes through, ``sliding_window`` the window (see the
    class). ``max_ctx``/``max_query_len``: the longest context / query when the caller knows them (else
    read from the tensors: a device sync)."""
    dev = block_tables.device
    lens = context_lens.to(device=dev, dtype=torch.long)
    max_ctx = int(lens.max()) if max_ctx is None else int(max_ctx)
    nb = max(1, cdiv(max_ctx, block_size))
    qsl = None if query_start_loc is None else query_start_loc.to(device=dev, dtype=torch.long)
    q_lens = torch.ones_like(lens) if qsl is None else qsl[1:] - qsl[:-1]  # [S]
    # [S] the first position any query of a sequence reads: 0, or its first query's window start
    first = torch.zeros_like(lens) if sliding_window is None else (
        lens - q_lens - sliding_window + 1).clamp(min=0)
    first_pos = torch.arange(nb, device=dev) * block_size  # [nb]
    table = block_tables[:, :nb].to(dtype=torch.long)  # [S, nb]
    read = (first_pos[None, :] < lens[:, None]) & (first_pos[None, :] + block_size > first[:, None])
    table = torch.where(read, table, 0)  # padding (and out-of-window, NULL_BLOCK) entries may hold anything
    pos = torch.arange(nb * block_size, device=dev)  # [T]
    valid = (pos[None, :] < lens[:, None]) & (pos[None, :] >= first[:, None])  # [S, T]
    unused = (~valid).flatten().nonzero().squeeze(1)  # few: partial last blocks, padding, before windows
    plan = GatherPlan(table, valid, unused, valid[:, None, None, :], lens=lens, sliding_window=sliding_window)
    if slot_mapping is not None:
        slots = slot_mapping.to(device=dev, dtype=torch.long)
        keep = slots >= 0  # negative = padding, not stored
        if bool(keep.all()):
            plan.store_slots = slots
        else:
            plan.store_rows = keep.nonzero().squeeze(1)
            plan.store_slots = slots[plan.store_rows]
    if qsl is not None:
        S, num_tokens = q_lens.shape[0], int(qsl[-1])
        plan.max_q = (int(q_lens.max()) if S else 0) if max_query_len is None else int(max_query_len)
        plan.seq_of = torch.repeat_interleave(torch.arange(S, device=dev), q_lens)  # [num_tokens]
        plan.row = torch.arange(num_tokens, device=dev) - qsl[plan.seq_of]  # [num_tokens]
        # [S, max_q] absolute
        q_pos = (lens - q_lens)[:, None] + torch.arange(plan.max_q, device=dev)[None, :]
        # [S, max_q, T] causal + in-context
        plan.mask = (pos[None, None, :] <= q_pos[:, :, None]) & valid[:, None, :]
        if sliding_window is not None:  # and in each query's own window
            plan.mask &= pos[None, None, :] > q_pos[:, :, None] - sliding_window
    return plan


def plan_mismatch(plan, block_size: int, block_tables=None, context_lens=None, query_start_loc=None,
                  slot_mapping=None) -> str | None:
    """Why ``plan`` is not the :class:`GatherPlan` that :func:`plan_gather` builds from this call's
    tensors (a sentence naming ``plan`` and the field), or None when it is.

    A plan is a cache of indices, and nothing downstream checks it again: the torch path gathers and
    stores through its tensors, and the C kernels take ``plan.table`` and ``plan.lens`` as raw pointers.
    A plan left over from another step (other tables, lengths or batch size) gives wrong attention at
    best, and reads or writes outside the cache (a crash) at worst. The exact test is also a cheap one:
    rebuild the plan from the call's own tensors at the plan's own sizes (its table width, its max_q)
    and compare every index tensor a backend reads. That is one more ``plan_gather``, which the dispatch
    runs once per step (its checks run on the first layer of a forward only), after the block tables
    and lengths themselves passed their range checks.

    ``block_tables``/``context_lens`` check the attention indices, ``query_start_loc`` adds the
    prefill ones, ``slot_mapping`` the store ones (a plan built without slot_mapping has none: the
    store then reads slot_mapping itself). Values are compared on CPU tensors only (on CUDA each
    comparison would wait for the device; the shapes are still checked there).
    """
    if not isinstance(plan, GatherPlan):
        return f"plan must be a GatherPlan (built by torch_paged.plan_gather), got {type(plan).__name__}"
    if block_tables is not None:
        why = _attention_plan_mismatch(plan, block_size, block_tables, context_lens, query_start_loc)
        if why is not None:
            return why
    if slot_mapping is not None and plan.store_slots is not None:
        return _store_plan_mismatch(plan, slot_mapping)
    return None


_ANOTHER_BATCH = ("the plan was built for another batch; "
                  "build it with plan_gather from the tensors this call gets")


def _same(a, b) -> bool:
    """Both None, or tensors of one shape, dtype and device holding the same values."""
    if a is None or b is None:
        return a is None and b is None
    return (isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            and torch.equal(a, b))


def _attention_plan_mismatch(plan, block_size, block_tables, context_lens, query_start_loc) -> str | None:
    num_seqs, width = block_tables.shape
    prefill = query_start_loc is not None
    fields = ("table", "lens", "valid", "unused", "decode_mask",
              *(("seq_of", "row", "mask") if prefill else ()))
    for name in fields:
        if not isinstance(getattr(plan, name), torch.Tensor):
            if name == "seq_of":
                return ("plan has no query indices (a decode plan): "
                        "build it with plan_gather(..., query_start_loc=...)")
            return f"plan.{name} must be a tensor, got {type(getattr(plan, name)).__name__}"
    table = plan.table
    if table.dim() != 2 or table.shape[0] != num_seqs or not 1 <= table.shape[1] <= width:
        return (f"plan.table has shape {tuple(table.shape)}, but this call has {num_seqs} sequences and "
                f"block_tables {width} columns wide; {_ANOTHER_BATCH}")
    if table.device != block_tables.device:
        return f"plan is on {table.device} but block_tables is on {block_tables.device}"
    if block_tables.device.type != "cpu" or num_seqs == 0:
        return None
    nb = table.shape[1]
    lens = context_lens.long()
    if int(lens.max()) > nb * block_size:
        return (f"plan.table is {nb} block(s) wide, {nb * block_size} tokens at block_size {block_size}, but "
                f"context_lens max is {int(lens.max())}; {_ANOTHER_BATCH}")
    if prefill:
        qsl = query_start_loc.long()
        longest = int((qsl[1:] - qsl[:-1]).max())
        if not isinstance(plan.max_q, int) or plan.max_q < longest:
            return (f"plan.max_q is {plan.max_q!r}, but the longest query has {longest} tokens; "
                    f"{_ANOTHER_BATCH}")
    want = plan_gather(block_tables, context_lens, block_size, max_ctx=nb * block_size,
                       query_start_loc=query_start_loc, max_query_len=plan.max_q if prefill else None,
                       sliding_window=plan.sliding_window)
    for name in fields:
        if not _same(getattr(plan, name), getattr(want, name)):
            return (f"plan.{name} does not match "
                    f"block_tables/context_lens{'/query_start_loc' if prefill else ''}; {_ANOTHER_BATCH}")
    return None


def _store_plan_mismatch(plan, slot_mapping) -> str | None:
    slots = slot_mapping.to(device=plan.store_slots.device, dtype=torch.long)
    if plan.store_slots.dim() != 1 or plan.store_slots.shape[0] > slots.shape[0]:
        return (f"plan.store_slots has shape {tuple(plan.store_slots.shape)} for {slots.shape[0]} tokens; "
                f"{_ANOTHER_BATCH}")
    if slots.device.type != "cpu":
        return None
    keep = slots >= 0  # as plan_gather splits them: negative slots are padding, not stored
    rows = None if bool(keep.all()) else keep.nonzero().squeeze(1)
    if not (_same(plan.store_rows, rows) and _same(plan.store_slots, slots if rows is None else slots[rows])):
        return f"plan.store_slots/store_rows do not match slot_mapping; {_ANOTHER_BATCH}"
    return None


def store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale: float = 1.0, v_scale: float = 1.0, *,
             plan: GatherPlan | None = None) -> None:
    """:func:`paged_lab.kernels.reference.store_kv`, as one ``index_copy_`` per cache when ``plan``
    carries the batch's store indices (no per-layer masking and slot -> (block, offset) split)."""
    if plan is None or plan.store_slots is None or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        reference.store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        return
    if plan.store_rows is not None:
        k, v = k[plan.store_rows], v[plan.store_rows]
    # [num_blocks, block_size, kvh, d] viewed as [num_slots, kvh, d]: slot s is row s (fp8 as bytes: as_bits)
    k_rows = as_bits(k_cache).view(-1, *k_cache.shape[2:])
    v_rows = as_bits(v_cache).view(-1, *v_cache.shape[2:])
    k_rows.index_copy_(0, plan.store_slots, as_bits(quantize_kv(k, k_cache.dtype, k_scale)))
    v_rows.index_copy_(0, plan.store_slots, as_bits(quantize_kv(v, v_cache.dtype, v_scale)))


def _gather(cache, plan: GatherPlan, scale: float = 1.0) -> torch.Tensor:
    """cache [num_blocks, block_size, kvh, d] -> float32 [S, T, kvh, d]: each sequence's blocks in table
    order (an fp8 cache dequantized with ``scale``). ``index_select`` over whole blocks (rows of
    block_size * kvh * d numbers) copies each block with one memcpy; ``cache[table]`` (advanced indexing)
    gathers element by element (the two measured: ``docs/benchmarks.md``, "Block gathers")."""
    S, nb = plan.table.shape
    rows = cache.reshape(cache.shape[0], -1).index_select(0, plan.table.flatten())  # [S * nb, bs * kvh * d]
    return dequantize_kv(rows.view(S, nb * cache.shape[1], *cache.shape[2:]), scale)


def gather_padded(k_cache, v_cache, block_tables, context_lens, max_ctx: int, plan: GatherPlan | None = None,
                  k_scale: float = 1.0, v_scale: float = 1.0):
    """Gather all sequences' K/V through their tables into ``[num_seqs, kv_heads, T, d]`` (float32).

    ``T = ceil(max_ctx / block_size) * block_size``. Slots at or past a sequence's context length are
    zeroed (not just masked later) so NaN or garbage in unused slots can never reach the softmax:
    a masked score is dropped, but ``0 * NaN`` in ``probs @ V`` would still be NaN.
    Also returns ``valid``: bool ``[num_seqs, T]``. ``plan``: the batch's precomputed indices.
    ``k_scale``/``v_scale``: an fp8 cache's scales (:func:`~paged_lab.kernels.quant.dequantize_kv`).
    """
    if plan is None:
        plan = plan_gather(block_tables.to(k_cache.device), context_lens, k_cache.shape[1], max_ctx)
    k, v = _gather(k_cache, plan, k_scale), _gather(v_cache, plan, v_scale)  # [S, T, kv_heads, d], fresh
    k.view(-1, *k.shape[2:]).index_fill_(0, plan.unused, 0.0)
    v.view(-1, *v.shape[2:]).index_fill_(0, plan.unused, 0.0)
    return k.transpose(1, 2), v.transpose(1, 2), plan.valid  # [S, kv_heads, T, d]


def _attend(q, k, v, mask, scale: float):
    """q: [S, num_q, H, d] (float32); k, v: [S, kv_heads, T, d]; mask: bool [S, num_q, T] (True = attend)."""
    S, num_q, H, d = q.shape
    kvh = k.shape[1]
    group = H // kvh
    # [S, num_q, kvh, group, d] -> [S, kvh, group * num_q, d]; row r is (g = r // num_q, query r % num_q)
    qg = q.view(S, num_q, kvh, group, d).permute(0, 2, 3, 1, 4).reshape(S, kvh, group * num_q, d)
    m = mask[:, None].expand(S, group, num_q, mask.shape[-1]).reshape(S, 1, group * num_q, -1)
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=m, scale=scale)  # [S, kvh, group * num_q, d]
    return o.view(S, kvh, group, num_q, d).permute(0, 3, 1, 2, 4).reshape(S, num_q, H, d)


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale: float,
                           k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                           plan: GatherPlan | None = None, num_splits: int | None = None):
    """Batched decode; same contract as :func:`paged_lab.kernels.reference.paged_attention_decode`
    (a ``plan`` carries its own ``sliding_window``; ``num_splits`` is Triton's and ignored here)."""
    if q.shape[0] == 0:
        return torch.empty_like(q)
    if plan is None:
        plan = plan_gather(block_tables.to(k_cache.device), context_lens, k_cache.shape[1],
                           sliding_window=sliding_window)
    k, v, _ = gather_padded(k_cache, v_cache, block_tables, context_lens, 0, plan, k_scale, v_scale)
    return _decode_attend(q, k, v, plan, scale)


def _decode_attend(q, k, v, plan: GatherPlan, scale: float):
    """q [S, H, d]; gathered k, v [S, kv_heads, T, d] -> [S, H, d]. One query per sequence: the GQA
    group's query heads are the rows of their KV head (plain MHA)."""
    S, H, d = q.shape
    kvh = k.shape[1]
    qg = q.float().view(S, kvh, H // kvh, d)  # [S, kv_heads, group, d]
    # [S, kvh, group, d]
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=plan.decode_mask, scale=scale)
    return o.reshape(S, H, d).to(q.dtype)


def fused_store_and_decode(q, k, v, kv, plan: GatherPlan, scale: float, k_scale: float = 1.0,
                           v_scale: float = 1.0):
    """:func:`store_kv` then :func:`paged_attention_decode` for one layer whose K and V caches are the two
    halves of ``kv`` ``[2, num_blocks, block_size, kv_heads, d]`` (``KVCache.data[layer]``): one index op
    stores both, one gathers both, one zeroes the unused slots of both. The compiled decode step calls
    this 30 times per token, so each op saved counts. Needs ``plan`` built with the step's slot_mapping
    and no padding slots; q: ``[S, H, d]``, k, v: ``[S, kv_heads, d]`` -> ``[S, H, d]``."""
    if not plan.can_fuse or not kv.is_contiguous():
        raise ValueError("fused_store_and_decode needs a plan with the step's slot_mapping, no padding "
                         "slots, and a contiguous kv")
    S, d = q.shape[0], q.shape[2]
    kvh = kv.shape[3]
    scales = _kv_scales(kv.dtype, k_scale, v_scale)  # 1.0, or [2, 1, 1, 1]: K's scale, V's scale
    new = as_bits(quantize_kv(torch.stack((k, v)), kv.dtype, scales))  # [2, S, kvh, d]
    as_bits(kv).view(2, -1, kvh, d).index_copy_(1, plan.store_slots, new)
    nb = kv.shape[1]
    rows = kv.view(2 * nb, -1).index_select(0, torch.cat((plan.table.flatten(), plan.table.flatten() + nb)))
    # [2, S, T, kvh, d], a fresh copy (see _gather); the scales broadcast as [2, 1, 1, 1, 1]
    both = dequantize_kv(rows.view(2, S, -1, kvh, d),
                         scales if isinstance(scales, float) else scales[..., None])
    both.view(2, -1, kvh, d).index_fill_(1, plan.unused, 0.0)  # see gather_padded: no NaN can reach SDPA
    both = both.transpose(2, 3)  # [2, S, kvh, T, d]
    return _decode_attend(q, both[0], both[1], plan, scale)


def _kv_scales(cache_dtype, k_scale: float, v_scale: float):
    """K's and V's scales as one tensor ``[2, 1, 1, 1]`` that broadcasts over ``stack((k, v))``, for a
    quantized cache; 1.0 for a float cache (which ignores them; no tensor made on the fp32 hot path)."""
    if not is_quantized(cache_dtype):
        return 1.0
    return torch.tensor((k_scale, v_scale), dtype=torch.float32).view(2, 1, 1, 1)


def one_tensor(k_cache, v_cache) -> torch.Tensor | None:
    """The ``[2, num_blocks, block_size, kv_heads, d]`` tensor whose halves are ``k_cache`` and ``v_cache``,
    when they are that (``engine.KVCache`` keeps each layer's K and V in one tensor), else None."""
    n = k_cache.numel()
    if (k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype or not k_cache.is_contiguous()
            or not v_cache.is_contiguous()
            or v_cache.data_ptr() != k_cache.data_ptr() + n * k_cache.element_size()
            # one allocation
            or v_cache.untyped_storage().data_ptr() != k_cache.untyped_storage().data_ptr()):
        return None
    return k_cache.as_strided((2, *k_cache.shape), (n, *k_cache.stride()))


def store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale: float,
                     k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                     plan: GatherPlan | None = None):
    """The torch backend's ``store_and_decode`` (the dispatch's public ``store_and_decode`` runs it):
    :func:`fused_store_and_decode` (fewer ops) when the plan can fuse and the caches are one tensor's
    halves, else :func:`store_kv` then :func:`paged_attention_decode`."""
    kv = one_tensor(k_cache, v_cache)
    if plan is not None and plan.can_fuse and kv is not None:
        return fused_store_and_decode(q, k, v, kv, plan, scale, k_scale, v_scale)
    store_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale, plan=plan)
    return paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale, k_scale, v_scale,
                                  sliding_window, plan=plan)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale: float,
                            k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None, *,
                            plan: GatherPlan | None = None, max_query_len: int | None = None):
    """Batched (chunked) prefill; same contract as
    :func:`paged_lab.kernels.reference.paged_attention_prefill`."""
    num_tokens = q.shape[0]
    if num_tokens == 0:
        return torch.empty_like(q)
    if plan is None:
        plan = plan_gather(block_tables.to(k_cache.device), context_lens, k_cache.shape[1],
                           query_start_loc=query_start_loc, max_query_len=max_query_len,
                           sliding_window=sliding_window)
    S = plan.table.shape[0]
    qp = q.new_zeros((S, plan.max_q) + tuple(q.shape[1:]), dtype=torch.float32)
    qp[plan.seq_of, plan.row] = q.float()  # [S, max_q, H, d]
    k, v, _ = gather_padded(k_cache, v_cache, block_tables, context_lens, 0, plan, k_scale, v_scale)
    out = _attend(qp, k, v, plan.mask, scale)  # [S, max_q, H, d]
    return out[plan.seq_of, plan.row].to(q.dtype)
