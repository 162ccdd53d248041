"""A model-free check that every KV read returns the KV of the right tokens.

A model's K and V at position ``p`` depend on every token up to ``p``. So this checker stands in for the
paged KV cache with *names*: each slot holds the name of the token prefix whose KV was stored there.
Replaying one scheduler step in the engine's order (``LLM.step`` and ``engine.attention.PagedAttention``):

1. the block copies: swap out, swap in, copy-on-write (the engine does them before the forward);
2. store: every scheduled token's name goes into its slot (every layer stores the whole step's K/V
   before it attends);
3. attend: every scheduled sequence reads positions ``[0, end)`` through its block table, and each slot
   must hold the name of that sequence's own prefix. Over a ``HybridBlockManager`` each layer group stores
   into and reads through its own table, a sliding-window group only the positions its window reaches
   (``[start - W + 1, end)``): a window's prefix-cache hit must bring exactly those.

A prefix-cache hit on a block whose KV was never computed, or was computed for other tokens, fails
step 3 with a :class:`StaleKVRead` that names the sequence, the position and the block. So does a
copy-on-write that was not done, or a slot that two live sequences write.

    checker = KVContentChecker(scheduler)
    while scheduler.has_unfinished():
        out = scheduler.schedule()
        checker.check_step(out)               # raises StaleKVRead on a wrong read
        scheduler.update(out, sampled_ids)
"""

from __future__ import annotations

from paged_lab.memory.block_pool import NULL_BLOCK
from paged_lab.memory.block_tables import slot_for
from paged_lab.memory.hybrid import HybridBlockManager


class StaleKVRead(AssertionError):
    """An attention read would return the KV of other tokens than the reader's own prefix."""


class KVContentChecker:
    """Names of what each KV slot holds, updated and checked step by step (see the module docstring).

    ``split_store``: replay a mixed step whose one-token queries store and attend *before* the longer
    queries store their K/V. The engine must not run a step that way (a one-token query may read a block
    that a prefill of the same step fills); the tests use it to show that this check catches it.
    """

    def __init__(self, scheduler, split_store: bool = False):
        self.scheduler = scheduler
        self.bm = scheduler.allocator
        self.block_size = self.bm.block_size
        self.split_store = split_store
        self.slots: dict[int, int] = {}  # GPU slot -> name of the prefix whose KV it holds
        self.cpu_blocks: dict[int, list[int | None]] = {}  # CPU block -> its slots' names (swap)
        self._names: dict[object, tuple[list[int], list[int]]] = {}  # seq_id -> (tokens, prefix names)
        self.reads = 0  # slots checked so far

    # -- names ---------------------------------------------------------------------------------
    def _prefix_names(self, seq) -> list[int]:
        """``names[p]``: the name of ``seq.token_ids[:p + 1]`` (a chained hash, extended as it grows)."""
        tokens, names = self._names.get(seq.seq_id, ([], []))
        ids = seq.token_ids
        keep = len(tokens)
        if ids[:keep] != tokens:  # a new sequence under an old id, or a fork that replaced a token
            keep = next(i for i, (a, b) in enumerate(zip(tokens, ids)) if a != b)
            del tokens[keep:], names[keep:]
        for p in range(keep, len(ids)):
            # (-1, not None, as the root: ints and tuples of ints hash the same in every run)
            names.append(hash((names[p - 1] if p else -1, ids[p])))
            tokens.append(ids[p])
        self._names[seq.seq_id] = (tokens, names)
        return names

    # -- one step ------------------------------------------------------------------------------
    def check_step(self, out) -> None:
        """Replay ``out`` (the SchedulerOutput just returned by ``schedule()``): copies, stores, reads."""
        self._copy_blocks(out)
        entries = list(out.scheduled)
        if self.split_store:
            parts = [[e for e in entries if e.num_tokens == 1], [e for e in entries if e.num_tokens != 1]]
        else:
            parts = [entries]
        for part in parts:
            for e in part:
                self._store(e)
            for e in part:
                self._attend(e)

    def _copy_blocks(self, out) -> None:
        bs = self.block_size
        for gpu, cpu in out.swap_out:
            self.cpu_blocks[cpu] = [self.slots.get(gpu * bs + i) for i in range(bs)]
        for cpu, gpu in out.swap_in:
            for i, name in enumerate(self.cpu_blocks[cpu]):
                self._put(gpu * bs + i, name)
        for src, dst in out.cow_copies:
            for i in range(bs):
                self._put(dst * bs + i, self.slots.get(src * bs + i))

    def _put(self, slot: int, name: int | None) -> None:
        if name is None:
            self.slots.pop(slot, None)
        else:
            self.slots[slot] = name

    def _tables(self, seq_id) -> list[tuple[list[int], int | None]]:
        """Each layer group's block table of ``seq_id`` and its window (None: full attention)."""
        if isinstance(self.bm, HybridBlockManager):
            windows = {g.name: g.sliding_window for g in self.bm.groups}
            return [(table, windows[name]) for name, table in self.bm.block_tables(seq_id).items()]
        return [(self.bm.block_table(seq_id), None)]

    def _store(self, entry) -> None:
        names = self._prefix_names(entry.seq)
        for table, _ in self._tables(entry.seq.seq_id):
            for p in range(entry.start, entry.end):
                self.slots[slot_for(p, table, self.block_size)] = names[p]

    def _attend(self, entry) -> None:
        seq = entry.seq
        names = self._prefix_names(seq)
        for table, window in self._tables(seq.seq_id):
            first = 0 if window is None else max(0, entry.start - window + 1)  # what the window reaches
            for p in range(first, entry.end):
                block = table[p // self.block_size]
                slot = slot_for(p, table, self.block_size)
                if block == NULL_BLOCK or self.slots.get(slot) != names[p]:
                    what = ("no block (NULL_BLOCK)" if block == NULL_BLOCK else
                            "nothing" if slot not in self.slots else "the KV of other tokens")
                    raise StaleKVRead(
                        f"step {self.scheduler.step_count - 1}: seq {seq.seq_id!r} attends position {p} in "
                        f"block {block} (slot {slot}), which holds {what}; its table is {table}, it computes "
                        f"[{entry.start}, {entry.end}) this step")
            self.reads += entry.end - first
