"""An interrupted generate() (Ctrl-C, or an exception inside a step) aborts the requests of that call,
frees their blocks and leaves the engine as usable as a fresh one: same tokens, stats() works."""

import os
import signal

import pytest
from test_engine_phases import _tiny_llama, _Tok  # the same 2-layer random Llama and id tokenizer

from paged_lab.engine import LLM, SamplingParams

PROMPTS = [{"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12, 13]}, {"prompt_token_ids": [20, 21, 22]}]
PARAMS = [SamplingParams(temperature=0, max_tokens=24, ignore_eos=True),  # the longer request
          SamplingParams(temperature=1.0, seed=3, max_tokens=8, ignore_eos=True)]


@pytest.fixture(scope="module")
def tiny():
    return _tiny_llama()


def _engine(model, **kw):
    kw.setdefault("num_kv_blocks", 32)
    return LLM(model, tokenizer=_Tok(), block_size=4, attention_backend="torch", **kw)


def _tokens(llm, prompts=PROMPTS, params=PARAMS):
    return [[c.token_ids for c in out.outputs] for out in llm.generate(prompts, params, use_tqdm=False)]


def _ctrl_c():
    """A real SIGINT to this process, as the terminal sends on Ctrl-C: Python raises KeyboardInterrupt in
    the main thread at its next bytecode."""
    os.kill(os.getpid(), signal.SIGINT)


def _on_call(k: int, action, fn):
    """``fn``, doing ``action()`` just before its k-th call (1-based)."""
    calls = []

    def hooked(*args, **kwargs):
        calls.append(1)
        if len(calls) == k:
            action()
        return fn(*args, **kwargs)
    return hooked


def _assert_recovered(llm, fresh_tokens, prompts=PROMPTS, params=PARAMS, mid_step=True):
    """Nothing queued or held, stats() works (one timeline row per step, the interrupted one marked), and
    the next two calls give a fresh engine's tokens."""
    assert not llm.scheduler.has_unfinished()
    llm.block_manager.check_invariants()
    assert llm.block_manager.num_free_blocks == llm.num_blocks  # every block of the aborted call freed
    st = llm.stats()
    assert st["timeline"][-1]["interrupted"] is mid_step and len(st["timeline"]) == st["num_steps"]
    for _ in range(2):
        assert _tokens(llm, prompts, params) == fresh_tokens
    assert llm.stats()["num_free_blocks"] == llm.num_blocks and not llm.scheduler.has_unfinished()


@pytest.mark.parametrize("forward", [1, 5], ids=["in-the-prefill", "in-a-decode"])
def test_ctrl_c_in_the_middle_of_a_step_aborts_the_call(tiny, monkeypatch, forward):
    """Ctrl-C during the k-th forward: the step finishes (a Ctrl-C is held until the step's end, so the
    scheduler and the pool are never cut half-way), then the call stops and aborts its requests."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # SIGINT -> KeyboardInterrupt
    fresh = _engine(tiny)
    fresh_tokens = _tokens(fresh)
    assert _tokens(fresh) == fresh_tokens  # (a second call hits the prefix cache, same tokens)

    llm = _engine(tiny)
    monkeypatch.setattr(llm, "run_model", _on_call(forward, _ctrl_c, llm.run_model))
    with pytest.raises(KeyboardInterrupt, match="held until the step"), pytest.warns(
            RuntimeWarning, match=r"2 unfinished request.*aborted"):
        llm.generate(PROMPTS, PARAMS, use_tqdm=False)
    monkeypatch.undo()
    assert llm.stats()["num_steps"] == forward  # the step the Ctrl-C came in finished, and was the last
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
    _assert_recovered(llm, fresh_tokens, mid_step=False)


def test_ctrl_c_between_steps_of_a_chunked_prefill(tiny, monkeypatch):
    """Ctrl-C between two steps while a long prompt is prefilled in chunks: its full blocks were cached
    when it was admitted, before the later chunks wrote their KV, so the prefix cache is dropped too."""
    long_prompt = [{"prompt_token_ids": list(range(30, 50))}, PROMPTS[1]]  # 20 tokens: chunks of 8, 8, 4
    fresh_tokens = _tokens(_engine(tiny, max_num_batched_tokens=8), long_prompt)

    llm = _engine(tiny, max_num_batched_tokens=8)
    monkeypatch.setattr(llm, "step", _on_call(2, _ctrl_c, llm.step))  # before step 2: blocks 2-4 hold no KV
    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning, match="prefix cache was reset"):
        llm.generate(long_prompt, PARAMS, use_tqdm=False)
    monkeypatch.undo()
    assert llm.stats()["num_steps"] == 2  # (a Ctrl-C between two steps is raised at the end of the next)
    _assert_recovered(llm, fresh_tokens, long_prompt, mid_step=False)


@pytest.mark.parametrize("mode", ["fork", "prefix"])
def test_an_exception_inside_a_step_aborts_the_call(tiny, monkeypatch, mode):
    """An exception raised by one forward, after the n = 3 completions were forked: all of them are
    aborted and freed, the error reaches the caller, and the next calls run as on a fresh engine."""
    params = [SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=6, ignore_eos=True), PARAMS[1]]
    fresh_tokens = _tokens(_engine(tiny, parallel_sampling=mode), params=params)

    def fail():
        raise RuntimeError("the device fell over")

    llm = _engine(tiny, parallel_sampling=mode)
    monkeypatch.setattr(llm, "run_model", _on_call(3, fail, llm.run_model))
    with pytest.raises(RuntimeError, match="fell over"), pytest.warns(RuntimeWarning, match="RuntimeError"):
        llm.generate(PROMPTS, params, use_tqdm=False)
    monkeypatch.undo()
    _assert_recovered(llm, fresh_tokens, params=params)
    assert llm.latency()["e2e_steps_p50"] > 0  # the aborted requests are not counted: no None in latency
