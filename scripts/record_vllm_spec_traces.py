#!/usr/bin/env python3
"""Record what vLLM's V1 scheduler decides with n-gram speculative decoding, without a model.

As ``scripts/record_vllm_traces.py`` (whose Recorder builds the Scheduler and KVCacheManager), with a
``SpeculativeConfig(method="ngram")`` in the VllmConfig. The synthetic "model" knows each request's
``output_token_ids``; after each step the script hands the scheduler seeded draft tokens
(``Scheduler.update_draft_token_ids``, as the engine core does with the proposer's drafts): each draft is
the true next output with probability ``p_right``, else a wrong token, and at most
``max_tokens - outputs - 1`` long. When a request samples, the "model" verifies greedily: it returns the
drafts that match the true outputs and the true token after them (``ModelRunnerOutput.sampled_token_ids``,
1 + accepted ids), and ``update_from_output`` rolls back the rejected ones. Each step's decisions, and the
drafts given after it, go to ``tests/data/vllm_v1_spec_traces.json``;
``tests/test_vllm_spec_parity.py`` replays them.

It also records vLLM's own n-gram lookup (``_find_longest_matched_ngram_and_propose_tokens`` in
``v1/spec_decode/ngram_proposer.py``) on seeded token lists, which paged_lab's proposer must reproduce.

    $(VLLM_VENV)/bin/python scripts/record_vllm_spec_traces.py           # write the file
    $(VLLM_VENV)/bin/python scripts/record_vllm_spec_traces.py --check   # exit 1 if it would change
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record_vllm_traces as base  # noqa: E402  (the recorder of the plain traces: Recorder, dumps, cfg)

OUT = base.REPO / "tests" / "data" / "vllm_v1_spec_traces.json"
RECORDER = "scripts/record_vllm_spec_traces.py"
WRONG = 3000  # draft ids >= this are wrong on purpose (prompts use 1..999, outputs 1000..1999)


def spec_scenario(name, description, config, requests, k, p_right, seed, pattern=None):
    """``pattern``: every draft is k long (or what max_tokens leaves) and draft i is right when pattern[i]
    is 1 (a scripted story); otherwise seeded: a length in 0..k, each draft right with probability p_right."""
    sp = {"num_speculative_tokens": k, "p_right": p_right, "seed": seed}
    return {
        "name": name,
        "description": description,
        "config": config,
        "requests": requests,
        "speculative": sp if pattern is None else {**sp, "pattern": pattern},
    }


def scenarios() -> list[dict]:
    req, seq, cfg = base.req, base.seq, base.cfg
    s = [
        spec_scenario(
            "accept_2_of_3",
            "One request, k = 3, block size 4, every draft right, right, wrong: each "
            "step schedules 4 tokens, the table grows ahead of the computed tokens, 2 of 3 drafts are "
            "accepted and the rejected slot's block is kept and written over next step.",
            cfg(num_blocks=12),
            [req("A", seq(101, 6), max_tokens=14)],
            3,
            0.0,
            1,
            pattern=[1, 1, 0],
        ),
        spec_scenario(
            "all_wrong",
            "Every draft is wrong: each step verifies 1 + k tokens and keeps one, and the "
            "slots of the rejected drafts are reused by the next step.",
            cfg(num_blocks=12),
            [req("A", seq(101, 5), max_tokens=10)],
            2,
            0.0,
            2,
        ),
        spec_scenario(
            "budget_cuts_drafts",
            "Three requests under a 6-token budget: the last scheduled one gets "
            "fewer draft tokens than it has (vLLM truncates spec_token_ids to what fits).",
            cfg(num_blocks=30, max_num_seqs=4, max_num_batched_tokens=6),
            [
                req("A", seq(101, 5), max_tokens=12),
                req("B", seq(201, 3), max_tokens=12),
                req("C", seq(301, 4), max_tokens=12),
            ],
            3,
            0.8,
            3,
        ),
        spec_scenario(
            "caching_with_drafts",
            "Prefix caching on: blocks full of verified tokens are cached, a "
            "block holding drafts is not; B, arriving later with A's first 8 tokens and 3 of its own, "
            "hits A's 2 full prompt blocks.",
            cfg(num_blocks=20, caching=True),
            [
                req("A", seq(101, 9), max_tokens=12),
                req("B", seq(101, 8) + seq(401, 3), max_tokens=6, arrival_step=4),
            ],
            3,
            0.6,
            4,
        ),
        spec_scenario(
            "preemption_with_drafts",
            "A small pool: draft slots make the decodes outgrow it, the "
            "newest request is preempted and recomputed later, its drafts dropped.",
            cfg(num_blocks=9),
            [req("A", seq(101, 8), max_tokens=12), req("B", seq(201, 8), max_tokens=12)],
            3,
            0.5,
            5,
        ),
    ]
    return s


def random_spec_scenario(i: int) -> dict:
    rs, rng = base.random_scenario(5000 + i), random.Random(6000 + i)
    return spec_scenario(
        f"random_spec_{i}",
        f"Seeded random scenario (random.Random({5000 + i})) with drafts (random.Random({6000 + i})).",
        rs["config"],
        rs["requests"],
        rng.randint(1, 4),
        rng.choice([0.3, 0.6, 0.9]),
        6000 + i,
    )


NUM_RANDOM = 8
PADDED = "pads a new request with placeholder drafts"


def ngram_cases() -> list[dict]:
    rng = random.Random(7)
    cases = []
    for _ in range(60):
        vocab, n = rng.choice([2, 3, 5, 8, 30]), rng.randint(0, 40)
        lo = rng.randint(1, 4)
        cases.append(
            {
                "token_ids": [rng.randrange(vocab) for _ in range(n)],
                "min_n": lo,
                "max_n": rng.randint(lo, 6),
                "k": rng.randint(1, 5),
                "max_model_len": n + rng.randint(0, 8),
            }
        )
    return cases


def record_ngram(cases) -> list[dict]:
    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as find

    for c in cases:
        c["drafts"] = find(
            np.array(c["token_ids"], dtype=np.int32), c["min_n"], c["max_n"], c["max_model_len"], c["k"]
        ).tolist()
    return cases


class SpecRecorder(base.Recorder):
    def build(self, c: dict, k: int):
        """The plain recorder's Scheduler, with vLLM's n-gram SpeculativeConfig."""
        from vllm.config import ParallelConfig, SpeculativeConfig

        orig = self.VllmConfig

        def with_spec(**kw):
            pc = ParallelConfig()
            spec = SpeculativeConfig(
                method="ngram",
                num_speculative_tokens=k,
                prompt_lookup_max=3,
                prompt_lookup_min=1,
                target_model_config=kw["model_config"],
                target_parallel_config=pc,
            )
            return orig(**kw, parallel_config=pc, speculative_config=spec)

        self.VllmConfig = with_spec
        try:
            return super().build(c)
        finally:
            self.VllmConfig = orig

    def run_spec(self, sc: dict) -> dict:
        from vllm.v1.outputs import DraftTokenIds

        c, sp = sc["config"], sc["speculative"]
        base.validate_scenario(sc)
        scheduler, hasher, in_force = self.build(c, sp["num_speculative_tokens"])
        assert (
            scheduler.num_lookahead_tokens == 0 and scheduler.num_spec_tokens == sp["num_speculative_tokens"]
        )
        pool, manager = (
            scheduler.kv_cache_manager.block_pool,
            scheduler.kv_cache_manager.coordinator.single_type_managers[0],
        )
        rng, spec = random.Random(sp["seed"]), {r["id"]: r for r in sc["requests"]}
        objs, steps, step, drafted, accepted = {}, [], 0, 0, 0
        while True:
            arrived = [r["id"] for r in sc["requests"] if r["arrival_step"] == step]
            pending = any(r["arrival_step"] > step for r in sc["requests"])
            if not arrived and not pending and scheduler.get_num_unfinished_requests() == 0:
                break
            if step >= base.STEP_CAP:
                raise RuntimeError(f"{sc['name']}: not finished after {base.STEP_CAP} steps")
            for rid in arrived:
                r = spec[rid]
                objs[rid] = self.Request(
                    request_id=rid,
                    prompt_token_ids=list(r["prompt_token_ids"]),
                    sampling_params=self.SamplingParams(
                        temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True
                    ),
                    pooling_params=None,
                    arrival_time=float(step),
                    block_hasher=hasher,
                )
                scheduler.add_request(objs[rid])
            out = scheduler.schedule()
            scheduled = dict(out.num_scheduled_tokens)
            spec_tokens = {rid: list(t) for rid, t in out.scheduled_spec_decode_tokens.items()}
            if any(
                -1 in t for t in spec_tokens.values()
            ):  # scheduler.py: pad_spec_decode (a CUDA-graph detail)
                raise RuntimeError(f"{sc['name']} step {step}: vLLM {PADDED} (-1): paged_lab does not")
            tables = {
                rid: [b.block_id for b in blocks] for rid, blocks in manager.req_to_blocks.items() if blocks
            }
            free_queue = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
            req_ids, sampled = list(scheduled), []
            for rid in req_ids:  # the "model": greedy verification against the true outputs
                o, outs = objs[rid], spec[rid]["output_token_ids"]
                if o.num_computed_tokens >= o.num_tokens:
                    drafts, done = spec_tokens.get(rid, []), len(o.output_token_ids)
                    a = next((i for i, d in enumerate(drafts) if d != outs[done + i]), len(drafts))
                    sampled.append(outs[done : done + a + 1])
                    drafted, accepted = drafted + len(drafts), accepted + a
                else:
                    sampled.append([])
            mro = self.ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )
            finished = [
                o.request_id
                for eco in scheduler.update_from_output(out, mro).values()
                for o in eco.outputs
                if o.finish_reason is not None
            ]
            drafts = {}  # the proposer's drafts for the next step: requests that sampled and still run
            for rid, toks in zip(req_ids, sampled):
                o = objs[rid]
                if toks and not o.is_finished():
                    outs, done = spec[rid]["output_token_ids"], len(o.output_token_ids)
                    k, pattern = sp["num_speculative_tokens"], sp.get("pattern")
                    n = min(k if pattern else rng.randint(0, k), len(outs) - done - 1)
                    right = [pattern[i] if pattern else rng.random() < sp["p_right"] for i in range(n)]
                    drafts[rid] = [
                        outs[done + i] if right[i] else WRONG + rng.randrange(100) for i in range(n)
                    ]
            if drafts:
                scheduler.update_draft_token_ids(DraftTokenIds(list(drafts), list(drafts.values())))
            alive = [rid for rid, o in objs.items() if not o.is_finished()]
            steps.append(
                {
                    "step": step,
                    "arrived": arrived,
                    "scheduled": scheduled,
                    "spec_token_ids": spec_tokens,
                    "sampled": dict(zip(req_ids, sampled)),
                    "preempted": sorted(out.preempted_req_ids),
                    "finished": finished,
                    "block_ids": tables,
                    "free_queue": free_queue,
                    "free_queue_after_update": [
                        b.block_id for b in pool.free_block_queue.get_all_free_blocks()
                    ],
                    "cached_blocks": sorted(b.block_id for b in pool.blocks if b.block_hash is not None),
                    "num_computed_tokens": {rid: objs[rid].num_computed_tokens for rid in alive},
                    "drafts_next": drafts,
                    "num_draft_tokens": drafted,
                    "num_accepted_tokens": accepted,
                }
            )
            step += 1
        for rid, o in objs.items():
            if not o.is_finished() or list(o.output_token_ids) != spec[rid]["output_token_ids"]:
                raise RuntimeError(f"{sc['name']}: {rid} did not finish with its outputs")
        return {
            **{key: sc[key] for key in ("name", "description", "config", "requests", "speculative")},
            "steps": steps,
        }


def record(model_dir: Path) -> dict:
    rec = SpecRecorder(model_dir)
    if rec.version != base.EXPECTED_VLLM_VERSION:
        raise RuntimeError(
            f"vLLM {rec.version} installed; the traces are pinned to {base.EXPECTED_VLLM_VERSION}"
        )
    traces = [rec.run_spec(sc) for sc in scenarios()]
    i = 0
    while (
        len(traces) < len(scenarios()) + NUM_RANDOM
    ):  # random ones: skip those where vLLM pads (see run_spec)
        try:
            traces.append(rec.run_spec(random_spec_scenario(i)))
        except RuntimeError as e:
            if PADDED not in str(e):
                raise
        i += 1
    return {
        "vllm_version": rec.version,
        "recorder": RECORDER,
        "scenarios": traces,
        "ngram_cases": record_ngram(ngram_cases()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=base.DEFAULT_MODEL_DIR)
    ap.add_argument(
        "--check", action="store_true", help="compare with the committed file; exit 1 if it differs"
    )
    args = ap.parse_args(argv)
    text = base.dumps(record(args.model_dir))
    if args.check:
        same = OUT.is_file() and OUT.read_text() == text
        print(f"--check: {'matches' if same else 'DIFFERS from'} a fresh recording")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.encode()) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
