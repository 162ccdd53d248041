"""Scheduler: which sequences run this step, and what each one computes.

One step is one round of the windows story: every running sequence computes some tokens and,
when it reaches its last token, samples one more. The same Scheduler drives ``simulate()`` (no
model) and the real engine.

Each ``schedule()`` call, in this order (vLLM v1 / nano-vllm style):

1. **Running sequences, oldest first.** A decode needs a slot for the token sampled last step
   (``append_token``). When no block is free, the *most recently admitted* running sequence is
   preempted (possibly the one asking), so the oldest always makes progress: no deadlock.
2. **Swapped sequences** come back (swap mode) before anyone new is admitted.
3. **Waiting sequences, first come first served.** A request is admitted only when its whole
   prompt fits ("放得下才讓人進"); the queue head that does not fit blocks those behind it.
   Static batching admits only when the previous batch has fully finished; continuous batching
   refills free windows every step. Nobody is admitted in a step that had to preempt.

Preemption: ``recompute`` (default) frees the blocks and puts the sequence back at the front of
the queue; its prompt *and* generated tokens are prefilled again later. ``swap`` copies its blocks
to a CPU pool (``out.swap_out``) and back (``out.swap_in``); it falls back to recompute when the
CPU pool is full or the sequence is still in its prefill.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import NamedTuple

from paged_lab.memory import errors as _memory_errors
from paged_lab.sched.sequence import Sequence, SequenceStatus

# The allocators signal "no free block" with this (all-or-nothing: nothing changed).
OutOfBlocks = getattr(_memory_errors, "OutOfBlocksError", None) or _memory_errors.OutOfBlocks
RUNNING = SequenceStatus.RUNNING

MODES = ("continuous", "static")
PREEMPTION = ("recompute", "swap")


class RequestTooLargeError(ValueError):
    """The request can never fit in the pool, even alone; it is rejected, the others go on."""


class ScheduledSeq(NamedTuple):
    """Compute the KV of ``seq.token_ids[start:end]`` this step."""

    seq: Sequence
    start: int
    end: int
    is_prefill: bool
    samples: bool = True  # end reaches the last token: sample one token from the last position

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass
class SchedulerOutput:
    """What one step computes. Engine order: swap_out, swap_in, cow_copies, then the forward."""

    step: int
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    cow_copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) block copies
    preempted: list[Sequence] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)  # (gpu_block, cpu_block)
    swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu_block, gpu_block)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.end - s.start for s in self.scheduled)

    # These two run every step of a simulation: the scan over all entries stays in C (map,
    # compress), Python only touches the few prefill entries.
    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.end - s.start for s in self.prefills)

    @property
    def num_decode_tokens(self) -> int:
        return len(self.scheduled) - len(self.prefills)

    @property
    def prefills(self) -> list[ScheduledSeq]:
        """The scheduled prefill (or prefill chunk) entries, in order."""
        return list(compress(self.scheduled, map(_is_prefill, self.scheduled)))

    @property
    def sampling(self) -> list[ScheduledSeq]:
        """The scheduled entries that sample a token, in the order ``update`` expects their ids."""
        return list(compress(self.scheduled, map(_samples, self.scheduled)))  # C loop: runs every step

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


_samples, _is_prefill = attrgetter("samples"), attrgetter("is_prefill")


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class Scheduler:
    """Waiting / running / swapped queues over one allocator (BlockManager or ContiguousAllocator).

    ``max_num_seqs`` is the number of windows; ``max_num_batched_tokens`` (optional) caps the tokens
    computed per step, which splits long prompts into chunks (chunked prefill).
    """

    def __init__(self, block_manager, max_num_seqs: int, mode: str = "continuous",
                 preemption: str = "recompute", max_num_batched_tokens: int | None = None,
                 num_cpu_blocks: int | None = None):
        if block_manager is None:
            raise ValueError("block_manager must be a BlockManager or ContiguousAllocator, got None")
        self.max_num_seqs = _check_int("max_num_seqs", max_num_seqs, 1)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if preemption not in PREEMPTION:
            raise ValueError(f"preemption must be one of {PREEMPTION}, got {preemption!r}")
        if max_num_batched_tokens is not None:
            _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
        self.block_manager = self.allocator = block_manager
        self.mode, self.preemption = mode, preemption
        self.max_num_batched_tokens = max_num_batched_tokens
        self.block_size = block_manager.block_size
        self.num_blocks = block_manager.num_blocks
        # The most KV slots one sequence can ever hold: the whole pool, or one reservation.
        self.max_slots_per_seq = getattr(block_manager, "max_seq_len", self.num_blocks * self.block_size)
        self.num_cpu_blocks = self.num_blocks if num_cpu_blocks is None else _check_int(
            "num_cpu_blocks", num_cpu_blocks, 0)
        self._cpu_free = list(range(self.num_cpu_blocks - 1, -1, -1))  # pop() hands out 0 first
        self._cpu_tables: dict = {}  # seq_id -> CPU blocks holding its swapped-out KV
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order (the last is preempted first)
        self.swapped: deque[Sequence] = deque()
        self.step_count = 0
        self.num_preemptions = 0
        self.num_finished = 0
        self._live_ids: set = set()
        self._last_out: SchedulerOutput | None = None

    # -- requests --------------------------------------------------------------------------------
    def add_request(self, seq: Sequence) -> None:
        """Queue ``seq``. Raises RequestTooLargeError when it could never fit, even alone."""
        if not isinstance(seq, Sequence):
            raise TypeError(f"seq must be a paged_lab.sched.Sequence, got {type(seq).__name__}")
        if seq.status is not SequenceStatus.WAITING or seq.num_computed_tokens:
            raise ValueError(f"seq {seq.seq_id!r} was already scheduled (status={seq.status.value})")
        if seq.seq_id in self._live_ids:
            raise ValueError(f"seq_id={seq.seq_id!r} is already queued or running; pick a new id")
        self._check_fits(seq)
        self._live_ids.add(seq.seq_id)
        self.waiting.append(seq)

    def _check_fits(self, seq: Sequence) -> None:
        n, cap = seq.num_prompt_tokens, self.max_slots_per_seq
        if n > cap:
            raise RequestTooLargeError(
                f"prompt_token_ids: seq {seq.seq_id!r} has {n} prompt tokens but at most {cap} slots "
                f"fit one sequence (num_blocks={self.num_blocks} x block_size={self.block_size}"
                + (f", max_seq_len={cap})" if hasattr(self.allocator, "max_seq_len") else ")")
                + "; it can never be admitted")
        if seq.max_num_slots > cap:
            raise RequestTooLargeError(
                f"max_tokens: seq {seq.seq_id!r} needs up to {seq.max_num_slots} slots ({n} prompt + "
                f"max_tokens={seq.max_tokens} - 1) but at most {cap} fit one sequence; "
                f"lower max_tokens to <= {cap - n + 1} or enlarge the pool")

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    @property
    def num_free_cpu_blocks(self) -> int:
        """Swap space left (blocks of the CPU pool that hold no swapped-out KV)."""
        return len(self._cpu_free)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    # -- one step --------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Decide this step's work (see the module docstring for the order)."""
        out = SchedulerOutput(self.step_count)
        self.step_count += 1
        self.allocator.clock = out.step
        # No cap: a budget no step can spend (an int, so the hot loop stays in int arithmetic).
        budget = self.max_num_batched_tokens or sys.maxsize
        budget = self._schedule_running(out, budget)
        if out.preempted:
            return self._done(out)
        if self.swapped:
            budget = self._swap_in(out, budget)
        if self.swapped or (self.mode == "static" and self.running):
            return self._done(out)  # static: the batch still runs, so its free windows stay idle
        self._admit(out, budget)
        return self._done(out)

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Step 1: every running sequence, oldest first, while the token budget lasts. Runs once
        per running sequence per step -- the hot loop of a simulation -- so it keeps lookups local.
        Returns the budget left."""
        append_token, add = self.allocator.append_token, out.scheduled.append
        new_entry = tuple.__new__  # ScheduledSeq without NamedTuple's argument parsing
        # Preemption pops victims off the end of ``running`` (newest first, never one already
        # scheduled), so whatever is left in it afterwards is exactly the running set.
        running = self.running  # oldest first
        for seq in running:  # (a list iterator simply stops earlier when victims are popped)
            if budget <= 0:  # out of token budget this step: the rest keep their blocks and wait
                break
            c = seq.num_computed_tokens
            if c < seq.prefill_end:  # a chunked prefill goes on; its slots exist since admission
                end = min(seq.prefill_end, c + budget)
                budget -= end - c
                add(ScheduledSeq(seq, c, end, True, end == len(seq.token_ids)))
                continue
            # Decode: the token sampled last step needs a slot before its KV is computed.
            # append_token is all-or-nothing, so trying it is the cheapest can_append.
            ids = seq.token_ids
            try:
                cow = append_token(seq.seq_id, ids[-1])
            except OutOfBlocks:
                cow = self._make_room(seq, out)
                if seq.status is not RUNNING:
                    continue
            if cow is not None:
                out.cow_copies.append((cow[0], cow[1]))
            n = len(ids)
            add(new_entry(ScheduledSeq, (seq, n - 1, n, False, True)))
            budget -= 1
        return budget

    def _make_room(self, seq: Sequence, out: SchedulerOutput):
        """Preempt the newest running sequences until ``seq`` gets its slot -- or ``seq`` itself,
        when it is the newest left. Victims are popped off the end of ``running``: everything
        after ``seq`` there is not scheduled yet this step."""
        while True:
            self._preempt(self.running.pop(), out)
            if seq.status is not RUNNING:
                return None
            try:
                return self.allocator.append_token(seq.seq_id, seq.token_ids[-1])
            except OutOfBlocks:
                continue

    def _done(self, out: SchedulerOutput) -> SchedulerOutput:
        self._last_out = out
        return out

    def _admit(self, out: SchedulerOutput, budget) -> None:
        alloc, running, waiting = self.allocator, self.running, self.waiting
        while waiting and len(running) < self.max_num_seqs and budget > 0:
            seq = waiting[0]
            n = len(seq.token_ids)  # a recomputed sequence prefills its outputs too
            if not alloc.can_allocate(n):
                break  # first come, first served: nobody overtakes the head
            waiting.popleft()
            alloc.allocate(seq.seq_id, seq.token_ids)
            c = alloc.num_cached_tokens(seq.seq_id)  # prefix-cache hit: skip those tokens
            seq.num_computed_tokens, seq.prefill_end = c, n
            end = min(n, c + budget)
            budget -= end - c
            seq.status = RUNNING
            if seq.first_scheduled_step is None:
                seq.first_scheduled_step = out.step
            out.scheduled.append(tuple.__new__(ScheduledSeq, (seq, c, end, True, end == n)))
            running.append(seq)

    def _swap_in(self, out: SchedulerOutput, budget):
        alloc = self.allocator
        while self.swapped and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.swapped[0]
            c = seq.num_computed_tokens
            if not alloc.can_allocate(c + 1):  # its slots, plus room for the pending token
                break
            self.swapped.popleft()
            table = alloc.allocate(seq.seq_id, seq.token_ids[:c])
            skip = alloc.num_cached_tokens(seq.seq_id) // self.block_size  # already on the GPU
            cpu = self._cpu_tables.pop(seq.seq_id)
            out.swap_in.extend(zip(cpu[skip:], table[skip:]))
            self._cpu_free.extend(reversed(cpu))
            cow = alloc.append_token(seq.seq_id, seq.token_ids[-1])
            if cow is not None:
                out.cow_copies.append((cow[0], cow[1]))
            seq.status = SequenceStatus.RUNNING
            n = len(seq.token_ids)
            out.scheduled.append(ScheduledSeq(seq, n - 1, n, False, True))
            budget -= 1
            self.running.append(seq)
        return budget

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        seq.num_preemptions += 1
        self.num_preemptions += 1
        out.preempted.append(seq)
        alloc, sid = self.allocator, seq.seq_id
        if self.preemption == "swap" and seq.num_computed_tokens >= seq.prefill_end:
            table = alloc.block_table(sid)
            if len(table) <= len(self._cpu_free):
                cpu = [self._cpu_free.pop() for _ in table]
                out.swap_out.extend(zip(table, cpu))
                self._cpu_tables[sid] = cpu
                alloc.free(sid)
                seq.status = SequenceStatus.SWAPPED
                self.swapped.appendleft(seq)  # victims go newest first, so older ones end up in front
                return
        alloc.free(sid)
        seq.num_computed_tokens = seq.prefill_end = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

    # -- after the forward -----------------------------------------------------------------------
    def update(self, out: SchedulerOutput, sampled_token_ids) -> list[Sequence]:
        """Record this step: mark KV computed and append one sampled token per entry of
        ``out.sampling`` (in that order). Returns the sequences that finished this step."""
        if out is not self._last_out:
            raise ValueError("out: update() takes the SchedulerOutput of the latest schedule() call, once")
        sampled = list(sampled_token_ids)
        num_sampling = len(out.sampling)
        if len(sampled) != num_sampling:
            raise ValueError(f"sampled_token_ids: got {len(sampled)} ids for {num_sampling} sequences "
                             f"that sample this step (out.sampling)")
        self._last_out = None
        finished, step = [], out.step
        if num_sampling != len(out.scheduled):  # some entries only continue a chunked prefill
            it = iter(sampled)
            sampled = [next(it) if s.samples else None for s in out.scheduled]
        # Once per sequence per step: keep it lean.
        for (seq, _, end, _, samples), token in zip(out.scheduled, sampled):
            if seq.status is not RUNNING:
                continue  # finished by the engine between schedule() and update()
            seq.num_computed_tokens = end
            if not samples:
                continue
            ids = seq.token_ids
            ids.append(token)
            if seq.first_token_step is None:
                seq.first_token_step = step
            if not seq.ignore_eos and token == seq.eos_token_id:
                self._finish(seq, "stop", step)
                finished.append(seq)
            elif len(ids) - seq.num_prompt_tokens >= seq.max_tokens:
                self._finish(seq, "length", step)
                finished.append(seq)
        if finished:
            self.running = [s for s in self.running if s.status is RUNNING]
        return finished

    def _finish(self, seq: Sequence, reason: str, step: int) -> None:
        if seq.seq_id in self.allocator:
            self.allocator.free(seq.seq_id)
        if seq.seq_id in self._cpu_tables:
            self._cpu_free.extend(reversed(self._cpu_tables.pop(seq.seq_id)))
        seq.status, seq.finish_reason, seq.finish_step = SequenceStatus.FINISHED, reason, step
        self._live_ids.discard(seq.seq_id)
        self.num_finished += 1

    def finish(self, seq: Sequence, reason: str = "stop") -> None:
        """Engine-side stop (a stop string, an abort): free its blocks and drop it from every queue."""
        if seq.status is SequenceStatus.FINISHED:
            raise ValueError(f"seq {seq.seq_id!r} is already finished ({seq.finish_reason})")
        if seq.seq_id not in self._live_ids:
            raise KeyError(f"seq {seq.seq_id!r} was never added to this scheduler")
        for q in (self.waiting, self.swapped):
            if seq in q:
                q.remove(seq)
        self.running = [s for s in self.running if s is not seq]
        self._finish(seq, reason, max(self.step_count - 1, 0))

    def fork(self, parent: Sequence, child: Sequence, last_token_id: int | None = None) -> None:
        """Parallel sampling: ``child`` (a new Sequence with the same prompt) shares every block of
        the running ``parent``. ``last_token_id`` replaces the child's copy of the parent's newest
        sampled token (it has no KV yet, so the two may differ without a copy)."""
        if parent.status is not SequenceStatus.RUNNING or parent.num_computed_tokens < parent.prefill_end:
            raise ValueError(f"parent {parent.seq_id!r} must be running with its prefill done to fork "
                             f"(status={parent.status.value})")
        if child.status is not SequenceStatus.WAITING or child.seq_id in self._live_ids:
            raise ValueError(f"child {child.seq_id!r} must be a new Sequence with an unused seq_id")
        if child.prompt_token_ids != parent.prompt_token_ids:
            raise ValueError(f"child {child.seq_id!r} must have the same prompt as parent {parent.seq_id!r}")
        self._check_fits(child)
        pending = parent.num_computed_tokens < len(parent.token_ids)
        self.allocator.fork(parent.seq_id, child.seq_id)
        child.token_ids = list(parent.token_ids)
        if last_token_id is not None and pending:
            child.token_ids[-1] = last_token_id
        child.num_computed_tokens, child.prefill_end = parent.num_computed_tokens, parent.prefill_end
        child.first_scheduled_step, child.first_token_step = parent.first_scheduled_step, parent.first_token_step
        child.status = SequenceStatus.RUNNING
        self._live_ids.add(child.seq_id)
        self.running.append(child)
