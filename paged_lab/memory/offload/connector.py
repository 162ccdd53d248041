"""The Scheduler's side of the second tier: which blocks a request offers for storing, how a lookup at
admission counts hits, and the transfers each step asks the engine to run. No model, no KV: the same
object runs inside ``simulate()`` and the engine (which copies the K/V: ``memory/offload/worker.py``).

It follows vLLM V1's ``OffloadingConnectorScheduler``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``), one full-attention group:

* **Stored as computed, not on eviction.** Every step, each scheduled request offers the full blocks of
  its *prompt* that this step completes (``_build_store_jobs``: ``num_computed_tokens + scheduled``,
  ``offload_prompt_only = True`` by default); hashes already in the tier are not copied again. The copy
  runs after the forward, and a stored block becomes readable one step later (vLLM's worker defers
  stores to the next step's ``start_kv_transfers``). So the tier already holds a block when the GPU
  prefix cache evicts it: vLLM writes through, it does not move blocks out on eviction.
* **Looked up after the GPU prefix cache** (``get_num_new_matched_tokens``): from the end of the local
  hit, consecutive tier hits, whole blocks, up to every token of the request (the Scheduler recomputes
  the last one). A block still being written makes the request wait a step.
* **Loaded asynchronously**: blocks are allocated for the hit, the request waits for its load
  (vLLM's ``WAITING_FOR_REMOTE_KVS``) and is scheduled from the next step on, the loaded blocks then
  joining the GPU prefix cache (``Scheduler._update_waiting_for_remote_kv``).
* Counted as vLLM's ``external_prefix_cache_queries`` (tokens not hit locally) and
  ``external_prefix_cache_hits`` (tokens found in the tier), for requests never preempted.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from paged_lab.memory.offload.manager import CPUOffloadingManager, LookupResult
from paged_lab.memory.prefix_cache import block_hashes, find_cached_prefix


def _local_hit(allocator, token_ids: list[int]) -> int:
    """Tokens of ``token_ids`` the GPU prefix cache holds (what ``allocate`` would hit; nothing changes)."""
    if not allocator.enable_prefix_caching:
        return 0
    hits, _ = find_cached_prefix(allocator.pool.cached, token_ids, allocator.block_size)
    return len(hits) * allocator.block_size


def blocks_to_load(num_tokens: int, block_size: int, gpu_hit_blocks: int, in_tier) -> list[int]:
    """Which blocks of a request a tier hit loads: after its ``gpu_hit_blocks`` blocks found in the GPU prefix
    cache, the *consecutive* full blocks whose hash the tier holds (``in_tier[i]``: block i's), up to the
    request's last full block; the first block the tier lacks ends the hit (vLLM:
    ``OffloadingConnectorScheduler._maximal_prefix_lookup`` up to ``num_tokens // block_size`` blocks).

    >>> blocks_to_load(30, 4, 2, [True, True, True, True, False, True, True])
    [2, 3]
    """
    loaded = []
    for i in range(gpu_hit_blocks, num_tokens // block_size):
        if not in_tier[i]:
            break
        loaded.append(i)
    return loaded


@dataclass
class Transfer:
    """One copy between the paged pool and the tier: ``gpu_block_ids[i]`` <-> ``tier_block_ids[i]``."""

    job_id: int
    req_id: Hashable
    keys: list[bytes]
    gpu_block_ids: list[int]
    tier_block_ids: list[int]
    is_store: bool
    before_forward: bool = False  # a finished request's store: its freed blocks may be rewritten this step


@dataclass
class OffloadMeta:
    """This step's transfers (vLLM's ``OffloadingConnectorMetadata``). The engine runs the stores of
    finished requests and the loads before the forward, the other stores after it."""

    loads: list[Transfer] = field(default_factory=list)
    stores: list[Transfer] = field(default_factory=list)


@dataclass
class _Request:
    seq: object  # a sched.Sequence
    keys: list[bytes] = field(default_factory=list)  # the hash of every full block of its tokens
    block_ids: list[int] = field(default_factory=list)  # its GPU block table, as of its last step
    next_stored: int = 0  # blocks before this one were offered already
    num_local: int = 0  # its GPU prefix-cache hit, in tokens
    num_external: int = 0  # its tier hit, in tokens (loaded at admission)
    loading: Transfer | None = None
    jobs: set[int] = field(default_factory=set)  # its transfers in flight (a new lookup waits for them)
    finished: bool = False


class OffloadingConnector:
    """Tier hits and store decisions for one Scheduler over a ``block_size`` pool."""

    def __init__(self, manager: CPUOffloadingManager, block_size: int):
        self.manager, self.block_size = manager, block_size
        self._reqs: dict[Hashable, _Request] = {}
        self._finished: list[Hashable] = []  # finished since the last step: offered once more, then dropped
        self._job_counter = 0
        self._stores_in_flight: list[Transfer] = []
        self._new_loads: list[Transfer] = []  # planned this step
        self._being_loaded: set[bytes] = set()  # keys a load in flight reads (vLLM: _chunks_being_loaded)
        self.external_prefix_cache_queries = 0
        self.external_prefix_cache_hits = 0
        self.num_loaded_blocks = self.num_stored_blocks = 0

    def _state(self, seq) -> _Request:
        r = self._reqs.setdefault(seq.seq_id, _Request(seq))
        r.seq = seq
        if len(r.keys) < len(seq.token_ids) // self.block_size:  # (vLLM: update_offload_keys)
            r.keys = block_hashes(seq.token_ids, self.block_size)
        return r

    # -- admission (the Scheduler's two calls) ----------------------------------------------------
    def admission(self, seq, allocator) -> int | None:
        """``seq`` heads a queue: the tokens to load from the tier after its GPU prefix hit (0: none), or
        None to skip it this step. A sequence holding blocks for a finished load is made ready: the loaded
        blocks join the GPU prefix cache, and a hit on every token gives the last one back to compute
        (vLLM: ``Scheduler._update_waiting_for_remote_kv``)."""
        if seq.seq_id in allocator:
            if not self.load_finished(seq):
                return None
            allocator.cache_blocks(seq.seq_id, seq.num_computed_tokens)
            seq.num_computed_tokens = min(seq.num_computed_tokens, len(seq.token_ids) - 1)
            return 0
        return self.get_num_new_matched_tokens(seq, _local_hit(allocator, seq.token_ids))

    def after_alloc(self, seq, allocator, num_external: int) -> None:
        """``seq`` got its blocks: plan its load, count the lookup (vLLM: ``update_state_after_alloc``,
        then ``connector_prefix_cache_stats.record``)."""
        local = allocator.num_cached_tokens(seq.seq_id)
        if num_external:
            seq.num_computed_tokens = local + num_external
        self.update_state_after_alloc(seq, allocator.block_table(seq.seq_id), num_external)
        self.record(len(seq.token_ids) - local, num_external, seq.num_preemptions > 0)

    def get_num_new_matched_tokens(self, seq, num_local: int) -> int | None:
        """Tokens past the local hit ``num_local`` that the tier holds (whole blocks, consecutive);
        None when one of them is still being written (the request waits a step)."""
        r = self._state(seq)
        r.num_local = num_local
        if r.jobs:  # a transfer of its own still in flight
            return None
        found = [self.manager.lookup(key) for key in r.keys]
        hits = blocks_to_load(len(seq.token_ids), self.block_size, num_local // self.block_size,
                              [f is not LookupResult.MISS for f in found])
        if any(found[i] is LookupResult.PENDING or r.keys[i] in self._being_loaded for i in hits):
            return None  # still being written, or loaded for another request: wait a step
        return len(hits) * self.block_size

    def update_state_after_alloc(self, seq, block_table: list[int], num_external: int) -> None:
        """Plan the load of the ``num_external`` tokens after the local hit into ``block_table``."""
        if num_external == 0:
            return
        r = self._state(seq)
        r.num_external = num_external
        first, end = r.num_local // self.block_size, (r.num_local + num_external) // self.block_size
        keys = r.keys[first:end]
        positions = [(i + 1) * self.block_size for i in range(first, end)]
        tier_ids = self.manager.prepare_load(keys, seq.seq_id, positions)
        r.loading = self._job(r, keys, block_table[first:end], tier_ids, is_store=False)
        self._new_loads.append(r.loading)
        self._being_loaded.update(keys)
        r.next_stored = end  # the loaded blocks are in the tier already

    def record(self, num_queries: int, num_hits: int, preempted: bool) -> None:
        """vLLM's ``connector_prefix_cache_stats.record``: a preempted request counts elsewhere."""
        if not preempted and num_queries:
            self.external_prefix_cache_queries += num_queries
            self.external_prefix_cache_hits += num_hits

    def num_external_tokens(self, seq_id) -> int:
        """The tokens of ``seq_id``'s latest admission that came from the tier (vLLM adds them to the
        request's ``num_cached_tokens``: ``PrefillStats.set``)."""
        r = self._reqs.get(seq_id)
        return 0 if r is None else r.num_external

    def load_finished(self, seq) -> bool:
        r = self._reqs.get(seq.seq_id)
        return r is None or r.loading is None

    # -- each step ---------------------------------------------------------------------------------
    def build_connector_meta(self, scheduled, allocator) -> OffloadMeta:
        """This step's transfers: the loads planned at admission, and the stores of every full prompt
        block the ``scheduled`` entries (and the requests finished last step) complete, not offered before."""
        meta, self._new_loads = OffloadMeta(loads=self._new_loads), []
        for entry in scheduled:
            r = self._state(entry.seq)
            r.block_ids = allocator.block_table(entry.seq.seq_id)
            self._offer(r, entry.end, meta)
        for req_id in self._finished:
            r = self._reqs.pop(req_id)
            seq = r.seq
            done = seq.num_computed_tokens if seq.finish_reason == "abort" else max(
                seq.num_prompt_tokens, len(seq.token_ids) - 1)
            self._offer(r, done, meta, before_forward=True)
            self.manager.on_request_finished(req_id)
        self._finished = []
        return meta

    def _offer(self, r: _Request, num_tokens_after_step: int, meta: OffloadMeta,
               before_forward: bool = False) -> None:
        seq = r.seq
        offloadable = min(num_tokens_after_step, len(seq.token_ids), seq.num_prompt_tokens)
        end = min(offloadable // self.block_size, len(r.block_ids), len(r.keys))
        if end <= r.next_stored:
            return
        keys = r.keys[r.next_stored:end]
        positions = [(i + 1) * self.block_size for i in range(r.next_stored, end)]
        decision = self.manager.prepare_store(keys, seq.seq_id, positions)
        if decision is None:  # the tier has too few idle blocks: offered again next step
            return
        if decision.keys:
            index = {k: i for i, k in enumerate(r.keys[r.next_stored:end], r.next_stored)}
            gpu = [r.block_ids[index[k]] for k in decision.keys]
            meta.stores.append(self._job(r, decision.keys, gpu, decision.tier_block_ids, True))
            meta.stores[-1].before_forward = before_forward
        r.next_stored = end

    def _job(self, r: _Request, keys, gpu_ids, tier_ids, is_store: bool) -> Transfer:
        job = Transfer(self._job_counter, r.seq.seq_id, list(keys), list(gpu_ids), list(tier_ids), is_store)
        self._job_counter += 1
        r.jobs.add(job.job_id)
        return job

    def update_connector_output(self, meta: OffloadMeta) -> None:
        """The worker's report after the step (ours finishes every transfer within the step that runs it):
        this step's loads, and the stores planned last step (run then, reported now, as vLLM's worker)."""
        for job in self._stores_in_flight:
            self.manager.complete_store(job.keys)
            self.num_stored_blocks += len(job.keys)
            self._done(job)
        self._stores_in_flight = list(meta.stores)
        for job in meta.loads:
            self.manager.complete_load(job.keys)
            self._being_loaded.difference_update(job.keys)
            self.num_loaded_blocks += len(job.keys)
            self._done(job)

    def _done(self, job: Transfer) -> None:
        r = self._reqs.get(job.req_id)
        if r is not None:
            r.jobs.discard(job.job_id)
            if r.loading is job:
                r.loading = None

    def request_finished(self, seq) -> None:
        """``seq`` finished (its GPU blocks are freed): its last offer is made at the next step."""
        r = self._reqs.get(seq.seq_id)
        if r is not None and not r.finished:
            r.finished = True
            self._finished.append(seq.seq_id)

    def flush(self) -> None:
        """Complete every transfer in flight (an engine between calls: its last step's stores are done)."""
        self.update_connector_output(OffloadMeta())

    def reset(self) -> None:
        """Forget every request and every tier block (an aborted call: nothing half-done survives)."""
        self._reqs.clear()
        self._finished, self._stores_in_flight, self._new_loads = [], [], []
        self._being_loaded.clear()
        self.manager.reset()
