"""Two threads calling generate() on one LLM (issue 35): an LLM is not thread-safe, as vLLM's LLM is not.
The second call raises at once a RuntimeError naming the concurrent use and changes nothing; the first
runs to the end as if alone."""

import threading

import pytest
from test_engine_phases import _tiny_llama, _Tok

from paged_lab.engine import LLM, SamplingParams

PROMPTS = [{"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12, 13]}, {"prompt_token_ids": [20, 21, 22]}]
PARAMS = SamplingParams(temperature=1.0, seed=3, max_tokens=8, ignore_eos=True)


def _engine(model):
    return LLM(model, tokenizer=_Tok(), block_size=4, num_kv_blocks=32, attention_backend="torch")


def _tokens(outs):
    return [[c.token_ids for c in o.outputs] for o in outs]


def test_a_second_thread_gets_a_clear_error_and_the_first_call_is_unharmed(monkeypatch):
    model = _tiny_llama()
    fresh = _tokens(_engine(model).generate(PROMPTS, PARAMS, use_tqdm=False))
    llm = _engine(model)
    in_step, go_on = threading.Event(), threading.Event()
    forward = llm.run_model

    def slow_forward(batch):  # the first thread waits inside its first step while the second one calls
        in_step.set()
        assert go_on.wait(30)
        return forward(batch)

    monkeypatch.setattr(llm, "run_model", slow_forward)
    result = {}
    first = threading.Thread(target=lambda: result.update(outs=llm.generate(PROMPTS, PARAMS, use_tqdm=False)),
                             name="first")
    first.start()
    assert in_step.wait(30)
    second = {}

    def call_again():
        try:
            llm.generate(PROMPTS, PARAMS, use_tqdm=False)
        except RuntimeError as err:
            second["error"] = str(err)

    other = threading.Thread(target=call_again, name="second")
    other.start()
    other.join(30)
    with pytest.raises(RuntimeError, match="concurrent use"):
        llm.step()  # a bare step from this thread is refused too
    go_on.set()
    first.join(60)
    assert "concurrent use of one LLM is not supported" in second["error"]
    assert "generate() in thread 'first'" in second["error"] and "not thread-safe" in second["error"]
    assert _tokens(result["outs"]) == fresh
    llm.block_manager.check_invariants()
    assert llm.block_manager.num_free_blocks == llm.num_blocks and not llm.scheduler.has_unfinished()
    monkeypatch.undo()
    assert _tokens(llm.generate(PROMPTS, PARAMS, use_tqdm=False)) == fresh  # (and it is free again)
