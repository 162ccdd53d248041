"""Every KV read returns the KV of the reader's own tokens, with prefix caching on, over thousands of
random configurations (preemption by recompute and swap, token budgets, twins admitted in one step,
shared system prompts, arrivals over time, n > 1 by fork), checked without a model by
``paged_lab.sim.kv_check`` and the BlockManager's invariants after every step.

The engine-level twin of this file, ``test_prefix_cache_tokens.py``, runs a real forward and requires
the same greedy tokens with caching on and off.
"""

from __future__ import annotations

import random

import pytest

from paged_lab.memory import BlockManager
from paged_lab.sched import Scheduler, Sequence
from paged_lab.sched.scheduler import RequestTooLargeError
from paged_lab.sim.kv_check import KVContentChecker, StaleKVRead

VOCAB = 11  # few token ids: unrelated prompts share blocks by chance too


def _sample(checker: KVContentChecker, seq, salt: int) -> int:
    """A stand-in for greedy decoding: the next token is a function of the whole prefix (twins stay
    twins), salted per fork child so that siblings diverge."""
    name = checker._prefix_names(seq)[-1]
    return hash((name, salt)) % VOCAB


def random_config(rng: random.Random) -> dict:
    bs = rng.choice([1, 2, 4, 4, 8, 16])
    system = [rng.randrange(VOCAB) for _ in range(rng.randrange(0, 3) * bs + rng.randrange(0, 2))]
    requests = []
    for _ in range(rng.randrange(1, 8)):
        if requests and rng.random() < 0.3:  # a twin: an earlier prompt again, arriving in the same step
            twin = rng.choice(requests)
            requests.append(dict(twin, n=1))
            continue
        own = [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 3 * bs + 3))]
        prompt = (system if rng.random() < 0.6 else []) + own
        requests.append(dict(prompt=prompt, max_tokens=rng.randrange(1, 14), arrival=rng.randrange(0, 8),
                             n=rng.choice([1, 1, 1, 2, 3])))
    longest = max(len(r["prompt"]) + r["max_tokens"] for r in requests)
    budget = rng.choice([None, None, 1, 2, 3, bs, 2 * bs + 1])
    return dict(
        block_size=bs, num_blocks=-(-longest // bs) + rng.randrange(0, 8),
        max_num_seqs=rng.randrange(1, 6), budget=budget, requests=requests,
        preemption=rng.choice(["recompute", "recompute", "swap"]), num_cpu_blocks=rng.randrange(0, 12),
        scheduler=Scheduler, mode=rng.choice(["continuous", "continuous", "static"]),
        eos=rng.choice([None, 0]), allocation=rng.choice(["v1", "whole_prompt"]),
        reuse=rng.choice(["v1", "lru"]),
    )


def run(config: dict, block_manager_class=BlockManager, split_store: bool = False, caching: bool = True,
        max_steps: int = 3_000) -> dict:
    """Drive the Scheduler through ``config``, checking every step. Returns each request's output tokens."""
    bm = block_manager_class(config["num_blocks"], config["block_size"], enable_prefix_caching=caching,
                             reuse=config.get("reuse", "v1"))
    sched = config["scheduler"](bm, max_num_seqs=config["max_num_seqs"], mode=config["mode"],
                                preemption=config["preemption"], max_num_batched_tokens=config["budget"],
                                num_cpu_blocks=config["num_cpu_blocks"],
                                allocation=config.get("allocation", "v1"))
    checker = KVContentChecker(sched, split_store=split_store)
    pending = sorted(enumerate(config["requests"]), key=lambda ir: ir[1]["arrival"])
    seqs, salt, forks = {}, {}, {}
    for _ in range(max_steps):
        while pending and pending[0][1]["arrival"] <= sched.step_count:
            i, r = pending.pop(0)
            seq = Sequence(i, r["prompt"], max_tokens=r["max_tokens"], eos_token_id=config["eos"])
            try:
                sched.add_request(seq)
            except RequestTooLargeError:
                continue
            seqs[i], salt[i], forks[i] = seq, 0, r["n"] - 1
        if not (pending or sched.has_unfinished()):
            break
        out = sched.schedule()
        checker.check_step(out)
        sched.update(out, [_sample(checker, e.seq, salt[e.seq.seq_id]) for e in out.sampling])
        _fork_children(sched, seqs, salt, forks)
        bm.check_invariants()
    else:
        raise AssertionError(f"not finished after {max_steps} steps: {config}")
    return {i: s.output_token_ids for i, s in seqs.items()}


def _fork_children(sched, seqs, salt, forks) -> None:
    """n > 1 the paper's way: once a parent has sampled its first token, fork its siblings."""
    for i, n in list(forks.items()):
        parent = seqs[i]
        if (n and parent.num_output_tokens == 1 and parent.status.value == "running"
                and sched.preemption != "swap"):
            for c in range(n):
                child_id = (i, c)
                child = Sequence(child_id, parent.prompt_token_ids, max_tokens=parent.max_tokens,
                                 eos_token_id=parent.eos_token_id)
                sched.fork(parent, child, last_token_id=(parent.token_ids[-1] + c + 1) % VOCAB)
                seqs[child_id], salt[child_id] = child, c + 1
            forks[i] = 0


@pytest.mark.parametrize("chunk", range(4))
def test_every_kv_read_is_the_readers_own_over_random_configurations(chunk):
    """1,600 random configurations in four chunks (seeds are printed on failure)."""
    checked = 0
    for seed in range(chunk * 400, (chunk + 1) * 400):
        config = random_config(random.Random(seed))
        try:
            run(config)
        except Exception as e:
            raise AssertionError(f"seed {seed}: {config}") from e
        checked += 1
    assert checked == 400


def test_outputs_equal_with_caching_on_and_off():
    """The stand-in sampler reads the prefix, so equal outputs mean equal decisions about content."""
    for seed in range(300):
        config = random_config(random.Random(seed))
        assert run(config, caching=True) == run(config, caching=False), f"seed {seed}"


# -- the two reproducers of the bugs this check was written for, and proof that it can fail -----------

def test_twins_admitted_together_read_what_the_first_one_stores():
    """Two equal 17-token prompts in one step, block size 16: the second hits the first one's full
    block, which is computed in this same step, and computes a one-token query."""
    config = dict(block_size=16, num_blocks=8, max_num_seqs=2, budget=None, preemption="recompute",
                  num_cpu_blocks=0, scheduler=Scheduler, mode="continuous", eos=None,
                  requests=[dict(prompt=list(range(17)), max_tokens=6, arrival=0, n=1)] * 2)
    outputs = run(config)
    assert outputs[0] == outputs[1]
    # The order the engine must not use: the one-token query attends before the prefill stores.
    with pytest.raises(StaleKVRead, match="seq 1 attends position 0"):
        run(config, split_store=True)


class _CachesWholePromptAtAdmission(BlockManager):
    """The old rule: every full prompt block joined the prefix cache at admission, computed or not."""

    def allocate(self, seq_id, token_ids, extra_key=None, num_tokens_to_cache=None, max_new_tokens=None,
                 num_prompt_tokens=None):
        return super().allocate(seq_id, token_ids, extra_key, max_new_tokens=max_new_tokens)


def test_a_request_preempted_mid_prefill_leaves_no_uncomputed_block_in_the_cache():
    """block size 4, 4 blocks, a budget of 2 tokens: the 12-token prompt is preempted after 2 of its
    tokens; re-admitted, it must not hit its own never-computed blocks."""
    config = dict(block_size=4, num_blocks=4, max_num_seqs=2, budget=2, preemption="recompute",
                  num_cpu_blocks=0, scheduler=Scheduler, mode="continuous", eos=None,
                  requests=[dict(prompt=[5, 6], max_tokens=5, arrival=0, n=1),
                            dict(prompt=list(range(100, 112)), max_tokens=5, arrival=0, n=1)])
    for allocation in ("v1", "whole_prompt"):
        config["allocation"] = allocation
        assert run(config) == run(config, caching=False)
    # The paper's whole-prompt allocation, with the old rule of caching every full block at admission:
    with pytest.raises(StaleKVRead):
        run(config, block_manager_class=_CachesWholePromptAtAdmission)


def test_the_invariant_catches_a_block_cached_before_its_kv_exists():
    bm = BlockManager(8, 4, enable_prefix_caching=True)
    bm.allocate("a", list(range(12)), num_tokens_to_cache=0)
    bm.check_invariants()
    bm.cache_blocks("a", 4)  # the first block is computed
    bm.check_invariants()
    bm._seqs["a"].num_cached_blocks = 0  # as if the block had been cached without being computed
    with pytest.raises(Exception, match="before its KV is computed"):
        bm.check_invariants()
