"""The engine's step phases and what they hand the kernels: generators on the sampling device, host
ints instead of device reads, bad token ids, the attention backend named in stats, and the compiled
decode graph running the eager layer function (biases included)."""

import pytest
import torch

from paged_lab.engine import LLM, SamplingParams
from paged_lab.kernels import dispatch


def _tiny_llama(bias=False, layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                      attention_bias=bias, mlp_bias=bias, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval()
    if bias:  # transformers zero-initialises biases: make them matter
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.Linear) and m.bias is not None:
                    m.bias.normal_(0, 0.5)
    return model


class _Tok:
    """Just enough tokenizer for token-id prompts."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def _llm(model=None, **kw):
    kw.setdefault("num_kv_blocks", 32)
    return LLM(model or _tiny_llama(), tokenizer=_Tok(), block_size=4, **kw)


PROMPTS = [{"prompt_token_ids": [5, 6, 7, 8, 9, 10]}, {"prompt_token_ids": [11, 12, 13]}]


def test_a_float_token_id_is_rejected_naming_its_index():
    llm = _llm()
    with pytest.raises(ValueError,
                       match=r"prompts\[1\]: prompt_token_ids\[0\] must be an integer token id, got 1.5"):
        llm.generate([PROMPTS[0], {"prompt_token_ids": [1.5, 2]}], use_tqdm=False)
    with pytest.raises(ValueError, match=r"prompt_token_ids\[1\] must be an integer"):
        llm.generate({"prompt_token_ids": [1, True]}, use_tqdm=False)
    assert llm.stats()["num_steps"] == 0


def test_every_generator_lives_on_the_device_of_the_logits_it_samples(monkeypatch):
    """Sampling on CUDA needs CUDA generators: make_generator gets the engine's device, and every
    generator handed to sample() is on the device of the logits it samples from."""
    from paged_lab.engine import engine, parallel_sampling, sampling

    made, seen = [], []

    def spy_make(seed, device="not given"):
        made.append(device)
        return sampling.make_generator(seed, "cpu" if device == "not given" else device)

    def spy_sample(logits, params, gens):
        seen.extend((g.device, logits.device) for g in gens if g is not None)
        return sampling.sample(logits, params, gens)

    monkeypatch.setattr(parallel_sampling, "make_generator", spy_make)  # every completion's RNG is made there
    monkeypatch.setattr(engine, "sample", spy_sample)
    monkeypatch.setattr(parallel_sampling, "sample", spy_sample)  # a forked child's first token
    llm = _llm()
    llm.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_tokens=3, seed=1), use_tqdm=False)
    assert len(made) == 2 * 3 and all(torch.device(d) == llm.device for d in made)
    assert seen and all(g == lg for g, lg in seen)


def test_the_forward_reads_nothing_back_from_the_device(monkeypatch):
    """With the step's metadata checked and its plan built, a forward runs no .item()/int()/tolist() on
    a tensor (each one is a device sync per call on a GPU): the engine passes max_query_len and the
    longest context as host ints."""
    llm = _llm()
    llm.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)  # a warm cache
    llm._add_request(None, [11, 12, 13], SamplingParams(temperature=0, max_tokens=3))
    llm._add_request(None, [14, 15, 16, 17, 18], SamplingParams(temperature=0, max_tokens=3))
    llm.step()  # their prefills
    batch = llm.prepare_batch(llm.scheduler.schedule())  # their first decodes
    llm.attention.prepare(batch.meta, *llm.kv.layers[0])  # checked and planned, as its first layer does
    reads = []
    for name in ("item", "tolist", "__int__", "__bool__", "__index__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda self, *a, _n=name, _r=real: reads.append(_n) or _r(self, *a))
    llm.run_model(batch)
    monkeypatch.undo()
    assert reads == []


def test_max_query_len_reaches_the_prefill_kernel(monkeypatch):
    """paged_attention_prefill gets the step's longest query from the engine (Triton sizes its grid
    with it instead of reading it from the device every layer)."""
    import dataclasses

    got = []
    torch_backend = dispatch.BACKEND_TABLE["torch"]

    def prefill(*args, max_query_len=None, **kw):
        got.append(max_query_len)
        return torch_backend.prefill(*args, max_query_len=max_query_len, **kw)

    table = dict(dispatch.BACKEND_TABLE, torch=dataclasses.replace(torch_backend, prefill=prefill))
    monkeypatch.setattr(dispatch, "BACKEND_TABLE", table)
    llm = _llm(attention_backend="torch")
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    assert got and set(got) == {6}  # one prefill step of 6 + 3 tokens, every layer told 6


def test_stats_name_the_backend_that_ran():
    llm = _llm()
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    st = llm.stats()
    ran = dispatch.resolve_backend("auto", *llm.kv.layers[0])
    assert st["attention_backend"] == "auto" and st["attention_backend_ran"] == ran
    assert st["attention_calls"][ran] > 0 and st["attention_failures"] == {}
    ref = _llm(attention_backend="reference")
    ref.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert ref.stats()["attention_backend_ran"] == "reference"


def test_the_engine_chooses_its_backend_once_and_checks_each_step_once(monkeypatch):
    """Attention runs once per layer per step, but the backend is chosen once, when the engine is built
    (no per-call choice), and each step's indices are checked once, not once per layer."""
    from paged_lab.kernels import checks

    chosen, step_checks = [], []
    real_candidates, real_check_step = dispatch._candidates, checks.check_step
    monkeypatch.setattr(dispatch, "_candidates", lambda *a: chosen.append(a[0]) or real_candidates(*a))
    monkeypatch.setattr(checks, "check_step", lambda *a: step_checks.append(1) or real_check_step(*a))
    llm = _llm(model=_tiny_llama(layers=3))
    assert chosen == ["auto"]  # at build time
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    steps = len(llm.timeline)
    assert chosen == ["auto"] and steps > 1 and len(step_checks) == steps
    assert sum(llm.stats()["attention_calls"].values()) >= 3 * steps  # yet every layer of every step ran


def test_under_auto_a_failing_backend_falls_back_per_call_and_shows_in_stats(monkeypatch, caplog):
    """backend="auto": when the chosen backend raises, the call runs on the next one, the failure is
    logged and counted in llm.stats(), and the next call tries the chosen backend again."""
    import dataclasses

    real = dispatch._candidates
    monkeypatch.setattr(dispatch, "_candidates", lambda b, kc, vc, q=None, sliding_window=None: (
        ["reference", "torch"] if b == "auto" else real(b, kc, vc, q, sliding_window)))
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("launch failed")

    table = dict(dispatch.BACKEND_TABLE)
    table["reference"] = dataclasses.replace(table["reference"], store_and_decode=broken)
    monkeypatch.setattr(dispatch, "BACKEND_TABLE", table)
    want = _llm(attention_backend="torch").generate(PROMPTS, SamplingParams(temperature=0, max_tokens=4),
                                                    use_tqdm=False)
    llm = _llm()
    with caplog.at_level("WARNING", logger="paged_lab.kernels"):
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in want]
    st = llm.stats()
    decode_calls = 3 * 2  # 3 decode steps x 2 layers, every one tried on "reference" first
    assert len(calls) == decode_calls and st["attention_failures"] == {"reference": decode_calls}
    assert "launch failed" in st["attention_errors"]["reference"]
    assert st["attention_calls"]["reference"] > 0  # its prefills still ran: nothing was switched off
    assert sum("launch failed" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.slow
def test_compiled_decode_graph_matches_the_eager_forward_layer_by_layer():
    """enforce_eager=False on a tiny model with q/k/v/o and MLP biases: the attention inputs of every
    layer (q, k, v) and the logits of every decode step equal the eager engine's."""
    model = _tiny_llama(bias=True)
    sp = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)

    def run(llm):
        seen, logits_seen = [], []
        attend, sample = llm.attention, llm._sample

        def spy(q, k, v, k_cache, v_cache, meta, scale):
            if meta.is_decode:
                seen.append((q.clone(), k.clone(), v.clone()))
            return attend(q, k, v, k_cache, v_cache, meta, scale)

        def spy_sample(logits, seqs):
            logits_seen.append(logits.clone())
            return sample(logits, seqs)

        llm.attention, llm._sample = spy, spy_sample
        outs = llm.generate(PROMPTS, sp, use_tqdm=False)
        return seen, logits_seen, [o.outputs[0].token_ids for o in outs]

    eager_seen, eager_logits, eager_tokens = run(_llm(model))
    compiled = _llm(model, enforce_eager=False, compile_sizes=(2,), compile_progress=False)
    assert compiled.compiled.graph.layers[0].qkv.biases[0] is not None  # the biases are in the graph
    compiled_seen, compiled_logits, compiled_tokens = run(compiled)
    assert compiled.compiled.num_calls[2] == 3  # every decode step ran the graph
    assert len(compiled_seen) == len(eager_seen) == 3 * 2  # 3 steps x 2 layers
    for (eq, ek, ev), (cq, ck, cv) in zip(eager_seen, compiled_seen):
        for e, c in ((eq, cq), (ek, ck), (ev, cv)):
            torch.testing.assert_close(c, e, atol=1e-5, rtol=1e-5)
    assert len(compiled_logits) == len(eager_logits) == 4  # the prefill step, then 3 decode steps
    for e, c in zip(eager_logits, compiled_logits):
        torch.testing.assert_close(c, e, atol=1e-4, rtol=1e-4)
    assert compiled_tokens == eager_tokens
