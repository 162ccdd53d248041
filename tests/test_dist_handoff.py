"""Disaggregated prefill/decode (paged_lab.engine.dist.handoff): a prefill worker process computes each
prompt's KV and sends its full blocks over torch.distributed; the decode engine writes them into blocks of
its own and decodes. The tokens are a single engine's, and the decode engine computed only what did not
travel."""

import pytest

from paged_lab.engine import LLM, SamplingParams
from paged_lab.engine.dist.handoff import PrefillWorker, disaggregated_generate

# 5, 13 and 2 tokens or so in blocks of 4: full blocks travel, a short prompt sends nothing
PROMPTS = ["The capital of France is", "A paged KV cache stores each request's keys and values in",
           "Hi"]
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


def test_prefill_worker_hands_kv_to_the_decode_engine_with_a_single_engines_tokens(smollm2):
    model, tok, spec = smollm2
    kw = dict(tokenizer=tok, block_size=4, num_kv_blocks=64, cpu_prepack=False)
    single = [o.outputs[0].token_ids for o in LLM(model, **kw).generate(PROMPTS, GREEDY, use_tqdm=False)]
    decode = LLM(model, **kw)
    worker = PrefillWorker.start(decode, num_kv_blocks=32)
    try:
        outputs, reports = disaggregated_generate(decode, worker, PROMPTS, GREEDY)
    finally:
        worker.stop()
    assert [o.outputs[0].token_ids for o in outputs] == single
    per_token = spec.kv_bytes_per_token("float32")
    for out, rep in zip(outputs, reports):
        n = len(out.prompt_token_ids)
        assert rep["sent_blocks"] == n // 4 == len(rep["decode_blocks"])
        assert rep["bytes"] == rep["sent_blocks"] * 4 * per_token
        assert out.num_cached_tokens == 4 * rep["sent_blocks"]  # the decode side skipped what arrived
    assert reports[-1]["sent_blocks"] == 0 and reports[0]["sent_blocks"] > 0
    assert not any(p.is_alive() for p in worker.workers.procs)


def test_the_decode_engine_needs_prefix_caching(smollm2):
    model, tok, _ = smollm2
    llm = LLM(model, tokenizer=tok, num_kv_blocks=8, enable_prefix_caching=False, cpu_prepack=False)
    with pytest.raises(ValueError, match="enable_prefix_caching=True"):
        PrefillWorker.start(llm)
