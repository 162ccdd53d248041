"""The engine's layer groups: which layers share a block table, and which KV tensor each layer uses.

A model whose layers all attend to the whole context has one group of every layer: one BlockManager,
one block table per sequence, one KV tensor per layer. A model with sliding-window layers
(``config.layer_types`` holds ``"sliding_attention"``) is split as vLLM splits it
(``memory.layer_groups.kv_cache_groups``): the Scheduler then drives a ``HybridBlockManager`` (one table per
group over one pool), every step has one ``AttentionMetadata`` per group (its own block tables and
slot mapping; vLLM builds one per KV cache group too, ``_build_attention_metadata`` in
``vllm/v1/worker/gpu_model_runner.py``), each layer attends with its group's, and the pool holds one
tensor per layer position in a group (``engine.kv_cache``).
"""

from __future__ import annotations

from dataclasses import dataclass

from paged_lab.kv_math import ModelSpec
from paged_lab.memory import BlockManager
from paged_lab.memory.block_pool import NULL_BLOCK
from paged_lab.memory.block_tables import slot_for
from paged_lab.memory.hybrid import HybridBlockManager
from paged_lab.memory.layer_groups import KVCacheGroup, group_layers, kv_cache_groups


@dataclass(frozen=True)
class LayerGroups:
    """The layer groups of one model: ``groups`` (full attention first), ``layers[name]``: the layers of
    each group, in order. ``hybrid``: more than one group (a HybridBlockManager keeps the tables)."""

    groups: tuple[KVCacheGroup, ...]
    layers: dict[str, list[int]]

    @classmethod
    def of(cls, spec: ModelSpec) -> LayerGroups:
        types = spec.layer_types or ("full_attention",) * spec.num_layers
        groups = tuple(kv_cache_groups(types, spec.sliding_window or None))
        return cls(groups, group_layers(types, groups))

    @property
    def hybrid(self) -> bool:
        return len(self.groups) > 1

    @property
    def group_of_layer(self) -> list[str]:
        """Per layer, the name of its group."""
        owner = {i: name for name, layers in self.layers.items() for i in layers}
        return [owner[i] for i in range(len(owner))]

    @property
    def layer_tensor(self) -> list[int]:
        """Per layer, the KV tensor it uses: its position in its group (the i-th layers of all groups
        share tensor i; ``KVCache(layer_tensor=...)``)."""
        position = {i: p for layers in self.layers.values() for p, i in enumerate(layers)}
        return [position[i] for i in range(len(position))]

    @property
    def layers_per_block(self) -> int:
        """The pages one block id costs: the group size (every group has as many layers)."""
        return self.groups[0].num_layers

    @property
    def sliding_window(self) -> int | None:
        """The window of the model's window layers, None when it has none."""
        return next((g.sliding_window for g in self.groups if g.sliding_window is not None), None)

    def block_manager(self, num_blocks: int, block_size: int, enable_prefix_caching: bool,
                      max_num_batched_tokens: int | None):
        """The allocator the Scheduler drives: a BlockManager for one group, else a HybridBlockManager
        (which caps a window group's admission by one step's token budget, as vLLM does)."""
        if not self.hybrid:
            return BlockManager(num_blocks, block_size, enable_prefix_caching)
        return HybridBlockManager(num_blocks, block_size, self.groups, enable_prefix_caching,
                                  max_num_batched_tokens=max_num_batched_tokens)

    def tables(self, bm, seq_id) -> dict[str, list[int]]:
        """Each group's block table of ``seq_id`` (NULL_BLOCK where a window group gave a block back)."""
        if not self.hybrid:
            return {self.groups[0].name: bm.block_table(seq_id)}
        return bm.block_tables(seq_id)

    def slots(self, bm, seq_id, start: int, end: int) -> dict[str, list[int]]:
        """Each group's slot of every position in ``[start, end)`` of ``seq_id``."""
        if not self.hybrid:  # (positions past the tokens are drafts: their slots exist, ``spec_decode``)
            n = bm.num_tokens(seq_id)
            table = bm.block_table(seq_id) if end > n else []
            drafts = [slot_for(p, table, bm.block_size) for p in range(max(start, n), end)]
            return {self.groups[0].name: bm.slot_mapping(seq_id, start, min(end, n)) + drafts}
        return {name: m.slot_mapping(seq_id, start, end) for name, m in bm.managers.items()}

    def blocks_held(self, bm) -> dict[str, int]:
        """Real blocks each group holds now, over every live sequence (one group: the pool's used blocks)."""
        if not self.hybrid:
            return {self.groups[0].name: bm.num_used_blocks}
        # (group by group: right even when an exception cut an allocation between two groups)
        return {name: sum(b != NULL_BLOCK for s in m.seq_ids for b in m.block_table(s))
                for name, m in bm.managers.items()}
