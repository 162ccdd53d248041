"""One step's model input: every scheduled query token in one flat batch, with the attention metadata
the kernels read (phase 1 of ``LLM.step``, ``prepare_batch``).

A step's sequences are laid end to end: a decode contributes its one new token, a prefill (or a chunk of
one) its uncomputed prompt tokens. ``query_start_loc`` says where each sequence's queries start, the slot
mapping where each token's K/V goes, and each sequence's block table and context length where its
attention reads. vLLM V1 builds the same tensors in ``GPUModelRunner._prepare_inputs``
(``vllm/v1/worker/gpu_model_runner.py``:1920), after ``_may_reorder_batch`` (:1101) has put the decodes
first where the attention backend asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paged_lab.engine.attention import AttentionMetadata
from paged_lab.engine.kv_groups import LayerGroups
from paged_lab.sched import Sequence


@dataclass
class Batch:
    """One step's model input: the query tokens of every scheduled sequence, concatenated, one-token
    queries (decodes) first. num_tokens = sum of query lengths; num_seqs = len(scheduled)."""

    scheduled: list  # [num_seqs] ScheduledSeq, in batch order
    input_ids: torch.Tensor  # int64 [num_tokens]
    positions: torch.Tensor  # int64 [num_tokens]: each token's position in its sequence
    meta: AttentionMetadata | list  # slot_mapping [num_tokens], block_tables [num_seqs, max_blocks], ...;
    # layer groups: one per layer (each its group's)
    sample_rows: list[int]  # [num_sampled]: the row of each sampled sequence's last query token
    sample_seqs: list[Sequence]  # [num_sampled]: the sequence each of those rows samples for

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]


def decodes_first(scheduled):
    """The batch order of one step's ``ScheduledSeq`` entries: one-token queries (decodes) first, then
    prefills and chunks, each group in schedule order (a stable sort)."""
    return sorted(scheduled, key=lambda s: s.num_tokens > 1)


def prepare_batch(scheduled, block_manager, groups: LayerGroups, device: torch.device) -> Batch:
    """The flat batch of one step's ``scheduled`` entries: query tokens, their positions and slots, and
    per sequence its block table and context length (layer groups: slots and tables per group, from
    ``block_manager``). One-token queries (decodes) go first, so that a mixed step can attend them apart
    (``llama.PagedAttention``)."""
    scheduled = decodes_first(scheduled)
    input_ids, positions, ctx_lens, qsl = [], [], [], [0]
    slots, tables = {g: [] for g in groups.layers}, {g: [] for g in groups.layers}  # group -> ...
    sample_rows, sample_seqs = [], []
    for s in scheduled:
        seq = s.seq
        input_ids += seq.token_ids[s.start:s.end]
        positions += range(s.start, s.end)
        for g, group_slots in groups.slots(block_manager, seq.seq_id, s.start, s.end).items():
            slots[g] += group_slots
        for g, table in groups.tables(block_manager, seq.seq_id).items():
            tables[g].append(table)
        ctx_lens.append(s.end)
        qsl.append(qsl[-1] + s.num_tokens)
        if s.samples:  # every known token computed -> sample the next one from the last position
            sample_rows.append(qsl[-1] - 1)
            sample_seqs.append(seq)
    n_decode = sum(1 for s in scheduled if s.num_tokens == 1)
    metas = {g.name: attention_metadata(slots[g.name], tables[g.name], ctx_lens, qsl, n_decode, device,
                                        g.sliding_window) for g in groups.groups}
    meta = [metas[g] for g in groups.group_of_layer] if groups.hybrid else metas[groups.groups[0].name]
    return Batch(scheduled, torch.tensor(input_ids, dtype=torch.long, device=device),
                 torch.tensor(positions, dtype=torch.long, device=device), meta, sample_rows, sample_seqs)


def attention_metadata(slots, tables, ctx_lens, qsl, num_decodes: int, device: torch.device,
                       sliding_window: int | None = None) -> AttentionMetadata:
    """The attention tensors of a batch (its first ``num_decodes`` sequences have one query token) for
    the layers of one group (``sliding_window``: theirs)."""
    width = max(len(t) for t in tables)
    q_lens = [b - a for a, b in zip(qsl, qsl[1:])]
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),  # [num_tokens]
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32,
                                  device=device),  # [num_seqs, width], padded with block 0 (never read);
        # a window group's NULL_BLOCK entries lie before every query's window (never read either)
        context_lens=torch.tensor(ctx_lens, dtype=torch.int32, device=device),  # [num_seqs]
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),  # [num_seqs + 1]
        is_decode=qsl[-1] == len(tables), max_query_len=max(q_lens), max_context_len=max(ctx_lens),
        num_decodes=num_decodes, sliding_window=sliding_window,
    )
