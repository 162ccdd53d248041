"""Tensor parallelism over worker processes (paged_lab.engine.dist): SmolLM2 (9 query heads, 3 KV heads)
split over 3 ranks gives TP=1's greedy tokens, each rank's pool holds a third of the bytes, a Ctrl-C
leaves the engine whole, and a rank that dies takes every other worker with it (no orphan process).

One TP=3 engine serves the module (spawning its workers costs seconds); the test that kills a rank runs
last."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from paged_lab.engine import LLM, SamplingParams
from paged_lab.engine.dist import tp as tp_mod
from paged_lab.engine.dist.workers import WorkerError

PROMPTS = ["The capital of France is", "A paged KV cache stores", "The capital of France is a city"]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def _tokens(llm, prompts=PROMPTS):
    return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


@pytest.fixture(scope="module")
def engines(smollm2):
    model, tok, _ = smollm2
    # small blocks and a step budget that chunks the prompts: prefills, chunks, decodes and prefix hits
    kw = dict(tokenizer=tok, block_size=4, num_kv_blocks=96, max_num_batched_tokens=16, cpu_prepack=False)
    one = LLM(model, **kw)
    three = LLM(model, tensor_parallel_size=3, **kw)
    yield one, three
    three.runner.workers.stop()


def test_tp3_gives_tp1_greedy_tokens(engines):
    one, three = engines
    assert _tokens(three) == _tokens(one)
    assert three.stats()["prefix_cache_hits"] > 0  # the third prompt found the first one's blocks


def test_each_rank_holds_its_heads_in_a_third_of_the_bytes(engines):
    one, three = engines
    info = three.runner.pool_info(three.kv)
    assert [r["rank"] for r in info] == [0, 1, 2]
    assert [r["kv_heads"] for r in info] == [[0], [1], [2]]  # one of SmolLM2's 3 KV heads each
    assert all(r["bytes"] * 3 == one.kv.bytes for r in info)
    assert all(r["shape"][2] == one.num_blocks for r in info)  # the same block ids on every rank
    assert three.kv.bytes * 3 == one.kv.bytes and three.stats()["kv_cache_bytes"] == three.kv.bytes


def test_head_ranges_replicate_kv_heads_when_ranks_outnumber_them():
    # 8 query heads over 2 KV heads on 4 ranks: each KV head on 2 ranks (vLLM's num_kv_head_replicas)
    got = [tp_mod.head_ranges(8, 2, 4, r) for r in range(4)]
    assert [list(q) for q, _ in got] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [list(kv) for _, kv in got] == [[0], [0], [1], [1]]
    # every rank's query heads use only its KV heads (query head h reads KV head h // (8 // 2))
    assert all({h // 4 for h in q} == set(kv) for q, kv in got)


def test_bad_sizes_raise_before_any_worker_starts(smollm2):
    model, tok, _ = smollm2
    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="tensor_parallel_size=2 must divide the 9 attention heads"):
        LLM(model, tokenizer=tok, num_kv_blocks=8, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="tensor_parallel_size must be"):
        LLM(model, tokenizer=tok, num_kv_blocks=8, tensor_parallel_size=0)
    with pytest.raises(ValueError, match="enforce_eager=True"):
        LLM(model, tokenizer=tok, num_kv_blocks=8, tensor_parallel_size=3, enforce_eager=False)
    assert set(multiprocessing.active_children()) == before


def test_ctrl_c_stops_the_call_on_every_rank_and_the_engine_stays_whole(engines, monkeypatch):
    one, three = engines
    expected = _tokens(one)
    calls = []
    prepare = three.prepare_batch

    def ctrl_c_on_third_step(out):  # the terminal's Ctrl-C reaches every process of the group
        calls.append(1)
        if len(calls) == 3:
            for pid in three.runner.workers.pids:
                os.kill(pid, signal.SIGINT)  # (workers ignore it: rank 0 decides)
            os.kill(os.getpid(), signal.SIGINT)
        return prepare(out)

    monkeypatch.setattr(three, "prepare_batch", ctrl_c_on_third_step)
    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning, match="aborted"):
        three.generate(PROMPTS, GREEDY, use_tqdm=False)
    monkeypatch.undo()
    assert all(p.is_alive() for p in three.runner.workers.procs)
    assert three.block_manager.num_free_blocks == three.num_blocks
    assert _tokens(three) == expected


def test_a_rank_that_dies_stops_every_worker(engines):  # (last: it ends the module's TP engine)
    _, three = engines
    workers = three.runner.workers
    os.kill(workers.pids[1], signal.SIGKILL)  # rank 2
    with pytest.raises(WorkerError, match="every worker was stopped"), pytest.warns(RuntimeWarning):
        three.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert not any(p.is_alive() for p in workers.procs)
    assert not set(workers.procs) & set(multiprocessing.active_children())
    for pid in workers.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: no orphan, no zombie
    with pytest.raises(WorkerError, match="make a new engine"):
        three.generate(PROMPTS, GREEDY, use_tqdm=False)


ORPHAN_SCRIPT = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from paged_lab.engine import LLM


class Tok:
    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return ""


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=16)
    llm = LLM(LlamaForCausalLM(cfg).eval(), tokenizer=Tok(), num_kv_blocks=8, tensor_parallel_size=2,
              attention_backend="torch")
    print(*llm.runner.workers.pids, flush=True)
    import time
    time.sleep(600)
"""


def test_workers_die_with_a_killed_parent(tmp_path):
    """SIGKILL runs no Python cleanup in the parent: an idle worker sees its pipe close and exits, one blocked
    in a collective is killed by the kernel (PR_SET_PDEATHSIG)."""
    script = tmp_path / "parent.py"
    script.write_text(ORPHAN_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 1 and _alive(pids[0])
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, pids)), f"worker(s) {pids} outlived their killed parent"


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
