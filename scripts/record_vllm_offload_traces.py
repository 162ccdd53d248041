#!/usr/bin/env python3
"""Record what vLLM's native CPU KV offloading decides, without a model or a GPU: the oracle for
``paged_lab/memory/offload/``.

``CacheConfig(kv_offloading_size=GiB)`` makes ``VllmConfig`` start the ``OffloadingConnector``
(``vllm/config/vllm.py`` ``_post_init_kv_transfer_config``); its scheduler side
(``OffloadingConnectorScheduler`` + ``CPUOffloadingManager`` with the LRU policy) runs inside vLLM's V1
``Scheduler`` on this CPU. Only its worker (the copies) needs a GPU, so this script plays the worker:
every transfer finishes within the step that runs it -- a step's loads are reported done in that step's
output (``finished_recving``), its stores, which vLLM's worker runs at the start of the next step
(``OffloadingConnectorWorker.prepare_store_kv``), in the next step's output.

Each scenario's config adds ``tier_blocks``: the tier holds that many blocks (``kv_offloading_size`` =
tier_blocks * 4096 bytes: a block of these one-head, one-dim scenarios is 32 bytes, which vLLM rounds up
to one 4096-byte page, ``CPUOffloadingSpec``). Every step records the scheduling as
``record_vllm_traces.py`` does plus the connector's load and store jobs (GPU block ids, tier block ids),
the requests waiting for a load, and the cumulative external (tier) prefix-cache counters.

    $(VLLM_VENV)/bin/python scripts/record_vllm_offload_traces.py   # -> tests/data/vllm_offload_traces.json
    $(VLLM_VENV)/bin/python scripts/record_vllm_offload_traces.py --check  # exit 1 if it would change

Replayed by tests/test_vllm_offload_parity.py (no vLLM in CI).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record_vllm_traces as base  # noqa: E402  (the V1 recorder beside this file)

REPO = base.REPO
DEFAULT_OUT = REPO / "tests" / "data" / "vllm_offload_traces.json"
RECORDER = "scripts/record_vllm_offload_traces.py"
PAGE = 4096  # bytes vLLM gives one tier block here (mmap.PAGESIZE alignment)
NUM_RANDOM = 12
RANDOM_SEED0 = 5000
req, seq = base.req, base.seq


def cfg(num_blocks, tier_blocks, block_size=4, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256):
    c = base.cfg(num_blocks, block_size, max_num_seqs, max_num_batched_tokens, True, max_model_len)
    c["tier_blocks"] = tier_blocks
    return c


def handwritten_scenarios() -> list[dict]:
    a = seq(101, 13)
    return [{
        "name": "returning_conversation",
        "description": "A's 13-token prompt is stored in the tier as it is prefilled; B's long prompt evicts "
                       "A's blocks from the GPU pool; C, A's prompt plus a reply, hits the tier for the "
                       "blocks the pool lost, waits one step for their load and computes the rest.",
        "config": cfg(num_blocks=9, tier_blocks=16),
        "requests": [req("A", a, 2), req("B", seq(301, 24), 2, arrival_step=3),
                     req("C", a + seq(701, 5), 3, arrival_step=6)],
    }, {
        "name": "whole_prompt_in_tier",
        "description": "C's 12-token prompt is exactly A's three full blocks and the pool lost them all: the "
                       "tier hit covers every token, and the last one is computed again to sample.",
        "config": cfg(num_blocks=9, tier_blocks=16),
        "requests": [req("A", seq(101, 12), 2), req("B", seq(301, 26), 2, arrival_step=3),
                     req("C", seq(101, 12), 3, arrival_step=6)],
    }, {
        "name": "tier_lru_tail_first",
        "description": "A six-block tier: A's and B's three blocks fill it; D's two blocks evict the least "
                       "recently used, A's tail blocks (a finished request's blocks are ranked again from "
                       "tail to head), so C, A's prompt again after the pool lost it, hits only A's head.",
        "config": cfg(num_blocks=7, tier_blocks=6),
        "requests": [req("A", seq(101, 12), 1), req("B", seq(201, 12), 1, arrival_step=2),
                     req("D", seq(301, 9), 1, arrival_step=4),
                     req("C", seq(101, 12) + [9], 2, arrival_step=6)],
    }, {
        "name": "preempted_reloads_from_tier",
        "description": "Three requests decode until the pool runs dry; the newest is preempted, the "
                       "others' growth evicts its cached blocks from the pool, and, readmitted, it loads its "
                       "prompt's blocks back from the tier (a preempted request's lookups count apart, not "
                       "as external queries).",
        "config": cfg(num_blocks=11, tier_blocks=16),
        "requests": [req("A", seq(101, 9), 14), req("B", seq(201, 9), 12), req("C", seq(301, 9), 12)],
    }, {
        "name": "tier_full_of_pending_stores",
        "description": "A two-block tier: the first prompt's stores fill it, and the second prompt's blocks "
                       "are offered while those are still being written (nothing idle to evict): vLLM "
                       "skips the store and offers the blocks again next step.",
        "config": cfg(num_blocks=12, tier_blocks=2, max_num_batched_tokens=8),
        "requests": [req("A", seq(101, 8), 3), req("B", seq(201, 16), 2)],
    }]


def random_scenario(seed: int) -> dict:
    rng = random.Random(seed)
    bs = rng.choice([2, 4, 4, 8])
    num_blocks = rng.randint(8, 14)
    tier = rng.choice([2, 4, 8, 16, 32, 32])
    max_num_seqs = rng.randint(1, 4)
    budget = max(max_num_seqs, rng.choice([8, 16, 64]))
    c = cfg(num_blocks, tier, bs, max_num_seqs, budget)
    prefixes = [[rng.randrange(1, 1000) for _ in range(rng.randint(2 * bs, 4 * bs))] for _ in range(3)]
    requests: list[dict] = []
    for i in range(rng.randint(4, 8)):  # conversations that return, and long one-off prompts between them
        returning = rng.random() < 0.6
        prompt = list(rng.choice(prefixes)) if returning else []
        prompt += [rng.randrange(1, 1000) for _ in range(rng.randint(1, 2 * bs) if returning
                                                          else rng.randint(2 * bs, 5 * bs))]
        max_tokens = rng.randint(1, 12)
        while not base.fits_alone(c, len(prompt) + max_tokens) and max_tokens > 1:
            max_tokens -= 1
        while not base.fits_alone(c, len(prompt) + max_tokens):
            prompt.pop()
        requests.append(req(f"R{i}", prompt, max_tokens, rng.choice([0, 1, 2, 4, 6, 9, 12, 16, 20])))
    return {
        "name": f"random_offload_{seed}",
        "description": f"Seeded random scenario (random.Random({seed})): block {bs}, {num_blocks - 1} GPU "
                       f"blocks, a {tier}-block tier, three returning prefixes and one-off prompts, "
                       "staggered arrivals.",
        "config": c,
        "requests": requests,
    }


def all_scenarios() -> list[dict]:
    return handwritten_scenarios() + [random_scenario(RANDOM_SEED0 + k) for k in range(NUM_RANDOM)]


class OffloadRecorder(base.Recorder):
    def __init__(self, model_dir: Path):
        super().__init__(model_dir)
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput
        self.OffloadingWorkerMetadata, self.KVConnectorOutput = OffloadingWorkerMetadata, KVConnectorOutput
        real = self.CacheConfig

        def cache_config(**kw):  # base.build passes block_size and enable_prefix_caching
            return real(**kw, kv_offloading_size=self._tier_blocks * PAGE / (1 << 30))
        self.CacheConfig = cache_config

    def build(self, c: dict):
        self._tier_blocks = c["tier_blocks"]
        scheduler, hasher, in_force = super().build(c)
        manager = scheduler.connector.scheduler.manager
        if manager._num_chunks != c["tier_blocks"]:
            raise RuntimeError(f"vLLM sized the tier {manager._num_chunks} blocks, asked {c['tier_blocks']}")
        in_force["connector"] = type(scheduler.connector).__name__
        in_force["eviction_policy"] = type(manager._policy).__name__
        cfg_ = scheduler.connector.scheduler.config
        in_force["offload_prompt_only"] = cfg_.offload_prompt_only
        in_force["blocks_per_chunk"] = cfg_.blocks_per_chunk
        return scheduler, hasher, in_force

    def run(self, scenario: dict) -> tuple[dict, dict]:
        c = scenario["config"]
        base.validate_scenario(scenario)
        scheduler, hasher, in_force = self.build(c)
        manager = scheduler.kv_cache_manager.coordinator.single_type_managers[0]
        spec = {r["id"]: r for r in scenario["requests"]}
        objs, steps, step, stores_in_flight = {}, [], 0, {}
        ext = {"queries": 0, "hits": 0, "preempted_queries": 0, "preempted_hits": 0}
        while True:
            arrived = [r["id"] for r in scenario["requests"] if r["arrival_step"] == step]
            pending = any(r["arrival_step"] > step for r in scenario["requests"])
            if not arrived and not pending and scheduler.get_num_unfinished_requests() == 0:
                break
            if step >= base.STEP_CAP:
                raise RuntimeError(f"{scenario['name']}: not finished after {base.STEP_CAP} steps")
            for rid in arrived:
                r = spec[rid]
                objs[rid] = self.Request(
                    request_id=rid, prompt_token_ids=list(r["prompt_token_ids"]),
                    sampling_params=self.SamplingParams(temperature=0.0, max_tokens=r["max_tokens"],
                                                        ignore_eos=True),
                    pooling_params=None, arrival_time=float(step), block_hasher=hasher)
                scheduler.add_request(objs[rid])
            alive = [rid for rid, o in objs.items() if not o.is_finished()]
            out = scheduler.schedule()
            meta = out.kv_connector_metadata
            loads = [job(j, "dst") for j in meta.load_jobs.values()]
            stores = [job(j, "src") for j in meta.store_jobs.values()]
            tables = {rid: [b.block_id for b in blocks]
                      for rid, blocks in manager.req_to_blocks.items() if blocks}
            holding = [o.request_id for o in scheduler.kv_holding_waiting]
            req_ids = list(out.num_scheduled_tokens)
            sampled = []
            for rid in req_ids:
                o = objs[rid]
                sampled.append([spec[rid]["output_token_ids"][len(o.output_token_ids)]]
                               if o.num_computed_tokens >= o.num_tokens else [])
            done = dict.fromkeys(meta.load_jobs, 1) | dict.fromkeys(stores_in_flight, 1)
            stores_in_flight = dict(meta.store_jobs)
            kv_out = self.KVConnectorOutput(
                finished_recving={j.req_id for j in meta.load_jobs.values()},
                kv_connector_worker_meta=self.OffloadingWorkerMetadata(completed_jobs=done) if done else None)
            mro = self.ModelRunnerOutput(req_ids=req_ids,
                                         req_id_to_index={r: k for k, r in enumerate(req_ids)},
                                         sampled_token_ids=sampled, kv_connector_output=kv_out)
            finished = []
            for eco in scheduler.update_from_output(out, mro).values():
                finished += [o.request_id for o in eco.outputs if o.finish_reason is not None]
                stats = eco.scheduler_stats
                if stats is not None and stats.connector_prefix_cache_stats is not None:
                    p = stats.connector_prefix_cache_stats
                    for key in ext:
                        ext[key] += getattr(p, key)
            steps.append({
                "step": step, "arrived": arrived, "scheduled": dict(out.num_scheduled_tokens),
                "preempted": sorted(out.preempted_req_ids or ()), "finished": finished,
                "num_computed_tokens": {rid: objs[rid].num_computed_tokens for rid in alive},
                "block_ids": tables, "loads": loads, "stores": stores, "loading": holding,
                "waiting": [o.request_id for o in scheduler.waiting], "external": dict(ext),
                "tier_blocks_used": len(scheduler.connector.scheduler.manager._policy.chunks),
            })
            step += 1
        for rid, o in objs.items():
            if not o.is_finished() or list(o.output_token_ids) != spec[rid]["output_token_ids"]:
                raise RuntimeError(f"{scenario['name']}: {rid} did not finish with its outputs")
        return {"name": scenario["name"], "description": scenario["description"], "config": dict(c),
                "requests": scenario["requests"], "steps": steps}, in_force


def job(j, gpu_side: str) -> dict:
    gpu, tier = (j.dst_spec, j.src_spec) if gpu_side == "dst" else (j.src_spec, j.dst_spec)
    return {"req": j.req_id, "gpu": [int(b) for b in gpu.block_ids], "tier": [int(b) for b in tier.block_ids]}


SHARED_KEYS = base.SHARED_KEYS + ("connector", "eviction_policy", "offload_prompt_only", "blocks_per_chunk")


def record(model_dir: Path, verbose: bool = True) -> dict:
    rec = OffloadRecorder(model_dir)
    if rec.version != base.EXPECTED_VLLM_VERSION:
        raise RuntimeError(f"vLLM {rec.version} installed; the traces are pinned to "
                           f"{base.EXPECTED_VLLM_VERSION}")
    traces, shared = [], None
    for k, sc in enumerate(all_scenarios(), 1):
        trace, in_force = rec.run(sc)
        here = {key: in_force[key] for key in SHARED_KEYS}
        if shared is not None and here != shared:
            raise RuntimeError(f"{sc['name']}: settings differ from the first scenario's")
        shared = here
        traces.append(trace)
        if verbose:
            hits = trace["steps"][-1]["external"]["hits"] if trace["steps"] else 0
            print(f"[{k:2d}] {sc['name']:30s} {len(trace['steps']):3d} steps, {hits} tier hit tokens",
                  flush=True)
    return {"vllm_version": rec.version, "recorder": RECORDER, "vllm_config": shared, "scenarios": traces}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=base.DEFAULT_MODEL_DIR)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args(argv)
    text = base.dumps(record(args.model_dir))
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print("--check: " + ("matches a fresh recording" if same else "differs from a fresh recording"))
        return 0 if same else 1
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.encode()) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
