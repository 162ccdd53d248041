"""Attention through the block tables, for every layer of the model: the step's metadata and the call.

:class:`AttentionMetadata` says where one step's query tokens live in the paged cache; :class:`PagedAttention`
stores their K/V and attends through the backend that ``paged_lab.kernels`` chose:

    store_kv(k, v, k_cache, v_cache, slot_mapping)  # the new tokens' K/V go into their slots
    prefill / store_and_decode(q, ...)              # then q attends over the block tables

The model (``engine.llama``) calls it once per layer; the engine builds the metadata once per step.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from paged_lab import kernels
from paged_lab.kernels import checks


@dataclass(frozen=True, eq=False)
class AttentionMetadata:
    """Where one step's query tokens live in the paged cache: the step's tensors, which every layer
    reads, and nothing of any backend's (as vLLM's ``CommonAttentionMetadata``, "shared across layers and
    backends", ``vllm/v1/attention/backend.py``, vllm 0.32.0). What a backend precomputes from it, its
    plan of the step, lives with the backend (:class:`PagedAttention`). Built once per step and never
    changed: the plan is kept for this very object.

    A model with layer groups (sliding-window layers, ``engine.kv_groups``) has one per group per step:
    the same query tokens and lengths, the group's own block tables and slot mapping, and the group's
    ``sliding_window`` (vLLM copies the common metadata per KV cache group and swaps in
    ``block_table_tensor`` and ``slot_mapping``, ``_build_attention_metadata`` in
    ``vllm/v1/worker/gpu_model_runner.py``; its CPU backend's builder adds the group's window,
    ``_group_sliding_window`` in ``vllm/v1/attention/backends/cpu_attn.py``)."""

    slot_mapping: torch.Tensor  # int64 [num_tokens]: cache slot of every query token
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks]
    context_lens: torch.Tensor  # int32 [num_seqs]: tokens in cache after this step, query included
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]: cumsum of query lengths
    is_decode: bool  # every sequence has exactly one query token -> the decode kernel
    # The longest query and context of the step, as host ints: the engine knows them from its lists, so
    # no kernel or RoPE table has to read them back from the device (a sync per layer on a GPU).
    max_query_len: int | None = None
    max_context_len: int | None = None
    # How many of the first sequences have a one-token query (decodes): the engine puts them first,
    # as vLLM reorders a batch for its attention backends. 0: none, or not said.
    num_decodes: int = 0
    # The layers that read this attend to the last sliding_window positions only (None: the whole context);
    # their block tables may hold NULL_BLOCK before each query's window.
    sliding_window: int | None = None


class PagedAttention:
    """The attention step of every layer, through ``paged_lab.kernels``: store the new tokens' K/V in
    their slots and attend over the block tables; a decode (one query token per sequence) does both in
    one ``store_and_decode`` call. ``attention(q, k, v, k_cache, v_cache, meta, scale, k_scale, v_scale)``;
    ``k_scale``/``v_scale``: the layer's fp8 cache scales (``KVCache.scales``; a float cache ignores them),
    which vLLM's ``Attention`` layer holds as ``_k_scale``/``_v_scale`` and passes to its kernels alike.

    The backend is chosen once (``kernels.choose_backend``): when the engine builds this with its cache
    (``like``: layer 0's (k_cache, v_cache) and the model's num_heads), else on the first call. A step's
    tensors are checked once, on the first layer that reads them, where the backend also builds its
    plan of the step (``kernels.dispatch.StepPlan``); the later layers get the same ``meta`` and reuse
    both (one plan per metadata object: a model with layer groups has one per group per step).
    ``stats``: a ``kernels.KernelStats`` that counts what ran. ``sliding_window``: some layers will attend
    through a window of that many tokens, so the backend must take one (``kernels.choose_backend``).

    A step that mixes one-token queries (decodes, first) with longer ones (prefills) is attended in two
    parts when the backend reads a plan (torch's prefill pads every sequence's queries to the longest:
    a decode beside a 50-token prefill would cost 50 query rows), the decodes through the decode kernel.
    vLLM's attention backends find the same boundary (``split_decodes_and_prefills`` in
    ``vllm/v1/attention/backends/utils.py``, vllm 0.32.0, once ``reorder_batch_to_split_decodes_and_prefills``
    has put the decodes first)."""

    def __init__(self, backend: str = "auto", stats=None, like: tuple | None = None,
                 num_heads: int | None = None, sliding_window: int | None = None):
        self.backend_name = backend
        self.stats = kernels.KernelStats() if stats is None else stats
        self.sliding_window = sliding_window
        self.backend = None  # kernels.ChosenBackend, once chosen
        # meta -> its parts and plans, for the metadata objects still alive (this step's)
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        if like is not None:
            self._choose(*like, num_heads)

    def _choose(self, k_cache, v_cache, num_heads: int | None, sliding_window: int | None = None):
        q = None if num_heads is None else k_cache.new_empty((0, num_heads, k_cache.shape[-1]))
        self.backend = kernels.choose_backend(self.backend_name, k_cache, v_cache, q, stats=self.stats,
                                              sliding_window=self.sliding_window or sliding_window)

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float, k_scale: float = 1.0,
                 v_scale: float = 1.0) -> torch.Tensor:
        if self.backend is None:
            self._choose(k_cache, v_cache, q.shape[1], meta.sliding_window)
        parts = self.prepare(meta, k_cache, v_cache)
        first_plan = parts[0][1]
        if not first_plan.checked:  # the first layer of the step: the shapes the later layers repeat
            checks.check_layer(q, k, v, k_cache, v_cache, meta.slot_mapping.shape[0], scale)
            first_plan.checked = True
        kv_scales = {"k_scale": k_scale, "v_scale": v_scale}
        if len(parts) == 1:
            return self._attend(q, k, v, k_cache, v_cache, *parts[0], scale, kv_scales)
        (decode, decode_plan), (prefill, prefill_plan) = parts
        n = decode.slot_mapping.shape[0]
        # Every token of the step is stored before anyone attends, as in vLLM's layers: a one-token query
        # sorted into the decode part may read a block that a prefill of this same step fills (two equal
        # prompts admitted together: the second hits the first one's blocks).
        self.backend.store_kv(k[n:], v[n:], k_cache, v_cache, prefill.slot_mapping, prefill_plan, **kv_scales)
        return torch.cat((
            self._attend(q[:n], k[:n], v[:n], k_cache, v_cache, decode, decode_plan, scale, kv_scales),
            self._prefill(q[n:], k_cache, v_cache, prefill, prefill_plan, scale, kv_scales)))

    def _attend(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, plan, scale: float,
                kv_scales: dict) -> torch.Tensor:
        if meta.is_decode:  # store every token's K/V, then attend: one call
            return self.backend.store_and_decode(q, k, v, k_cache, v_cache, meta.slot_mapping,
                                                 meta.block_tables, meta.context_lens, scale, plan,
                                                 **kv_scales)
        self.backend.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, plan, **kv_scales)
        return self._prefill(q, k_cache, v_cache, meta, plan, scale, kv_scales)

    def _prefill(self, q, k_cache, v_cache, meta: AttentionMetadata, plan, scale: float,
                 kv_scales: dict) -> torch.Tensor:
        return self.backend.prefill(q, k_cache, v_cache, meta.block_tables, meta.context_lens,
                                    meta.query_start_loc, scale, plan, max_query_len=meta.max_query_len,
                                    **kv_scales)

    def prepare(self, meta: AttentionMetadata, k_cache, v_cache) -> list:
        """Check the step's tensors and build the backend's plan of it: [(metadata, StepPlan)], one part,
        or the decodes and the prefills. The first layer that sees ``meta`` calls this (a caller may do it
        earlier); the others reuse the result."""
        parts = self._plans.get(meta)
        if parts is not None:
            return [(meta if m is None else m, plan) for m, plan in parts]
        if self.backend is None:
            self._choose(k_cache, v_cache, None, meta.sliding_window)
        checks.check_step(k_cache, v_cache, meta.slot_mapping, meta.block_tables, meta.context_lens,
                          None if meta.is_decode else meta.query_start_loc, meta.max_query_len,
                          meta.sliding_window)
        num_seqs = meta.block_tables.shape[0]
        split = self.backend.uses_plan and 0 < meta.num_decodes < num_seqs
        pieces = split_decodes_and_prefills(meta) if split else (meta,)
        block_size = k_cache.shape[1]
        parts = [(m, self.backend.plan(m.block_tables, m.context_lens, m.slot_mapping, block_size,
                                       None if m.is_decode else m.query_start_loc, m.max_context_len,
                                       m.max_query_len, m.sliding_window)) for m in pieces]
        # (None for ``meta`` itself: a value that held its weak key would keep every step's plan for ever)
        self._plans[meta] = [(None if m is meta else m, plan) for m, plan in parts]
        return parts


def split_decodes_and_prefills(meta: AttentionMetadata) -> tuple[AttentionMetadata, AttentionMetadata]:
    """A mixed step's metadata as (its ``num_decodes`` decodes, its prefills): views of its tensors. The
    query tokens [0, n) are the decodes' (one each), so the prefills' query_start_loc starts at n."""
    n = meta.num_decodes
    decode = AttentionMetadata(
        meta.slot_mapping[:n], meta.block_tables[:n], meta.context_lens[:n], meta.query_start_loc[:n + 1],
        is_decode=True, max_query_len=1, max_context_len=int(meta.context_lens[:n].max()), num_decodes=n,
        sliding_window=meta.sliding_window)
    prefill = AttentionMetadata(
        meta.slot_mapping[n:], meta.block_tables[n:], meta.context_lens[n:], meta.query_start_loc[n:] - n,
        is_decode=False, max_query_len=meta.max_query_len, max_context_len=int(meta.context_lens[n:].max()),
        sliding_window=meta.sliding_window)
    return decode, prefill
