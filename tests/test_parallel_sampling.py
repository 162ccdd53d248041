"""Parallel sampling two ways: fork + copy-on-write (the paper, vLLM V0) and n requests sharing the
prompt through the prefix cache (vLLM V1). Same tokens; different block bookkeeping."""

import pytest
from test_engine_phases import _tiny_llama, _Tok  # the same 2-layer random Llama and id tokenizer

from paged_lab.engine import LLM, SamplingParams

PROMPT = {"prompt_token_ids": [3, 14, 15, 92, 65, 35, 89, 79, 32, 38]}  # 10 tokens: 2 full blocks of 4 + 2


@pytest.fixture(scope="module")
def tiny():
    return _tiny_llama()


def _run(model, mode, sp):
    llm = LLM(model, tokenizer=_Tok(), block_size=4, num_kv_blocks=32, attention_backend="torch",
              parallel_sampling=mode)
    out = llm.generate(PROMPT, sp, use_tqdm=False)[0]
    return [c.token_ids for c in out.outputs], llm.stats()


@pytest.mark.parametrize("sp", [SamplingParams(n=3, temperature=0, max_tokens=6, ignore_eos=True),
                                SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=6, ignore_eos=True)],
                         ids=["greedy", "seeded"])
def test_fork_and_prefix_sharing_give_the_same_tokens(tiny, sp):
    forked, f_stats = _run(tiny, "fork", sp)
    shared, p_stats = _run(tiny, "prefix", sp)
    assert forked == shared and len(forked) == 3
    if sp.temperature:  # the completions really are different samples
        assert len({tuple(t) for t in forked}) > 1
    # V0: the children share all 3 prompt blocks; each copies the partly filled third one on its first write
    assert f_stats["num_cow"] == 2 and f_stats["prefix_cache_hits"] == 0
    # V1: no copy-on-write; each sibling finds the 2 full prompt blocks (8 tokens) in the prefix cache
    assert p_stats["num_cow"] == 0 and p_stats["prefix_cache_hits"] == 2 * 8


def test_parallel_sampling_mode_is_checked(tiny):
    with pytest.raises(ValueError,
                       match=r"parallel_sampling must be one of \('fork', 'prefix'\), got 'copy'"):
        LLM(tiny, tokenizer=_Tok(), block_size=4, num_kv_blocks=8, parallel_sampling="copy")


@pytest.mark.parametrize("mode", ["fork", "prefix"])
def test_forked_children_never_run_past_max_num_seqs(tiny, mode):
    """Two prompts x n=3 with 2 windows: a child that finds no free window waits in the queue (and is
    prefilled when one frees) instead of running as a 3rd..6th sequence. Same tokens as with room for all."""
    prompts = [PROMPT, {"prompt_token_ids": [7, 8, 9, 10, 11]}]
    sp = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=5, ignore_eos=True)

    def run(max_num_seqs):
        llm = LLM(tiny, tokenizer=_Tok(), block_size=4, num_kv_blocks=64, attention_backend="torch",
                  parallel_sampling=mode, max_num_seqs=max_num_seqs)
        outs = llm.generate(prompts, sp, use_tqdm=False)
        return [[c.token_ids for c in o.outputs] for o in outs], max(t["num_running"] for t in llm.timeline)

    roomy, roomy_peak = run(8)
    tight, tight_peak = run(2)
    assert roomy_peak == 6 and tight_peak == 2
    assert tight == roomy
