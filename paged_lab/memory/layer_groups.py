"""Layer groups: which of a model's layers share one block table (vLLM: a ``KVCacheGroupSpec`` each).

A model whose layers all attend to every token has one group. gpt-oss alternates full-attention layers
with sliding-window ones: two kinds, so (at least) two groups, and the HybridBlockManager
(``memory/hybrid.py``) keeps one block table per group over one shared pool. vLLM gives every group the
same number of layers, so that one pool block holds one page of each layer of a group; this module splits a
model's ``layer_types`` the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paged_lab._checks import check_int
from paged_lab.kv_math import ModelSpec, cdiv, layer_group_split
from paged_lab.memory.errors import InvalidBlockConfig

__all__ = ["KVCacheGroup", "kv_cache_groups", "group_layers", "model_kv_cache_groups"]


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers that share one block table: ``num_layers`` layers of full attention (``sliding_window``
    None) or of a window of the last ``sliding_window`` tokens (vLLM: ``FullAttentionSpec`` /
    ``SlidingWindowSpec`` in ``vllm/v1/kv_cache_interface.py``)."""

    name: str
    num_layers: int
    sliding_window: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise InvalidBlockConfig(f"name: a KVCacheGroup needs a non-empty name, got {self.name!r}")
        check_int("num_layers", self.num_layers, minimum=1, error=InvalidBlockConfig)
        if self.sliding_window is not None:
            check_int("sliding_window", self.sliding_window, minimum=1, error=InvalidBlockConfig)

    def num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens the next token no longer reads (vLLM's ``get_num_skipped_tokens``): none for
        full attention; for a window of W, all but the last W - 1 computed tokens."""
        if self.sliding_window is None:
            return 0
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def blocks_for_hit(self, block_size: int) -> int | None:
        """Cached blocks in a row that a prefix hit needs in this group (vLLM's
        ``_contiguous_blocks_for_hit``): for a window of W, the blocks holding the W - 1 tokens before the
        hit point, cdiv(W - 1, block_size); full attention needs every block (None)."""
        return None if self.sliding_window is None else cdiv(self.sliding_window - 1, block_size)


def kv_cache_groups(layer_types: Sequence[str], sliding_window: int | None = None) -> list[KVCacheGroup]:
    """Split a model's layers into layer groups as vLLM does (``_get_kv_cache_groups_uniform_page_size`` in
    ``vllm/v1/core/kv_cache_utils.py``): every group has the same number of layers, because one pool block
    holds one page of each layer of a group. ``layer_types``: per layer, ``"full_attention"`` or
    ``"sliding_attention"`` (Hugging Face's ``config.layer_types``). The group size is the smallest type's
    layer count (the largest when no type has 1.5x the smallest); a type splits into interleaved groups,
    its last one padded (vLLM pads it with unused layers).

    >>> [(g.name, g.num_layers) for g in kv_cache_groups(["sliding_attention", "full_attention"] * 12, 128)]
    [('full_attention', 12), ('sliding_attention', 12)]
    """
    _check_layer_types(layer_types)
    kinds = {"full_attention": None, "sliding_attention": sliding_window}
    by_type: dict[str, int] = {}
    for i, t in enumerate(layer_types):
        if t not in kinds:
            raise InvalidBlockConfig(f"layer_types[{i}]: must be one of {list(kinds)}, got {t!r}")
        by_type[t] = by_type.get(t, 0) + 1
    if not by_type:
        raise InvalidBlockConfig("layer_types: needs at least one layer, got none")
    if "sliding_attention" in by_type and sliding_window is None:
        raise InvalidBlockConfig("sliding_window: layer_types has sliding_attention layers: give it")
    size, per_kind = layer_group_split(by_type)  # (kv_math: the arithmetic alone)
    groups = []
    for t in kinds:  # full attention first (vLLM sorts it first for its cache-hit search too)
        n = per_kind.get(t, 0)
        groups += [KVCacheGroup(t if n == 1 else f"{t}.{i}", size, kinds[t]) for i in range(n)]
    return groups


def group_layers(layer_types: Sequence[str], groups: Sequence[KVCacheGroup]) -> dict[str, list[int]]:
    """The layers each group of ``kv_cache_groups(layer_types, ...)`` holds, as vLLM assigns them: the
    layers of one type in order, dealt round-robin over that type's groups (``layers[i::num_groups]`` in
    ``_get_kv_cache_groups_uniform_page_size``), so a group may hold fewer than ``num_layers`` (padding).

    >>> groups = kv_cache_groups(["sliding_attention", "full_attention"] * 2, 4)
    >>> group_layers(["sliding_attention", "full_attention"] * 2, groups)
    {'full_attention': [1, 3], 'sliding_attention': [0, 2]}
    """
    _check_layer_types(layer_types)
    by_kind: dict[str, list[KVCacheGroup]] = {}
    for g in groups:
        kind = "full_attention" if g.sliding_window is None else "sliding_attention"
        by_kind.setdefault(kind, []).append(g)
    layers: dict[str, list[int]] = {g.name: [] for g in groups}
    for kind, kind_groups in by_kind.items():
        of_kind = [i for i, t in enumerate(layer_types) if t == kind]
        for j, g in enumerate(kind_groups):
            layers[g.name] = of_kind[j::len(kind_groups)]
    wrong = [g.name for g in groups if not 1 <= len(layers[g.name]) <= g.num_layers]
    if wrong or sorted(i for held in layers.values() for i in held) != list(range(len(layer_types))):
        raise InvalidBlockConfig(f"groups: {[g.name for g in groups]} are not kv_cache_groups(layer_types) "
                                 f"of these {len(layer_types)} layer_types"
                                 + (f" (no layer, or more than num_layers, for {wrong})" if wrong else ""))
    return layers


def _check_layer_types(layer_types) -> None:
    """A list of per-layer names, not one name: "full_attention" alone would be read letter by letter."""
    if isinstance(layer_types, (str, bytes)) or not isinstance(layer_types, Sequence):
        raise InvalidBlockConfig(f"layer_types: must be a list with one type per layer, such as "
                                 f"['full_attention'] * 4, got {layer_types!r}")


def model_kv_cache_groups(spec: ModelSpec) -> list[KVCacheGroup]:
    """``kv_cache_groups`` of a catalogue model: one group of every layer when all attend to every token.
    gemma-3-27b's 52 sliding and 10 full layers make seven groups of 10 layers: the full one, and six
    sliding ones, 60 places for 52 layers, so 8 padding layers (vLLM logs "Add 8 padding layers, may waste
    at most 15.38% KV cache memory")."""
    layer_types = spec.layer_types or ("full_attention",) * spec.num_layers
    return kv_cache_groups(layer_types, spec.sliding_window or None)

