"""simulate(): run the real Scheduler and allocator over a workload, with no model.

Each step calls ``schedule()``, pretends the forward ran, and feeds ``update()`` synthetic sampled
token ids (a pure function of the request and the position, so prefix caching behaves as it
would on real text: requests share only what their prompts share). Records one timeline row per
step and one row per request.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from paged_lab import _interrupts as interrupts
from paged_lab._checks import check_int
from paged_lab.memory import BlockManager
from paged_lab.memory.allocator import KVCacheAllocator
from paged_lab.memory.offload import CPUOffloadingManager, OffloadingConnector
from paged_lab.sched.scheduler import RequestTooLargeError, Scheduler
from paged_lab.sched.sequence import Sequence, SequenceStatus
from paged_lab.sched.tiered import TieredScheduler
from paged_lab.sim.latency import latency_summary, token_gaps
from paged_lab.sim.workloads import Request, Workload

TIMELINE_COLUMNS = ("step", "running", "waiting", "swapped", "kv_usage", "used_slots", "reserved_slots",
                    "utilization", "internal_frag", "external_frag", "preempted", "prefill_tokens",
                    "decode_tokens", "finished")


_TOKEN_BASE = 1 << 40  # above every prompt token id of the workloads


def synthetic_token(seq_index: int, position: int) -> int:
    """The 'sampled' token of request ``seq_index`` at ``position`` (unique per pair)."""
    return _TOKEN_BASE + (seq_index << 20) + position


@dataclass
class Span:
    """Request ``name`` sat at window ``window`` for steps ``start..end`` (both included).
    ``outcome``: "finished", "preempted" (recompute: its KV is dropped) or "swapped"."""

    name: str
    window: int
    start: int
    end: int
    outcome: str


class Chunk(NamedTuple):
    """Request ``name`` computed the KV of its positions ``start:end`` in step ``step`` (a prompt chunk
    when ``is_prefill``, else one decode token): one ``ScheduledSeq`` entry, as the timeline keeps it."""

    step: int
    name: str
    start: int
    end: int
    is_prefill: bool

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass
class SimResult:
    timeline: dict[str, list]  # column -> one value per step (TIMELINE_COLUMNS)
    requests: list[dict]  # one row per request (rejected ones too, with status "rejected")
    summary: dict
    spans: list[Span] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (name, error message)
    slot_maps: dict[int, list[tuple[str | None, bool]]] = field(default_factory=dict)
    num_slots: int = 0
    chunks: list[list[Chunk]] = field(default_factory=list)  # per step, in schedule order (record_chunks)

    @property
    def makespan(self) -> int:
        return self.summary["makespan"]

    def slot_map_at(self, step: int) -> list[tuple[str | None, bool]]:
        """The lockers during ``step`` (``record_slots=True``): ``(owner, holds_token)`` per slot."""
        if not self.slot_maps:
            raise ValueError("slot maps were not recorded: call simulate(..., record_slots=True)")
        if step not in self.slot_maps:
            raise ValueError(f"step must be in 0..{max(self.slot_maps)}, got {step!r}")
        return self.slot_maps[step]


def memory_stats(allocator: KVCacheAllocator) -> tuple[int, int, int]:
    """``(used_slots, reserved_slots, external_frag_slots)`` of either allocator.

    Paged: a block is reserved once it is in some block table; any free block fits any request,
    so external fragmentation is 0 by construction.
    """
    return allocator.used_slots, allocator.reserved_slots, allocator.external_fragmentation


def slot_map(allocator: KVCacheAllocator, names: Mapping) -> list[tuple[str | None, bool]]:
    """Owner name (or None) and 'holds a token' for every slot of the pool, for locker pictures.
    (A contiguous reservation is a block table of ``block_size`` 1: its slots, in a row.)"""
    bs = allocator.block_size
    out = [(None, False)] * (allocator.num_blocks * bs)
    for sid in allocator.seq_ids:
        n = allocator.num_tokens(sid)
        for i, b in enumerate(allocator.block_table(sid)):
            for k in range(bs):
                if out[b * bs + k][0] is None:  # a shared block is drawn under its first owner
                    out[b * bs + k] = (names.get(sid, str(sid)), i * bs + k < n)
    return out


def _make_scheduler(allocator, scheduler, kv_offloading_blocks: int | None = None) -> Scheduler:
    if isinstance(scheduler, Scheduler):
        if kv_offloading_blocks is not None:
            raise ValueError("kv_offloading_blocks: give the Scheduler you pass its connector instead")
        if allocator is not None and allocator is not scheduler.allocator:
            raise ValueError("allocator: pass it either alone or inside scheduler, not two different ones")
        sched = scheduler
    else:
        if allocator is None:
            raise ValueError("allocator must be a BlockManager or ContiguousAllocator, got None")
        if scheduler is None:
            scheduler = {}
        if not isinstance(scheduler, Mapping):
            raise TypeError("scheduler must be a Scheduler or a dict of its arguments, got "
                            f"{type(scheduler).__name__}")
        kwargs = {"max_num_seqs": 256, **scheduler}
        if kv_offloading_blocks is None:
            sched = Scheduler(allocator, **kwargs)
        else:  # a second tier of that many blocks (memory/offload/)
            tier = CPUOffloadingManager(check_int("kv_offloading_blocks", kv_offloading_blocks, minimum=1))
            connector = OffloadingConnector(tier, allocator.block_size)
            sched = TieredScheduler(allocator, connector=connector, **kwargs)
    if sched.has_unfinished() or sched.step_count or sched.allocator.seq_ids:
        raise ValueError("scheduler: simulate() needs a fresh Scheduler and an empty allocator")
    return sched


def simulate(workload: Workload | list[Request], allocator=None, scheduler=None, *,
             max_steps: int | None = None, record_slots: bool = False,
             record_chunks: bool = False, kv_offloading_blocks: int | None = None) -> SimResult:
    """Run ``workload`` through a Scheduler over ``allocator`` until every request finishes.

    ``allocator``: a fresh BlockManager (paged) or ContiguousAllocator (the old manager).
    ``scheduler``: a dict of Scheduler arguments (``max_num_seqs`` defaults to 256) or a fresh
    Scheduler on ``allocator``. Timeline rows show each step as its forward sees it (after
    ``schedule()``); the ``finished`` and token columns count what the step did. Requests that
    can never fit go to ``rejected``. ``record_slots`` keeps a slot map per step (small pools);
    ``record_chunks`` what each step computed, request by request (``SimResult.chunks``).
    Raises RuntimeError past ``max_steps`` (default: a bound only a deadlock reaches).

    A Ctrl-C (SIGINT, main thread) lets the step in progress finish, then raises KeyboardInterrupt
    (``paged_lab._interrupts``): the scheduler and the allocator are left whole, between two steps.

    ``kv_offloading_blocks``: a second tier in CPU memory of that many blocks (the engine's
    ``kv_offloading_size`` in GiB, counted in blocks: no model, no bytes), the engine's connector
    (``memory/offload/``); the summary then counts ``external_prefix_cache_queries`` / ``_hits``.

    Requests join the queue at their ``arrival_step``; the summary's latency (``ttft_steps_p90``, ``itl_...``,
    ``e2e_...``; p50/p90/p99, in steps) is defined in ``paged_lab.sim.latency``.
    """
    reqs = list(workload)
    sched = _make_scheduler(allocator, scheduler, kv_offloading_blocks)
    total_slots = sched.allocator.num_blocks * sched.allocator.block_size
    arrivals = deque(_sequences(reqs))  # (arrival step, Sequence), in arrival order
    max_steps = _default_max_steps(reqs) if max_steps is None else max_steps
    names = {seq.seq_id: seq.name for _, seq in arrivals}  # for slot maps
    token_base = [synthetic_token(r, 0) for r in range(len(reqs))]  # seq_id r's tokens: + position
    windows = _Windows(sched.max_num_seqs)
    steps, rejected, done, slot_maps, chunks = [], [], [], {}, []
    with interrupts.held():  # a Ctrl-C is raised between two steps, never inside one
        while arrivals or sched.has_unfinished():
            step = len(steps)  # one timeline row per step, idle steps included
            _check_within(max_steps, step, sched)
            with interrupts.atomic():
                _admit_arrivals(sched, arrivals, step, rejected)
                out = sched.schedule()
                windows.seat(out, step)
                # synthetic_token(seq_id, position) of each sampling entry (its last position is ``end``).
                sampled = [token_base[e.seq.seq_id] + e.end for e in out.sampling]
                forward_state = _forward_state(sched, total_slots)  # as this step's forward sees it
                if record_slots:
                    slot_maps[step] = slot_map(sched.allocator, names)
                if record_chunks:
                    chunks.append([Chunk(step, e.seq.name, e.start, e.end, e.is_prefill)
                                   for e in out.scheduled])
                finished = sched.update(out, sampled)
                windows.release(finished, step)
                done.extend(finished)
                steps.append((step, *forward_state, len(out.preempted), out.num_prefill_tokens,
                              out.num_decode_tokens, len(finished)))
    return _result(steps, done, rejected, sched, windows, slot_maps, total_slots, chunks)


def _result(steps, done, rejected, sched, windows, slot_maps, total_slots, chunks) -> SimResult:
    """The timeline columns, one row per request, and the summary (latency in steps included)."""
    cols = {c: list(column) for c, column in zip(TIMELINE_COLUMNS,
                                                 zip(*steps))} or {c: [] for c in TIMELINE_COLUMNS}
    rows = _request_rows(done, rejected)
    summary = _summary(cols, rows, sched)
    summary.update(latency_summary([s.ttft_steps for s in done], token_gaps(s.output_steps for s in done),
                                   [s.latency_steps for s in done], "steps"))
    return SimResult(cols, rows, summary, windows.spans, rejected, slot_maps, total_slots, chunks)


def _sequences(reqs: list[Request]) -> list[tuple[int, Sequence]]:
    """One Sequence per request (seq_id = its index; EOS ignored: outputs run to max_tokens)."""
    order = sorted(range(len(reqs)), key=lambda r: reqs[r].arrival_step)
    return [(reqs[r].arrival_step, Sequence(r, reqs[r].prompt_token_ids, reqs[r].max_tokens, None, True,
                                            reqs[r].arrival_step, name=reqs[r].name)) for r in order]


def _default_max_steps(reqs: list[Request]) -> int:
    """A bound no run reaches unless the scheduler deadlocks: every token computed twice, plus slack."""
    last = max((q.arrival_step for q in reqs), default=0)
    return last + 2 * sum(len(q.prompt_token_ids) + q.max_tokens for q in reqs) + 16


def _check_within(max_steps: int, step: int, sched: Scheduler) -> None:
    if step >= max_steps:
        raise RuntimeError(f"simulate did not finish within max_steps={max_steps} "
                           f"({sched.num_unfinished} requests unfinished)")


def _admit_arrivals(sched: Scheduler, arrivals: deque, step: int, rejected: list[tuple[str, str]]) -> None:
    """Queue every request whose arrival step has come."""
    while arrivals and arrivals[0][0] <= step:
        seq = arrivals.popleft()[1]
        try:
            sched.add_request(seq)
        except RequestTooLargeError as e:  # it could never fit: reported, the others go on
            rejected.append((seq.name, str(e)))


def _forward_state(sched: Scheduler, total_slots: int) -> tuple:
    """The timeline columns "running" .. "external_frag": who holds a window, what the pool holds."""
    used, reserved, ext = memory_stats(sched.allocator)
    return (len(sched.running), len(sched.waiting), len(sched.swapped), used / total_slots, used, reserved,
            used / reserved if reserved else 0.0, reserved - used, ext)


def _request_rows(done: list[Sequence], rejected: list[tuple[str, str]]) -> list[dict]:
    rows = [{"name": seq.name, "seq_id": seq.seq_id, "status": "finished",
             "arrival_step": seq.arrival_step, "first_scheduled_step": seq.first_scheduled_step,
             "first_token_step": seq.first_token_step, "finish_step": seq.finish_step,
             "latency_steps": seq.latency_steps, "ttft_steps": seq.ttft_steps,
             "prompt_tokens": seq.num_prompt_tokens,
             "output_tokens": seq.num_output_tokens, "max_tokens": seq.max_tokens,
             "preemptions": seq.num_preemptions, "finish_reason": seq.finish_reason,
             "output_steps": seq.output_steps}  # the step of each output token (shared, not copied)
            for seq in sorted(done, key=lambda s: s.seq_id)]
    return rows + [{"name": name, "status": "rejected", "error": msg} for name, msg in rejected]


class _Windows:
    """The windows story: which window each running request sits at, and the spans it leaves."""

    def __init__(self, num_windows: int):
        self.free = list(range(num_windows))  # a heap: the lowest free window is taken first
        self.next_extra = num_windows  # forked children may overflow the windows
        self.held: dict = {}  # seq_id -> (window, first step there)
        self.spans: list[Span] = []

    def seat(self, out, step: int) -> None:
        """After ``schedule()``: preempted requests leave; newcomers take the lowest free windows."""
        for seq in out.preempted:
            if seq.seq_id in self.held:
                self._leave(seq, step - 1, "swapped" if seq.status is SequenceStatus.SWAPPED else "preempted")
        # Newcomers (admitted or swapped back in) are scheduled after every sequence that was
        # already running, so they are the tail of the list that holds no window yet.
        first_new = len(out.scheduled)
        while first_new and out.scheduled[first_new - 1].seq.seq_id not in self.held:
            first_new -= 1
        for entry in out.scheduled[first_new:]:
            if self.free:
                window = heapq.heappop(self.free)
            else:
                window, self.next_extra = self.next_extra, self.next_extra + 1
            self.held[entry.seq.seq_id] = (window, step)

    def release(self, finished: list[Sequence], step: int) -> None:
        for seq in finished:
            self._leave(seq, step, "finished")

    def _leave(self, seq: Sequence, last_step: int, outcome: str) -> None:
        window, first_step = self.held.pop(seq.seq_id)
        self.spans.append(Span(seq.name, window, first_step, last_step, outcome))
        heapq.heappush(self.free, window)


def _summary(cols: dict, rows: list[dict], sched: Scheduler) -> dict:
    lat = np.array([r["latency_steps"] for r in rows if r["status"] == "finished"], dtype=float)
    makespan = len(cols["step"])
    out_tokens = sum(r["output_tokens"] for r in rows if r["status"] == "finished")
    used, reserved = sum(cols["used_slots"]), sum(cols["reserved_slots"])
    return {
        "allocator": type(sched.allocator).__name__, "mode": sched.mode, "preemption": sched.preemption,
        "max_num_seqs": sched.max_num_seqs, "num_finished": len(lat),
        "num_rejected": sum(1 for r in rows if r["status"] == "rejected"),
        "makespan": makespan, "output_tokens": out_tokens,
        "tokens_per_step": out_tokens / makespan if makespan else 0.0,
        "mean_latency": float(lat.mean()) if len(lat) else 0.0,
        "p95_latency": float(np.percentile(lat, 95)) if len(lat) else 0.0,
        "num_preemptions": sched.num_preemptions,
        "blocks_swapped": sched.swap_space.num_blocks_moved,  # out + in
        **_tier_summary(getattr(sched, "connector", None)),
        "prefill_tokens": sum(cols["prefill_tokens"]),  # prompt tokens computed (cache hits skipped)
        "peak_running": max(cols["running"], default=0),
        # Over the whole run: slots holding tokens / slots reserved (time-weighted).
        "utilization": used / reserved if reserved else 0.0,
        "mean_kv_usage": float(np.mean(cols["kv_usage"])) if makespan else 0.0,
        "peak_kv_usage": max(cols["kv_usage"], default=0.0),
    }


def paged(num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = False,
          record_events: bool = False) -> BlockManager:
    """A BlockManager for simulations (no event log by default: that is what costs the time)."""
    return BlockManager(num_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                        record_events=record_events)


def _tier_summary(connector) -> dict:
    """A second tier's counts (vLLM's metric names), or nothing without one."""
    if connector is None:
        return {}
    return {"external_prefix_cache_queries": connector.external_prefix_cache_queries,
            "external_prefix_cache_hits": connector.external_prefix_cache_hits,
            "tier_loaded_blocks": connector.num_loaded_blocks,
            "tier_stored_blocks": connector.num_stored_blocks}
