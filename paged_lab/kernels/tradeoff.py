"""The block-size trade-off in numbers: table size and lookups against waste in the last block.

A sequence of ``n`` tokens in blocks of ``B`` slots needs ``ceil(n / B)`` table entries (one lookup
each in the kernel's loop) and leaves ``ceil(n / B) * B - n`` slots of its last block empty. Small
blocks waste little but make long tables and many small, scattered reads; big blocks make short
tables and long contiguous reads but waste up to ``B - 1`` slots per sequence (on average about
``B / 2``) — memory that could have held other requests.

The one home of these numbers: notebooks 03 and 06, the quiz of 06 and ``viz.kernels``' figures read
them from :func:`block_size_cost`; ``tests/test_kernels_reference.py`` holds it to what the real
``BlockManager`` allocates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paged_lab.kv_math import cdiv


@dataclass(frozen=True)
class BlockSizeCost:
    block_size: int
    num_seqs: int
    tokens: int  # sum of context lengths
    table_entries: int  # blocks in use = block-table entries = lookups per attention pass
    wasted_slots: int  # empty slots in the sequences' last blocks

    @property
    def slots(self) -> int:
        return self.table_entries * self.block_size

    @property
    def waste_frac(self) -> float:
        """Share of the allocated slots that hold no token."""
        return self.wasted_slots / self.slots if self.slots else 0.0

    @property
    def lookups_per_seq(self) -> float:
        return self.table_entries / self.num_seqs if self.num_seqs else 0.0


def block_size_cost(context_lens: Sequence[int], block_size: int) -> BlockSizeCost:
    """Table entries and last-block waste of sequences with ``context_lens`` tokens in blocks of
    ``block_size``."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if any(n < 0 for n in context_lens):
        raise ValueError(f"context_lens must be >= 0, got min {min(context_lens)}")
    entries = sum(cdiv(n, block_size) for n in context_lens)
    tokens = sum(context_lens)
    return BlockSizeCost(block_size, len(context_lens), tokens, entries, entries * block_size - tokens)
