"""CpuSwapSpace: the CPU blocks that swap preemption copies a sequence's KV to (vLLM V0's swap space).

The scheduler only does the bookkeeping: it lists ``(gpu_block, cpu_block)`` copies in
``out.swap_out`` and ``(cpu_block, gpu_block)`` copies in ``out.swap_in``; the engine moves the data.
"""

from __future__ import annotations

from collections.abc import Hashable


class CpuSwapSpace:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.free = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.tables: dict[Hashable, list[int]] = {}  # seq_id -> CPU blocks holding its KV
        self.num_blocks_moved = 0  # blocks copied GPU -> CPU and back: swap preemption's cost

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def swap_out(self, seq_id, gpu_table: list[int]) -> list[tuple[int, int]] | None:
        """CPU blocks for every block of ``gpu_table``: the copies ``(gpu, cpu)``, or None when
        the swap space is too full (nothing changes then)."""
        if len(gpu_table) > len(self.free):
            return None
        cpu_table = self.tables[seq_id] = [self.free.pop() for _ in gpu_table]
        self.num_blocks_moved += len(gpu_table)
        return list(zip(gpu_table, cpu_table))

    def swap_in(self, seq_id, gpu_table: list[int], num_on_gpu: int) -> list[tuple[int, int]]:
        """The copies ``(cpu, gpu)`` that bring ``seq_id`` back into ``gpu_table``, skipping its first
        ``num_on_gpu`` blocks (prefix-cache hits are already there); its CPU blocks are freed."""
        cpu_table = self.tables[seq_id]
        self.release(seq_id)
        copies = list(zip(cpu_table[num_on_gpu:], gpu_table[num_on_gpu:]))
        self.num_blocks_moved += len(copies)
        return copies

    def release(self, seq_id) -> None:
        """Free ``seq_id``'s CPU blocks, if it has any."""
        if seq_id in self.tables:
            self.free.extend(reversed(self.tables.pop(seq_id)))
