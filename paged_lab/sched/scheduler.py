"""Scheduler: which sequences run this step, and what each one computes (notebook 05).

One step is one round of the windows story: every running sequence computes some tokens and, when it
reaches its last token, samples one more. The same Scheduler drives ``simulate()`` (no model) and the
engine. ``schedule()`` takes three steps, in this order (vLLM V1's ``Scheduler.schedule`` in
``vllm/v1/core/sched/scheduler.py``, nano-vllm's ``scheduler.py``):

1. **Running sequences, oldest first**, each its next tokens: a chunk of its prefill, or the token it
   sampled last step. They need slots first; when no block is free, the *most recently admitted*
   running sequence is preempted (possibly the one asking), so the oldest always progresses: no deadlock.
2. **Swapped sequences** come back (``preemption="swap"``) before anyone new is admitted.
3. **Waiting sequences, first come first served**, each only when its whole prompt fits, prefix-cache
   hits counted ("放得下才讓人進"); the head that does not fit blocks those behind it. Static batching
   admits only once the previous batch has finished; nobody is admitted in a step that had to preempt.

``allocation="v1"`` (vLLM V1's ``KVCacheManager.allocate_slots``) allocates blocks only for the tokens
computed so far plus this step's, so a prompt chunked by the token budget takes its blocks chunk by chunk;
``"whole_prompt"`` (the paper, vLLM V0) allocates the whole prompt at admission. Preemption by
``"recompute"`` drops the blocks and queues the sequence at the front, to be prefilled again; ``"swap"``
copies its blocks to a CPU pool and back (``out.swap_out``/``swap_in``; recompute when the CPU pool is
full or the sequence is still in its prefill). The engine's calls between steps (``finish``,
``abort_all``, ``fork``) are in ``control.py``; a second KV tier's admission (notebook 09) in ``tiered.py``.
"""

from __future__ import annotations

import sys
from collections import deque

from paged_lab._checks import check_int
from paged_lab.memory.allocator import KVCacheAllocator
from paged_lab.memory.errors import OutOfBlocks
from paged_lab.sched.control import RequestControl
from paged_lab.sched.output import ScheduledSeq, SchedulerOutput
from paged_lab.sched.sequence import Sequence, SequenceStatus
from paged_lab.sched.swap import CpuSwapSpace

MODES = ("continuous", "static")
PREEMPTION = ("recompute", "swap")
ALLOCATION = ("v1", "whole_prompt")
RUNNING, WAITING, SWAPPED = SequenceStatus.RUNNING, SequenceStatus.WAITING, SequenceStatus.SWAPPED


class RequestTooLargeError(ValueError):
    """The request can never fit in the pool, even alone; it is rejected, the others go on."""


class Scheduler(RequestControl):
    """Waiting / running / swapped queues over one ``allocator`` (a KVCacheAllocator: the paged
    BlockManager or the ContiguousAllocator; the Scheduler never asks which).

    ``max_num_seqs`` is the number of windows; ``max_num_batched_tokens`` (optional) caps the tokens
    computed per step, which splits long prompts into chunks (chunked prefill).
    """

    def __init__(self, allocator: KVCacheAllocator, max_num_seqs: int, mode: str = "continuous",
                 preemption: str = "recompute", max_num_batched_tokens: int | None = None,
                 num_cpu_blocks: int | None = None, allocation: str = "v1"):
        if allocator is None:
            raise ValueError("allocator must be a BlockManager or ContiguousAllocator, got None")
        for name, value, choices in (("mode", mode, MODES), ("preemption", preemption, PREEMPTION),
                                     ("allocation", allocation, ALLOCATION)):
            if value not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {value!r}")
        if preemption == "swap" and not getattr(allocator, "swappable", True):
            raise ValueError(f"preemption='swap' copies one block table per sequence to the CPU; "
                             f"{type(allocator).__name__} keeps one per layer group: use 'recompute'")
        self.max_num_seqs = check_int("max_num_seqs", max_num_seqs, minimum=1)
        self.max_num_batched_tokens = None if max_num_batched_tokens is None else check_int(
            "max_num_batched_tokens", max_num_batched_tokens, minimum=1)
        self.allocator, self.mode, self.preemption, self.allocation = allocator, mode, preemption, allocation
        self.block_size, self.num_blocks = allocator.block_size, allocator.num_blocks
        self.max_slots_per_seq = allocator.max_slots_per_seq  # the whole pool, or one reservation
        # "whole_prompt": a window group also holds a whole prompt's blocks at admission (a shorter limit)
        self.max_prompt_slots = (getattr(allocator, "max_whole_prompt_slots", self.max_slots_per_seq)
                                 if allocation == "whole_prompt" else self.max_slots_per_seq)
        self.num_cpu_blocks = self.num_blocks if num_cpu_blocks is None else check_int(
            "num_cpu_blocks", num_cpu_blocks, minimum=0)
        self.swap_space = CpuSwapSpace(self.num_cpu_blocks)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order (the last is preempted first)
        self.swapped: deque[Sequence] = deque()
        self.step_count = self.num_preemptions = 0
        self._live: dict = {}  # seq_id -> every sequence added and not finished yet
        self._last_out: SchedulerOutput | None = None  # what update() must be given next

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
        """The pool-fit rule (the engine checks requests with it too): what keeps a request from ever fitting,
        even alone, in the slots one sequence holds: "prompt_token_ids" when the prompt is longer,
        "max_tokens" when prompt + max_tokens - 1 is (the last sampled token is never stored); else None."""
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
        return bool(self.num_unfinished)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    # -- one step --------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Decide this step's work: the module docstring's three steps, in order."""
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
        """Step 1: every running sequence, oldest first, while the token budget lasts (the rest keep their
        blocks and wait). Returns the budget left. Preemption pops victims off the end of ``running`` (never
        one already scheduled), so this loop stops earlier, and what is left in ``running`` runs."""
        for seq in self.running:
            if budget <= 0:
                break
            num_new = self._num_new_tokens(seq, budget)
            if self._reserve_slots(seq, num_new, out):
                budget -= self._schedule_tokens(seq, num_new, out)
        return budget

    def _num_new_tokens(self, seq: Sequence, budget: int) -> int:
        """What ``seq`` computes this step: its prefill's next chunk, or its token sampled last step (and
        the draft tokens after it: speculative decoding, ``engine/spec_decode``)."""
        return min(len(seq.token_ids) + len(seq.spec_token_ids) - seq.num_computed_tokens, budget)

    def _reserve_slots(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> bool:
        """Slots for the next ``num_new`` tokens of ``seq`` that have none yet (a decode's token sampled last
        step; a prefill's next chunk). While no block is free, preempt the newest running sequence (``seq``
        itself when it is the newest left, so the oldest always progresses). False: ``seq`` was preempted."""
        end = seq.num_computed_tokens + num_new
        new_tokens = seq.token_ids[self.allocator.num_tokens(seq.seq_id):end]
        drafts = end - len(seq.token_ids)  # draft positions get slots, not tokens (vLLM: lookahead)
        # A window group first gives back the blocks before its window (vLLM: in allocate_slots; full: none)
        self.allocator.remove_skipped_blocks(seq.seq_id, seq.num_computed_tokens)
        while True:
            try:
                cow = self.allocator.append_tokens(seq.seq_id, new_tokens, drafts if drafts > 0 else 0)
            except OutOfBlocks:  # nothing changed (every allocator operation is all-or-nothing)
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is seq:
                    return False
            else:
                if cow is not None:  # its last block was shared: the engine copies it before the forward
                    out.cow_copies.append((cow.src, cow.dst))
                return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        """Take ``seq``'s blocks: swap them to the CPU pool when that is the mode and they fit,
        else drop them and queue ``seq`` at the front to be prefilled again (recompute)."""
        seq.num_preemptions += 1
        self.num_preemptions += 1
        seq.spec_token_ids = []  # its drafts are dropped (as vLLM's _preempt_request)
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
            self._reserve_slots(seq, 1, out)  # the token sampled before the swap (can_allocate counted it)
            out.scheduled.append(ScheduledSeq(seq, len(seq) - 1, len(seq), False))
            budget -= 1
        return budget

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        """Step 3: waiting sequences, first come first served, while windows and budget last."""
        while self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            if not self._allocate_prompt(seq, budget):
                break  # first come, first served: nobody overtakes the head
            self.waiting.popleft()
            self._start_running(seq, out)
            budget -= self._schedule_tokens(seq, self._num_new_tokens(seq, budget), out)

    def _allocate_prompt(self, seq: Sequence, budget: int) -> bool:
        """Blocks for a waiting ``seq``, or False (nothing changed) when it must wait. ``allocation="v1"``:
        blocks for its prefix-cache hit and the at most ``budget`` tokens it computes this step."""
        # The whole sequence must fit, its prefix-cache hits counted (vLLM V1: allocate_slots with
        # full_sequence_must_fit); a recomputed sequence prefills its outputs too.
        if not self.allocator.can_allocate(seq.token_ids):
            return False
        # It fits, yet this step's own blocks may not: a window group's admission count is capped, and a
        # prefix hit can bring it below one chunk's blocks (vLLM: allocate_slots returns None, and
        # nobody is admitted). The prompt length tells a window group which blocks to cache.
        try:
            self.allocator.allocate(seq.seq_id, seq.token_ids, num_tokens_to_cache=0,
                                    max_new_tokens=budget if self.allocation == "v1" else None,
                                    num_prompt_tokens=seq.num_prompt_tokens)
        except OutOfBlocks:  # (nothing changed)
            return False
        return True

    def _start_running(self, seq: Sequence, out: SchedulerOutput) -> None:
        """``seq`` was admitted: its prefill starts after its prefix-cache hit."""
        seq.num_computed_tokens = self.allocator.num_cached_tokens(seq.seq_id)
        seq.num_prefill_tokens = len(seq)  # after a recompute preemption: its outputs too
        seq.status = RUNNING
        if seq.first_scheduled_step is None:
            seq.first_scheduled_step = out.step
        self.running.append(seq)

    def _schedule_tokens(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> int:
        """Compute ``seq``'s next ``num_new`` tokens this step (their slots exist). Returns ``num_new``.

        The full blocks they complete join the prefix cache now: their KV is stored this step, before
        any layer attends, so a request admitted later in this same step may share them. Blocks past
        them are not offered yet: if ``seq`` is preempted before computing them, no other request can
        find a block that holds no KV (vLLM V1: ``KVCacheManager.cache_blocks``)."""
        start, n = seq.num_computed_tokens, len(seq.token_ids)
        end = start + num_new  # past n: draft positions (speculative decoding)
        spec = tuple(seq.spec_token_ids[:end - n]) if end > n else ()  # the drafts verified this step
        self.allocator.cache_blocks(seq.seq_id, end - len(spec))  # never a draft's block (as vLLM)
        if seq.spec_token_ids:  # (verified now, or dropped: as vLLM)
            seq.spec_token_ids = []
        out.scheduled.append(ScheduledSeq(seq, start, end, start < seq.num_prefill_tokens, end >= n, spec))
        return num_new

    # -- after the forward -----------------------------------------------------------------------
    def update(self, out: SchedulerOutput, sampled_token_ids) -> list[Sequence]:
        """Record this step: mark KV computed and append one sampled token per entry of ``out.sampling`` (in
        that order; an entry with drafts gets a list: its accepted drafts and one more token, its rejected
        drafts not counted as computed: vLLM's ``num_computed_tokens -= num_rejected``). Returns the
        sequences that finished this step."""
        if out is not self._last_out:  # (every check before any change)
            raise ValueError("out: update() takes the SchedulerOutput of the latest schedule() call, once")
        sampled, sampling = list(sampled_token_ids), out.sampling
        if len(sampled) != len(sampling):
            raise ValueError(f"sampled_token_ids: got {len(sampled)} ids for {len(sampling)} sequences "
                             f"that sample this step (out.sampling)")
        self._last_out = None
        for entry in out.scheduled:
            if entry.seq.status is RUNNING:  # (the engine may have finished it since schedule())
                entry.seq.num_computed_tokens = entry.end
        finished = [entry.seq for entry, tokens in zip(sampling, sampled)
                    if entry.seq.status is RUNNING and self._append_sampled(entry, tokens, out.step)]
        if finished:
            self.running = [s for s in self.running if s.status is RUNNING]
        return finished

    def _append_sampled(self, entry: ScheduledSeq, token, step: int) -> bool:
        """Append ``token`` to ``entry``'s sequence; finish it on EOS or at ``max_tokens``: True then. A list
        (its drafts verified): its rejected drafts no longer count as computed; append the rest in turn."""
        seq = entry.seq
        if isinstance(token, list):
            seq.num_computed_tokens -= len(entry.spec_token_ids) + 1 - len(token)
            return any(self._append_sampled(entry, t, step) for t in token)
        seq.append_token(token, step)
        stop = not seq.ignore_eos and token == seq.eos_token_id
        if stop or seq.num_output_tokens >= seq.max_tokens:
            self._finish(seq, "stop" if stop else "length", step)
            return True
        return False

    def _finish(self, seq: Sequence, reason: str, step: int) -> None:
        """Give back ``seq``'s blocks (GPU and CPU) and mark it finished."""
        if seq.seq_id in self.allocator:
            self.allocator.free(seq.seq_id)
        self.swap_space.release(seq.seq_id)
        seq.status, seq.finish_reason, seq.finish_step = SequenceStatus.FINISHED, reason, step
        self._live.pop(seq.seq_id, None)
