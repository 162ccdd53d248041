"""Scheduler: which sequences run this step, and what each one computes.

One step is one round of the windows story: every running sequence computes some tokens and,
when it reaches its last token, samples one more. The same Scheduler drives ``simulate()`` (no
model) and the real engine.

Each ``schedule()`` call, in this order (vLLM v1 / nano-vllm style):

1. **Running sequences, oldest first.** Each computes its next tokens: the next chunk of its
   prefill, or (a decode) the token sampled last step. Those tokens need slots first
   (``append_tokens``). When no block is free (the allocator raises ``OutOfBlocks``), the *most
   recently admitted* running sequence is preempted (possibly the one asking), so the oldest always
   makes progress: no deadlock.
2. **Swapped sequences** come back (swap mode) before anyone new is admitted.
3. **Waiting sequences, first come first served.** A request is admitted only when its whole
   prompt fits, its prefix-cache hits counted ("放得下才讓人進"); the queue head that does not fit
   blocks those behind it. Static batching admits only when the previous batch has fully finished;
   continuous batching refills free windows every step. Nobody is admitted in a step that had to preempt.

Where a prompt's blocks come from (``allocation``):

* ``"v1"`` (default; vLLM V1, ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule`` and
  ``KVCacheManager.allocate_slots``): the whole prompt must *fit* to be admitted, but blocks are
  *allocated* only for the tokens computed so far plus those scheduled this step. A prompt chunked by
  the token budget takes its blocks chunk by chunk, and may preempt others for them.
* ``"whole_prompt"`` (the PagedAttention paper, vLLM V0): admission reserves blocks for the whole
  prompt at once; its later chunks never need a block.

Either way the full blocks a step computes join the prefix cache as that step is scheduled
(``cache_blocks``): never earlier, so no request can hit a block whose KV was never written.

Preemption: ``recompute`` (default) frees the blocks and puts the sequence back at the front of
the queue; its prompt *and* generated tokens are prefilled again later. ``swap`` copies its blocks
to a CPU pool (``out.swap_out``) and back (``out.swap_in``); it falls back to recompute when the
CPU pool is full or the sequence is still in its prefill.
"""

from __future__ import annotations

import sys
from collections import deque

from paged_lab._checks import check_int
from paged_lab.memory.allocator import KVCacheAllocator
from paged_lab.memory.errors import OutOfBlocks
from paged_lab.sched.output import ScheduledSeq, SchedulerOutput
from paged_lab.sched.sequence import Sequence, SequenceStatus
from paged_lab.sched.swap import CpuSwapSpace

MODES = ("continuous", "static")
PREEMPTION = ("recompute", "swap")
ALLOCATION = ("v1", "whole_prompt")
RUNNING, WAITING, SWAPPED = SequenceStatus.RUNNING, SequenceStatus.WAITING, SequenceStatus.SWAPPED


class RequestTooLargeError(ValueError):
    """The request can never fit in the pool, even alone; it is rejected, the others go on."""


class Scheduler:
    """Waiting / running / swapped queues over one ``allocator`` (a KVCacheAllocator: the paged
    BlockManager or the ContiguousAllocator; the Scheduler never asks which).

    ``max_num_seqs`` is the number of windows; ``max_num_batched_tokens`` (optional) caps the tokens
    computed per step, which splits long prompts into chunks (chunked prefill). ``allocation``: when a
    prompt's blocks are allocated (see the module docstring).
    """

    def __init__(self, allocator: KVCacheAllocator, max_num_seqs: int, mode: str = "continuous",
                 preemption: str = "recompute", max_num_batched_tokens: int | None = None,
                 num_cpu_blocks: int | None = None, allocation: str = "v1"):
        if allocator is None:
            raise ValueError("allocator must be a BlockManager or ContiguousAllocator, got None")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if preemption not in PREEMPTION:
            raise ValueError(f"preemption must be one of {PREEMPTION}, got {preemption!r}")
        if allocation not in ALLOCATION:
            raise ValueError(f"allocation must be one of {ALLOCATION}, got {allocation!r}")
        if preemption == "swap" and not getattr(allocator, "swappable", True):
            raise ValueError(f"preemption='swap' copies one block table per sequence to the CPU; "
                             f"{type(allocator).__name__} keeps one per layer group: use 'recompute'")
        self.allocation = allocation
        self.max_num_seqs = check_int("max_num_seqs", max_num_seqs, minimum=1)
        self.max_num_batched_tokens = None if max_num_batched_tokens is None else check_int(
            "max_num_batched_tokens", max_num_batched_tokens, minimum=1)
        self.allocator = allocator
        self.mode, self.preemption = mode, preemption
        self.block_size, self.num_blocks = allocator.block_size, allocator.num_blocks
        self.max_slots_per_seq = allocator.max_slots_per_seq  # the whole pool, or one reservation
        # "whole_prompt" allocates every block of a prompt at admission, so admission counts them all: a
        # window group's too (a HybridBlockManager's max_slots_per_seq counts its peak under a token budget)
        self.max_prompt_slots = (getattr(allocator, "max_whole_prompt_slots", self.max_slots_per_seq)
                                 if allocation == "whole_prompt" else self.max_slots_per_seq)
        self.num_cpu_blocks = self.num_blocks if num_cpu_blocks is None else check_int(
            "num_cpu_blocks", num_cpu_blocks, minimum=0)
        self.swap_space = CpuSwapSpace(self.num_cpu_blocks)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order (the last is preempted first)
        self.swapped: deque[Sequence] = deque()
        self.step_count = 0
        self.num_preemptions = 0
        self._live: dict = {}  # seq_id -> every sequence added and not finished yet
        self._last_out: SchedulerOutput | None = None

    # -- requests --------------------------------------------------------------------------------
    def add_request(self, seq: Sequence) -> None:
        """Queue ``seq``. Raises RequestTooLargeError when it could never fit, even alone."""
        if not isinstance(seq, Sequence):
            raise TypeError(f"seq must be a paged_lab.sched.Sequence, got {type(seq).__name__}")
        if seq.status is not WAITING or seq.num_computed_tokens:
            raise ValueError(f"seq {seq.seq_id!r} was already scheduled (status={seq.status.value})")
        if seq.seq_id in self._live:
            raise ValueError(f"seq_id={seq.seq_id!r} is already queued or running; pick a new id")
        self._check_fits(seq)
        self._live[seq.seq_id] = seq
        self.waiting.append(seq)

    def never_fits(self, num_prompt_tokens: int, max_tokens: int) -> str | None:
        """The pool-fit rule: the argument that keeps a request from ever fitting, even alone, in the
        slots one sequence can hold (``max_slots_per_seq``): "prompt_token_ids" when the prompt is
        longer, "max_tokens" when prompt + max_tokens - 1 is (``Sequence.max_num_slots``: the last
        sampled token is never stored); None when it fits. The engine checks requests with it too."""
        if num_prompt_tokens > self.max_prompt_slots:
            return "prompt_token_ids"
        if num_prompt_tokens + max_tokens - 1 > self.max_slots_per_seq:
            return "max_tokens"
        return None

    def _check_fits(self, seq: Sequence) -> None:
        n, cap = seq.num_prompt_tokens, self.max_slots_per_seq
        arg = self.never_fits(n, seq.max_tokens)
        if arg == "prompt_token_ids":
            whole = (", allocation='whole_prompt': every layer group allocates the whole prompt at admission"
                     if self.max_prompt_slots < cap else "")
            raise RequestTooLargeError(
                f"prompt_token_ids: seq {seq.seq_id!r} has {n} prompt tokens but at most "
                f"{self.max_prompt_slots} slots fit one prompt ({self.allocator.max_slots_per_seq_reason}"
                f"{whole}); it can never be admitted")
        if arg == "max_tokens":
            raise RequestTooLargeError(
                f"max_tokens: seq {seq.seq_id!r} needs up to {seq.max_num_slots} slots ({n} prompt + "
                f"max_tokens={seq.max_tokens} - 1) but at most {cap} fit one sequence; "
                f"lower max_tokens to <= {cap - n + 1} or enlarge the pool")

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    # -- one step --------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Decide this step's work (see the module docstring for the order)."""
        out = SchedulerOutput(self.step_count)
        self.step_count += 1
        self.allocator.clock = out.step
        budget = self.max_num_batched_tokens or sys.maxsize  # tokens this step may compute
        budget = self._schedule_running(out, budget)
        if not out.preempted:  # nobody is admitted in a step that had to preempt
            budget = self._swap_in(out, budget)
            static_batch_busy = self.mode == "static" and self.running  # its free windows stay idle
            if not self.swapped and not static_batch_busy:
                self._admit(out, budget)
        self._last_out = out
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Step 1: every running sequence, oldest first, while the token budget lasts (the rest
        keep their blocks and wait). Returns the budget left."""
        # Preemption pops victims off the end of ``running`` -- never one already scheduled -- so
        # this loop simply stops earlier, and what is left in ``running`` is the running set.
        for seq in self.running:
            if budget <= 0:
                break
            # a chunk of its prefill, or the one pending token (and its drafts: speculative decoding)
            num_new = min(len(seq.token_ids) + len(seq.spec_token_ids) - seq.num_computed_tokens, budget)
            if self._reserve_slots(seq, num_new, out):
                budget -= self._schedule_tokens(seq, num_new, out)
        return budget

    def _reserve_slots(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> bool:
        """Slots for the next ``num_new`` tokens of ``seq``: those that have none yet get one (a decode's
        token sampled last step; a chunk of a prefill allocated chunk by chunk). While no block is free,
        preempt the newest running sequence -- ``seq`` itself when it is the newest left, so the oldest
        always makes progress. Returns False when ``seq`` was preempted."""
        end = seq.num_computed_tokens + num_new
        new_tokens = seq.token_ids[self.allocator.num_tokens(seq.seq_id):end]
        drafts = end - len(seq.token_ids)  # draft positions get slots, not tokens (vLLM: in num_new_tokens)
        ahead = {"num_lookahead_tokens": drafts} if drafts > 0 else {}
        # A sliding-window layer group gives back the blocks before its window first, so this step can reuse
        # them (vLLM: ``remove_skipped_blocks`` in ``allocate_slots``; nothing happens for full attention).
        self.allocator.remove_skipped_blocks(seq.seq_id, seq.num_computed_tokens)
        while True:
            try:
                cow = self.allocator.append_tokens(seq.seq_id, new_tokens, **ahead)
            except OutOfBlocks:  # nothing changed (every allocator operation is all-or-nothing)
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is seq:
                    return False
            else:
                if cow is not None:  # its last block was shared: the engine copies it before the forward
                    out.cow_copies.append((cow.src, cow.dst))
                return True

    def _schedule_tokens(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> int:
        """Compute ``seq``'s next ``num_new`` tokens this step (their slots exist). Returns ``num_new``.

        The full blocks they complete join the prefix cache now: their KV is stored this step, before
        any layer attends, so a request admitted later in this same step may share them. Blocks past
        them are not offered yet: if ``seq`` is preempted before computing them, no other request can
        find a block that holds no KV (vLLM V1: ``KVCacheManager.cache_blocks``)."""
        start = seq.num_computed_tokens
        end = start + num_new
        self.allocator.cache_blocks(seq.seq_id, min(end, len(seq.token_ids)))  # never a draft (as vLLM)
        is_prefill, samples = start < seq.num_prefill_tokens, end >= len(seq.token_ids)
        spec, seq.spec_token_ids = seq.spec_token_ids[:max(0, end - len(seq.token_ids))], []  # (as vLLM)
        out.scheduled.append(ScheduledSeq(seq, start, end, is_prefill, samples, tuple(spec)))
        return num_new

    def _append_pending_token(self, seq: Sequence, out: SchedulerOutput) -> None:
        """Give the token sampled last step its slot (its block is copied first if shared)."""
        cow = self.allocator.append_tokens(seq.seq_id, [seq.token_ids[-1]])
        if cow is not None:
            out.cow_copies.append((cow.src, cow.dst))

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        """Step 3: waiting sequences, first come first served, while windows and budget last."""
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            # The whole sequence must fit, its prefix-cache hits counted (vLLM V1: allocate_slots with
            # full_sequence_must_fit); a recomputed sequence prefills its outputs too.
            if not self.allocator.can_allocate(seq.token_ids):
                break  # first come, first served: nobody overtakes the head
            slots_now = budget if self.allocation == "v1" else None  # v1: only what this step computes
            # It fits, yet this step's own blocks may not: a window group's admission count is capped, and a
            # prefix hit can bring it below one chunk's blocks (vLLM: allocate_slots returns None, and
            # nobody is admitted). The prompt length tells a window group which blocks to cache.
            try:
                self.allocator.allocate(seq.seq_id, seq.token_ids, num_tokens_to_cache=0,
                                        max_new_tokens=slots_now, num_prompt_tokens=seq.num_prompt_tokens)
            except OutOfBlocks:  # (nothing changed)
                break
            self.waiting.popleft()
            seq.num_computed_tokens = self.allocator.num_cached_tokens(seq.seq_id)  # prefix-cache hit
            seq.num_prefill_tokens = len(seq)
            seq.status = RUNNING
            if seq.first_scheduled_step is None:
                seq.first_scheduled_step = out.step
            self.running.append(seq)
            budget -= self._schedule_tokens(seq, min(len(seq) - seq.num_computed_tokens, budget), out)

    def _swap_in(self, out: SchedulerOutput, budget: int) -> int:
        """Step 2: swapped sequences come back, oldest first, and decode at once."""
        while self.swapped and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.swapped[0]
            if not self.allocator.can_allocate(seq.num_computed_tokens + 1):  # plus the pending token
                break
            self.swapped.popleft()
            table = self.allocator.allocate(seq.seq_id, seq.token_ids[:seq.num_computed_tokens])
            on_gpu = self.allocator.num_cached_tokens(seq.seq_id) // self.block_size  # prefix-cache hits
            out.swap_in.extend(self.swap_space.swap_in(seq.seq_id, table, on_gpu))
            seq.status = RUNNING
            self.running.append(seq)
            self._append_pending_token(seq, out)  # (it fits: can_allocate counted its slot)
            out.scheduled.append(ScheduledSeq(seq, len(seq) - 1, len(seq), False))
            budget -= 1
        return budget

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        """Take ``seq``'s blocks: swap them to the CPU pool when that is the mode and they fit,
        else drop them and queue ``seq`` at the front to be prefilled again (recompute)."""
        seq.num_preemptions += 1
        self.num_preemptions += 1
        out.preempted.append(seq)
        copies = None
        if self.preemption == "swap" and seq.num_computed_tokens >= seq.num_prefill_tokens:  # not mid-prefill
            copies = self.swap_space.swap_out(seq.seq_id, self.allocator.block_table(seq.seq_id))
        self.allocator.free(seq.seq_id)
        if copies is not None:  # its KV waits in the CPU pool
            out.swap_out.extend(copies)
            seq.status = SWAPPED
            self.swapped.appendleft(seq)  # victims go newest first, so older ones end up in front
        else:  # recompute: its KV is dropped, and computed again once it is readmitted
            seq.num_computed_tokens = seq.num_prefill_tokens = 0
            seq.status = WAITING
            self.waiting.appendleft(seq)

    # -- after the forward -----------------------------------------------------------------------
    def update(self, out: SchedulerOutput, sampled_token_ids) -> list[Sequence]:
        """Record this step: mark KV computed and append one sampled token per entry of
        ``out.sampling`` (in that order). Returns the sequences that finished this step.

        An entry with drafts (``spec_token_ids``) gets a list instead: its accepted drafts and one more
        token. Its rejected drafts do not count as computed (vLLM: num_computed_tokens -= num_rejected)."""
        sampling, sampled = self._accept_update(out, sampled_token_ids)
        for entry in out.scheduled:
            if entry.seq.status is RUNNING:  # (the engine may have finished it since schedule())
                entry.seq.num_computed_tokens = entry.end
        finished = []
        for entry, tokens in zip(sampling, sampled):
            tokens = tokens if isinstance(tokens, list) else [tokens]
            if entry.seq.status is RUNNING:
                entry.seq.num_computed_tokens -= len(entry.spec_token_ids) + 1 - len(tokens)  # the rejected
                if any(self._append_sampled(entry.seq, t, out.step) for t in tokens):  # (stops at a finish)
                    finished.append(entry.seq)
        if finished:
            self.running = [s for s in self.running if s.status is RUNNING]
        return finished

    def _accept_update(self, out: SchedulerOutput, sampled_token_ids) -> tuple[list[ScheduledSeq], list[int]]:
        """Check ``update``'s arguments (before any change). Returns ``(out.sampling, the ids)``."""
        if out is not self._last_out:
            raise ValueError("out: update() takes the SchedulerOutput of the latest schedule() call, once")
        sampled, sampling = list(sampled_token_ids), out.sampling
        if len(sampled) != len(sampling):
            raise ValueError(f"sampled_token_ids: got {len(sampled)} ids for {len(sampling)} sequences "
                             f"that sample this step (out.sampling)")
        self._last_out = None
        return sampling, sampled

    def _append_sampled(self, seq: Sequence, token: int, step: int) -> bool:
        """Append ``token`` to ``seq``; finish it on EOS or at ``max_tokens``. True when it finished."""
        seq.append_token(token, step)
        if not seq.ignore_eos and token == seq.eos_token_id:
            self._finish(seq, "stop", step)
        elif seq.num_output_tokens >= seq.max_tokens:
            self._finish(seq, "length", step)
        else:
            return False
        return True

    def _finish(self, seq: Sequence, reason: str, step: int) -> None:
        if seq.seq_id in self.allocator:
            self.allocator.free(seq.seq_id)
        self.swap_space.release(seq.seq_id)
        seq.status, seq.finish_reason, seq.finish_step = SequenceStatus.FINISHED, reason, step
        self._live.pop(seq.seq_id, None)

    def finish(self, seq: Sequence, reason: str = "stop") -> None:
        """Engine-side stop (a stop string, an abort): free its blocks and drop it from every queue."""
        if seq.status is SequenceStatus.FINISHED:
            raise ValueError(f"seq {seq.seq_id!r} is already finished ({seq.finish_reason})")
        if seq.seq_id not in self._live:
            raise KeyError(f"seq {seq.seq_id!r} was never added to this scheduler")
        for q in (self.waiting, self.swapped):
            if seq in q:
                q.remove(seq)
        self.running = [s for s in self.running if s is not seq]
        self._finish(seq, reason, max(self.step_count - 1, 0))

    def abort_all(self) -> list[Sequence]:
        """Abort every sequence at once: each unfinished one is finished with reason "abort", the queues are
        emptied and the allocator gives every slot back (``allocator.reset()``: a prefix cache is dropped
        too). Whatever an exception cut half-way in a step, the scheduler and its allocator end as new ones
        (the counters kept). Returns the aborted sequences."""
        step = max(self.step_count - 1, 0)
        aborted = [s for s in self._live.values() if s.status is not SequenceStatus.FINISHED]
        for seq in aborted:
            seq.status, seq.finish_reason, seq.finish_step = SequenceStatus.FINISHED, "abort", step
        self.waiting, self.running, self.swapped = deque(), [], deque()
        self._live, self._last_out = {}, None
        moved, self.swap_space = self.swap_space.num_blocks_moved, CpuSwapSpace(self.num_cpu_blocks)
        self.swap_space.num_blocks_moved = moved
        self.allocator.reset()
        return aborted

    def fork(self, parent: Sequence, child: Sequence, last_token_id: int | None = None) -> None:
        """Parallel sampling: ``child`` (a new Sequence with the same prompt) shares every block of
        the running ``parent``. ``last_token_id`` replaces the child's copy of the parent's newest
        sampled token (it has no KV yet, so the two may differ without a copy)."""
        if parent.status is not RUNNING or parent.num_computed_tokens < parent.num_prefill_tokens:
            raise ValueError(f"parent {parent.seq_id!r} must be running with its prefill done to fork "
                             f"(status={parent.status.value})")
        if child.status is not WAITING or child.seq_id in self._live:
            raise ValueError(f"child {child.seq_id!r} must be a new Sequence with an unused seq_id")
        if child.prompt_token_ids != parent.prompt_token_ids:
            raise ValueError(f"child {child.seq_id!r} must have the same prompt as parent {parent.seq_id!r}")
        self._check_fits(child)
        pending = parent.num_computed_tokens < len(parent)  # its newest token has no KV yet
        self.allocator.fork(parent.seq_id, child.seq_id)
        child.token_ids = list(parent.token_ids)
        if last_token_id is not None and pending:
            child.token_ids[-1] = last_token_id
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_prefill_tokens = parent.num_prefill_tokens
        child.first_scheduled_step, child.first_token_step = (parent.first_scheduled_step,
                                                              parent.first_token_step)
        child.output_steps = list(parent.output_steps)
        child.status = RUNNING
        self._live[child.seq_id] = child
        self.running.append(child)
