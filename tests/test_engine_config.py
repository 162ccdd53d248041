"""EngineConfig holds LLM's arguments, their defaults and their checks (issue 36): every argument that
needs no model is checked before any model is looked for; ``LLM(**kwargs)`` keeps its vLLM-shaped
signature and defaults; ``LLM(config=EngineConfig(...))`` runs the same engine."""

import inspect

import pytest
from test_engine_phases import PROMPTS, _tiny_llama, _Tok  # the same 2-layer random Llama and id tokenizer

from paged_lab.engine import LLM, EngineConfig, SamplingParams

# LLM's arguments and defaults before EngineConfig held them (paged_lab/engine/engine.py at 0f89e31), and
# issue 39's kv_offloading_size and issue 40's speculative_config since
DEFAULTS = {"model": "smollm2-135m", "tokenizer": None, "dtype": "float32", "block_size": 16,
            "num_kv_blocks": None, "kv_cache_memory": None, "max_num_seqs": 32,
            "max_num_batched_tokens": 4096, "enable_prefix_caching": True, "kv_cache_dtype": "auto",
            "attention_backend": "auto", "preemption": "recompute", "device": None, "max_model_len": None,
            "parallel_sampling": "prefix", "cpu_prepack": None, "enforce_eager": True, "compile_sizes": None,
            "compile_progress": True,
            "kv_offloading_size": None,  # (issue 39: a second KV tier, off by default)
            "speculative_config": None,  # (issue 40: no drafts by default)
            "tensor_parallel_size": 1}  # (issue 39: one rank)


def test_llm_shows_every_argument_with_its_old_default():
    params = inspect.signature(LLM).parameters
    assert {name: p.default for name, p in params.items() if name != "config"} == DEFAULTS
    assert list(params)[:2] == ["model", "tokenizer"] and params["config"].default is None
    assert {f: getattr(EngineConfig(), f) for f in DEFAULTS} == DEFAULTS


@pytest.mark.parametrize("kw,match", [
    ({"max_num_seqs": 0}, r"max_num_seqs must be an integer >= 1, got 0"),
    ({"max_num_batched_tokens": 0}, r"max_num_batched_tokens must be an integer >= 1, got 0"),
    ({"num_kv_blocks": 0}, r"num_kv_blocks must be an integer >= 1, got 0"),
    ({"num_kv_blocks": 8, "kv_cache_memory": 2**20}, r"give num_kv_blocks or kv_cache_memory, not both"),
    ({"kv_cache_memory": -1}, r"kv_cache_memory must be a positive number, got -1"),
    ({"dtype": "float33"}, r"dtype='float33' is not supported"),
    ({"block_size": 0}, r"block_size must be an integer >= 1, got 0"),
    ({"cpu_prepack": "auto"}, r"cpu_prepack must be True, False or None, got 'auto'"),
    ({"kv_offloading_size": 0}, r"kv_offloading_size must be a number of GiB > 0, got 0"),
    ({"tensor_parallel_size": 0}, r"tensor_parallel_size must be an integer >= 1, got 0"),
    ({"tensor_parallel_size": 2, "enforce_eager": False}, r"tensor_parallel_size > 1 runs eagerly"),
    ({"tensor_parallel_size": 3, "kv_offloading_size": 1}, r"tensor_parallel_size > 1 runs without"),
    ({"tensor_parallel_size": 3, "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}},
     r"tensor_parallel_size > 1 runs without speculative_config"),
])
def test_a_bad_argument_raises_before_any_model_is_looked_for(kw, match):
    """"no-such-model" is never looked up: the argument's own error comes first, naming it and the limit
    (before EngineConfig, max_num_seqs, max_num_batched_tokens, num_kv_blocks, kv_cache_memory and dtype
    were checked only after the model had loaded)."""
    with pytest.raises(ValueError, match=match):
        LLM("no-such-model", **kw)
    with pytest.raises(ValueError, match=match):
        EngineConfig(model="no-such-model", **kw)


def test_an_unknown_argument_is_a_type_error():
    with pytest.raises(TypeError, match="max_num_sequences"):
        LLM("no-such-model", max_num_sequences=4)


def test_a_config_made_beforehand_runs_the_same_engine():
    model, sp = _tiny_llama(), SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    kw = {"block_size": 4, "num_kv_blocks": 32, "attention_backend": "torch"}
    by_keyword = LLM(model, tokenizer=_Tok(), **kw)
    cfg = EngineConfig(model=model, tokenizer=_Tok(), **kw)
    by_config = LLM(config=cfg)
    assert by_config.config is cfg and by_config.block_size == 4 and by_config.num_blocks == 32
    assert ([o.outputs[0].token_ids for o in by_config.generate(PROMPTS, sp, use_tqdm=False)]
            == [o.outputs[0].token_ids for o in by_keyword.generate(PROMPTS, sp, use_tqdm=False)])
    with pytest.raises(ValueError, match="not both"):
        LLM(model, config=cfg)
    with pytest.raises(ValueError, match="not both"):
        LLM(config=cfg, block_size=8)
    with pytest.raises(ValueError, match="config must be an EngineConfig, got dict"):
        LLM(config=dict(kw))


def test_the_request_table_is_the_one_owner_of_the_running_requests():
    """Requests are numbered over the engine's life, a completion joins its request only through the table
    (``ParallelSampling`` adds its completions there), and aborting a call finishes every unfinished
    completion as "abort" and lets every request go."""
    from paged_lab.engine.request import RequestTable
    from paged_lab.sched import Sequence, SequenceStatus

    table, sp = RequestTable(), SamplingParams(n=2, max_tokens=3)
    done, cut = table.new(None, [1, 2], sp, 3, 0), table.new(None, [3], sp, 3, 0)
    assert (done.request_id, cut.request_id) == ("0", "1")
    for req in (done, cut):
        for i in range(2):
            table.add(req, Sequence(f"{req.request_id}.{i}", req.prompt_token_ids, max_tokens=3), None)
    assert table["1.1"] is cut and len(table) == 4 and cut.num_pending == 0
    for seq in done.seqs:
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, "length"
    finished, aborted = table.abort([done, cut, None])  # None: a request that had not arrived
    assert finished == [done] and aborted == [cut] and len(table) == 0
    assert [s.finish_reason for s in cut.seqs] == ["abort", "abort"]
    assert table.new(None, [4], sp, 3, 0).request_id == "2"  # numbering goes on


def test_a_config_is_frozen_once_checked_and_a_variant_is_checked_again():
    import dataclasses

    cfg = EngineConfig(block_size=8, max_model_len=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.block_size = 0  # would skip the check
    assert dataclasses.replace(cfg, block_size=32).block_size == 32
    with pytest.raises(ValueError, match="block_size must be an integer >= 1, got 0"):
        dataclasses.replace(cfg, block_size=0)
