"""Sliding-window layers in the real engine, checked against transformers.

The model change (``models.sliding_window_variant``: a window on the even layers, not the released
model) is a transformers ``MinistralForCausalLM`` over the same weights, so transformers' own masked
attention, with no cache, is the reference: the paged engine's greedy tokens must equal it, while the
window must really change the tokens (else the check could not fail) and the window group must really
give blocks back."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from paged_lab import LLM, SamplingParams
from paged_lab.engine.kv_groups import LayerGroups
from paged_lab.kv_math import ModelSpec, cdiv
from paged_lab.models import byte_tokenizer, sliding_window_variant


def hf_greedy(model, prompt_ids: list[int], n: int) -> list[int]:
    """n greedy tokens from transformers' forward over the whole sequence each step (no cache)."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        for _ in range(n):
            nxt = model(ids, use_cache=False).logits[0, -1].argmax()
            ids = torch.cat((ids, nxt.view(1, 1)), dim=1)
    return ids[0, len(prompt_ids):].tolist()


def engine_greedy(model, tokenizer, prompts: list[list[int]], n: int, **kw):
    llm = LLM(model, tokenizer=tokenizer, **kw)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        SamplingParams(max_tokens=n, temperature=0, ignore_eos=True), use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs], llm


@pytest.fixture(scope="module")
def tiny():
    """A random 2-layer Llama (layer 0 sliding, layer 1 full once changed) and its byte tokenizer."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         initializer_range=0.3)  # (0.02 gives one token, repeated)
    llama = LlamaForCausalLM(config).eval()
    return llama, sliding_window_variant(llama, 8), byte_tokenizer()


PROMPTS = [list(range(3, 40)), [7] * 5 + list(range(50, 80)), list(range(100, 112))]


@pytest.mark.parametrize("backend", ["auto", "torch", "reference"])
def test_tiny_windowed_engine_equals_transformers(tiny, backend):
    llama, swa, tok = tiny
    n = 40
    got, llm = engine_greedy(swa, tok, PROMPTS, n, block_size=4, num_kv_blocks=96,
                             max_num_batched_tokens=16, attention_backend=backend)  # 16: chunked prefills
    assert got == [hf_greedy(swa, p, n) for p in PROMPTS]
    assert got != [hf_greedy(llama, p, n) for p in PROMPTS]  # the window changed the tokens
    stats = llm.stats()
    assert stats["attention_backend_ran"] == ("torch" if backend == "auto" else backend)
    groups = stats["kv_cache_groups"]
    assert groups["sliding_attention"] == {"layers": [0], "sliding_window": 8, "peak_blocks": groups[
        "sliding_attention"]["peak_blocks"]}
    # the full group keeps every block; a request's window group never more than the window, one step's
    # 16 tokens and the block the window starts in (vLLM's max_admission_blocks_per_request)
    assert groups["sliding_attention"]["peak_blocks"] <= len(PROMPTS) * (cdiv(8 - 1 + 16, 4) + 1)
    assert groups["full_attention"]["peak_blocks"] >= max(cdiv(len(p) + n - 1, 4) for p in PROMPTS)
    assert groups["sliding_attention"]["peak_blocks"] < groups["full_attention"]["peak_blocks"] / 2
    assert stats["kv_cache_tensors"] == 1  # layer 0 and layer 1 share one tensor (each in its group)


def test_tiny_auto_skips_the_c_kernels_and_says_why(tiny):
    _, swa, tok = tiny
    llm = LLM(swa, tokenizer=tok, block_size=16, num_kv_blocks=8)
    assert "sliding window" in llm.stats()["attention_backend_skipped"]["cpu"]


def test_naming_a_backend_without_a_window_raises(tiny):
    _, swa, tok = tiny
    with pytest.raises(ValueError, match="backend='cpu' does not support a sliding window"):
        LLM(swa, tokenizer=tok, block_size=16, num_kv_blocks=8, attention_backend="cpu")


def test_prefix_caching_over_the_window_group_gives_the_same_tokens(tiny):
    """Caching on: twins, a shared system prompt and a request arriving after its twin finished hit the
    cache (a window group's hit finds only its last window's blocks), and every token is transformers'."""
    _, swa, tok = tiny
    system = list(range(3, 30))                                  # 27 tokens: 6 full blocks of 4
    first = [system + [40, 41, 42], system + [50, 51], system + [40, 41, 42]]   # a twin in the same step
    later = [system + [40, 41, 42], system + [60] * 9]           # arrive after the first call finished
    n = 24
    runs = {}
    for caching in (True, False):
        llm = LLM(swa, tokenizer=tok, block_size=4, num_kv_blocks=96, max_num_batched_tokens=16,
                  enable_prefix_caching=caching)
        params = SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)
        outs = [o.outputs[0].token_ids for batch in (first, later)
                for o in llm.generate([{"prompt_token_ids": p} for p in batch], params, use_tqdm=False)]
        runs[caching] = outs, llm.stats()
    (cached, stats), (plain, _) = runs[True], runs[False]
    assert cached == plain == [hf_greedy(swa, p, n) for p in first + later]
    assert stats["enable_prefix_caching"] is True and stats["prefix_cache_hits"] > 0



@pytest.mark.parametrize("kw, match", [({"parallel_sampling": "fork"}, "parallel_sampling='fork'"),
                                       ({"enforce_eager": False}, "enforce_eager=False")])
def test_what_layer_groups_cannot_run_is_refused(tiny, kw, match):
    _, swa, tok = tiny
    with pytest.raises(ValueError, match=match):
        LLM(swa, tokenizer=tok, block_size=16, num_kv_blocks=8, **kw)


def test_a_prompt_past_what_the_groups_share_names_their_limit(tiny):
    """With layer groups one sequence holds less than the whole pool (each group takes blocks of it): the
    engine's check says how many slots, and why, before anything runs."""
    _, swa, tok = tiny
    llm = LLM(swa, tokenizer=tok, block_size=4, num_kv_blocks=8)
    cap = llm.scheduler.max_slots_per_seq
    assert cap < 8 * 4  # the window group keeps blocks of its own: not the whole pool's 32 slots
    with pytest.raises(ValueError, match=rf"prompt has {cap + 1} tokens but one sequence can hold at most "
                                         rf"{cap} \(num_blocks=8 x block_size=4 shared by 2 layer groups\)"):
        llm.generate({"prompt_token_ids": [5] * (cap + 1)}, use_tqdm=False)
    assert llm.block_manager.num_free_blocks == 8 and llm.stats()["num_steps"] == 0


def test_the_pool_is_sized_per_group_as_vllm_sizes_it(tiny):
    """kv_cache_memory buys blocks of one page per layer position in a group, not one per layer."""
    llama, swa, tok = tiny
    page = 16 * ModelSpec.from_hf_config(swa.config).kv_bytes_per_layer_token("float32")
    hybrid = LLM(swa, tokenizer=tok, block_size=16, kv_cache_memory=10 * page)
    plain = LLM(llama, tokenizer=tok, block_size=16, kv_cache_memory=10 * page)
    assert (hybrid.num_blocks, plain.num_blocks) == (10, 5)  # 1 layer per block vs 2
    assert hybrid.kv.bytes == plain.kv.bytes == 10 * page


def test_layer_groups_of_smollm2_shapes():
    """30 layers alternating: two groups of 15, the i-th of each sharing tensor i."""
    types = ["sliding_attention", "full_attention"] * 15
    spec = ModelSpec("x", 30, 9, 3, 64, 576, 100, 0, sliding_window=32, layer_types=tuple(types))
    g = LayerGroups.of(spec)
    assert [x.name for x in g.groups] == ["full_attention", "sliding_attention"]
    assert g.layers["sliding_attention"] == list(range(0, 30, 2))
    assert g.layer_tensor == [i // 2 for i in range(30)] and g.layers_per_block == 15


# ------------------------------------------------------------------------------ SmolLM2 (slow)
SMOL_PROMPTS = [  # each longer than the window of 32 tokens
    "The history of the city begins in the Middle Ages, when a small settlement grew around a river "
    "crossing. Over the centuries merchants, monks and soldiers came and went, and",
    "Here is a recipe for a simple tomato soup. First, chop two onions and three cloves of garlic, then "
    "warm some olive oil in a large pot, add the onions and cook them slowly until they are soft, and",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number, computed iteratively.\"\"\"\n"
    "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\ndef main():\n",
]


@pytest.mark.slow
def test_smollm2_with_a_window_equals_transformers_ministral():
    """SmolLM2 fp32, W=32 on the even layers, blocks of 16, prompts longer than the window, 48 tokens."""
    from paged_lab.models import load_model

    model, tok, _ = load_model("smollm2-135m", progress=False)
    swa = sliding_window_variant(model, 32)
    prompts = [tok(p).input_ids for p in SMOL_PROMPTS]
    assert all(len(p) > 32 for p in prompts)
    n = 48
    got, llm = engine_greedy(swa, tok, prompts, n, block_size=16, num_kv_blocks=256)
    assert got == [hf_greedy(swa, p, n) for p in prompts]
    plain, _ = engine_greedy(model, tok, prompts, n, block_size=16, num_kv_blocks=256)
    assert got != plain  # the window changed what SmolLM2 says
    groups = llm.stats()["kv_cache_groups"]
    assert groups["sliding_attention"]["peak_blocks"] < groups["full_attention"]["peak_blocks"]


def test_reset_prefix_cache_on_a_windowed_engine(tiny):
    """LLM(<window model>, enable_prefix_caching=True).reset_prefix_cache() (a HybridBlockManager had none:
    AttributeError, and the interrupt path that calls it failed too): every group's cached blocks are
    forgotten, the next call finds nothing and gives the same tokens."""
    _, swa, tok = tiny
    got, llm = engine_greedy(swa, tok, PROMPTS, 8, block_size=4, num_kv_blocks=96, enable_prefix_caching=True)
    cached = len(llm.block_manager.pool.block_hash)
    assert cached and llm.reset_prefix_cache() == cached
    llm.block_manager.check_invariants()
    hits = llm.stats()["prefix_cache_hits"]
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                        SamplingParams(max_tokens=8, temperature=0, ignore_eos=True), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == got
    assert llm.stats()["prefix_cache_hits"] == hits  # nothing was left to find
