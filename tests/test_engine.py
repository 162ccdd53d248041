"""The paged engine on SmolLM2 (fp32, greedy) against Hugging Face transformers, token for token."""

import pytest
import torch

from paged_lab.engine import LLM, SamplingParams
from paged_lab.engine.llama import Linear
from paged_lab.kernels.cpu.linear import can_prepack

pytestmark = pytest.mark.slow

SYSTEM = "You are a terse assistant. Answer in one short sentence, then stop. "
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:",
    SYSTEM + "Question: what colour is the sky?",
    SYSTEM + "Question: how many legs does a spider have?",
    "1, 2, 3, 4,",
]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def prompt_ids(smollm2):
    _, tok, _ = smollm2
    return [tok(p).input_ids for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_greedy(smollm2, prompt_ids):
    """transformers generate, one prompt at a time (no padding), greedy."""
    model = smollm2[0]
    out = []
    for ids in prompt_ids:
        with torch.no_grad():
            seq = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)
        out.append(seq[0, len(ids):].tolist())
    return out


def make_llm(smollm2, **kw):
    model, tok, _ = smollm2
    kw.setdefault("num_kv_blocks", 128)
    return LLM(model, tokenizer=tok, **kw)


GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)


def tokens(outs):
    return [o.outputs[0].token_ids for o in outs]


def test_greedy_matches_hf_generate_and_returns_vllm_shaped_outputs(smollm2, prompt_ids, hf_greedy):
    llm = make_llm(smollm2)
    outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert tokens(outs) == hf_greedy
    tok = smollm2[1]
    for p, ids, o in zip(PROMPTS, prompt_ids, outs):
        assert o.prompt == p and o.prompt_token_ids == ids
        c = o.outputs[0]
        ended = c.token_ids[-1] == tok.eos_token_id  # the system-prompt questions answer and stop
        assert c.finish_reason == ("stop" if ended else "length")
        assert len(c.token_ids) == MAX_TOKENS or ended
        assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)
    assert "Paris" in outs[0].outputs[0].text
    st = llm.stats()
    assert st["num_steps"] == MAX_TOKENS  # all five fit: one prefill step samples token 1, then decodes
    assert [t["num_running"] for t in st["timeline"]][:2] == [5, 5]
    assert st["kv_usage"] == 0 and st["num_free_blocks"] == st["num_blocks"]  # everything freed
    assert {e.kind for e in st["events"]} >= {"allocate", "append", "free"}


@pytest.mark.parametrize("block_size,caching", [(1, True), (3, False), (7, True), (16, False), (64, True)])
def test_block_size_and_prefix_caching_do_not_change_tokens(smollm2, prompt_ids, hf_greedy, block_size,
                                                            caching):
    llm = make_llm(smollm2, block_size=block_size, num_kv_blocks=2048 // block_size + 8,
                   enable_prefix_caching=caching)
    assert tokens(llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], GREEDY,
                               use_tqdm=False)) == hf_greedy


def test_prefix_cache_hits_on_a_shared_system_prompt(smollm2, prompt_ids, hf_greedy):
    llm = make_llm(smollm2, block_size=4)
    first = llm.generate([{"prompt_token_ids": prompt_ids[2]}], GREEDY, use_tqdm=False)
    assert first[0].num_cached_tokens == 0
    again = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids[2:4]], GREEDY, use_tqdm=False)
    st = llm.stats()
    shared = len(smollm2[1](SYSTEM.rstrip()).input_ids)
    # the whole first prompt (but its last token) and the shared system-prompt blocks come from the cache
    assert again[0].num_cached_tokens == (len(prompt_ids[2]) - 1) // 4 * 4
    assert again[1].num_cached_tokens >= (shared - 1) // 4 * 4 > 0
    assert st["prefix_cache_hits"] == again[0].num_cached_tokens + again[1].num_cached_tokens
    assert tokens(first + again) == [hf_greedy[2], hf_greedy[2], hf_greedy[3]]


@pytest.mark.parametrize("max_num_seqs,max_num_batched_tokens", [(1, None), (2, 10), (5, 3)])
def test_batch_composition_and_chunked_prefill_do_not_change_tokens(smollm2, prompt_ids, hf_greedy,
                                                                    max_num_seqs, max_num_batched_tokens):
    llm = make_llm(smollm2, block_size=8, max_num_seqs=max_num_seqs,
                   max_num_batched_tokens=max_num_batched_tokens)
    assert tokens(llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], GREEDY,
                               use_tqdm=False)) == hf_greedy


def test_memory_pressure_preempts_and_recomputes_without_changing_tokens(smollm2, prompt_ids, hf_greedy):
    # 6 blocks of 4 slots: two sequences of ~20 tokens cannot both grow, so one is preempted, recomputed.
    llm = make_llm(smollm2, block_size=4, num_kv_blocks=11, enable_prefix_caching=False)
    outs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], GREEDY, use_tqdm=False)
    st = llm.stats()
    assert st["num_preemptions"] > 0
    assert st["peak_kv_usage"] > 0.9
    assert tokens(outs) == hf_greedy


def test_parallel_sampling_forks_and_copies_on_write(smollm2, prompt_ids, hf_greedy):
    ids = prompt_ids[0]
    assert len(ids) % 4  # the last prompt block is partly full: the children's first appends must copy it
    llm = make_llm(smollm2, block_size=4, parallel_sampling="fork")  # the paper's design (V1's is "prefix")
    out = llm.generate({"prompt_token_ids": ids}, SamplingParams(n=3, temperature=0, max_tokens=MAX_TOKENS),
                       use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert all(c.token_ids == hf_greedy[0] for c in out.outputs)
    st = llm.stats()
    assert st["num_cow"] == 2  # each child copies the shared last block once; the parent keeps it
    forks = [e for e in st["events"] if e.kind == "fork"]
    assert len(forks) == 2
    assert st["prefix_cache_queries"] == len(ids)  # the prompt was prefilled once, not three times


def test_seeded_sampling_is_reproducible_whatever_the_batch(smollm2, prompt_ids):
    story = {"prompt_token_ids": smollm2[1]("Once upon a time").input_ids}
    sp = SamplingParams(temperature=1.0, top_p=0.95, top_k=50, max_tokens=4, seed=123, n=2)
    llm = make_llm(smollm2)
    alone = llm.generate(story, sp, use_tqdm=False)[0]
    crowd = llm.generate([{"prompt_token_ids": prompt_ids[0]}, story, story],
                         [SamplingParams(temperature=1.0, max_tokens=4), sp,
                          SamplingParams(temperature=1.0, top_k=1, max_tokens=4, seed=5)], use_tqdm=False)
    assert [c.token_ids for c in alone.outputs] == [c.token_ids for c in crowd[1].outputs]
    assert alone.outputs[0].token_ids != alone.outputs[1].token_ids  # children draw their own tokens
    greedy = llm.generate(story, SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)[0]
    assert crowd[2].outputs[0].token_ids == greedy.outputs[0].token_ids  # top_k=1 leaves only the argmax


def test_eos_stop_strings_and_ignore_eos(smollm2):
    model, tok, _ = smollm2
    question = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
    chat = tok.apply_chat_template(question, tokenize=False, add_generation_prompt=True)
    ids = tok(chat).input_ids
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0, len(ids):].tolist()
    assert ref[-1] == tok.eos_token_id and len(ref) < 16  # HF stops on EOS too
    llm = make_llm(smollm2)
    eos, more, cut = llm.generate(
        [chat] * 3,
        [SamplingParams(temperature=0, max_tokens=16),
         SamplingParams(temperature=0, max_tokens=len(ref) + 2, ignore_eos=True),
         SamplingParams(temperature=0, max_tokens=16, stop=["="])],
        use_tqdm=False)
    assert eos.outputs[0].token_ids == ref and eos.outputs[0].finish_reason == "stop"
    assert more.outputs[0].token_ids[: len(ref)] == ref and len(more.outputs[0].token_ids) == len(ref) + 2
    assert more.outputs[0].finish_reason == "length"
    full = eos.outputs[0].text
    assert "=" in full
    assert cut.outputs[0].text == full[: full.index("=")] and cut.outputs[0].finish_reason == "stop"
    assert len(cut.outputs[0].token_ids) < len(ref)  # it stopped early instead of only trimming the text


def test_triton_backend_gives_the_torch_backend_tokens(smollm2, prompt_ids, hf_greedy):
    """Triton's interpreter on CPU (compiled kernels on a GPU): a few tokens, two sequences."""
    llm = make_llm(smollm2, block_size=16, attention_backend="triton")
    sp = SamplingParams(temperature=0, max_tokens=3)
    outs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids[:2]], sp, use_tqdm=False)
    assert tokens(outs) == [t[:3] for t in hf_greedy[:2]]


def test_with_prepacked_weights_the_tokens_are_the_same(smollm2, prompt_ids, hf_greedy):
    """cpu_prepack=True: a packed copy of the weights (kernels.cpu.fast_path); the default, and
    cpu_prepack=False, multiply with the model's own tensors through F.linear (the RAM-saving path)."""
    default, unpacked = make_llm(smollm2), make_llm(smollm2, cpu_prepack=False)
    assert default.runner.ops.linear is unpacked.runner.ops.linear is Linear
    if not can_prepack(smollm2[0].get_input_embeddings().weight):
        pytest.skip("torch built without mkldnn: nothing is packed")
    llm = make_llm(smollm2, cpu_prepack=True)
    assert llm.runner.ops.linear is not Linear
    assert tokens(llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], GREEDY,
                               use_tqdm=False)) == hf_greedy


def test_the_torch_attention_code_gives_the_same_tokens_as_the_c_kernels(smollm2, prompt_ids, hf_greedy):
    """On a CPU with AVX-512 the other tests' attention runs in C (the "cpu" backend); the torch
    backend's own gather + SDPA code must give HF's tokens as well."""
    llm = make_llm(smollm2, attention_backend="torch")
    assert tokens(llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], GREEDY,
                               use_tqdm=False)) == hf_greedy


def test_reset_prefix_cache_makes_the_next_run_cold(smollm2, prompt_ids, hf_greedy):
    llm = make_llm(smollm2, block_size=4)
    ids = [{"prompt_token_ids": p} for p in prompt_ids[2:4]]  # the two that share the system prompt
    llm.generate(ids, GREEDY, use_tqdm=False)
    warm = llm.generate(ids, GREEDY, use_tqdm=False)
    assert all(o.num_cached_tokens > 0 for o in warm)
    assert llm.reset_prefix_cache() > 0
    cold = llm.generate(ids[:1], GREEDY, use_tqdm=False)
    assert cold[0].num_cached_tokens == 0 and tokens(cold) == hf_greedy[2:3]


def test_compiled_decode_steps_give_the_eager_tokens(smollm2, prompt_ids, hf_greedy):
    """enforce_eager=False with one captured size, 2: decode batches of 2 run the compiled graph, a
    batch of 1 is padded to 2, larger batches and prefills stay eager; the tokens stay HF's."""
    llm = make_llm(smollm2, enforce_eager=False, compile_sizes=(2,), compile_progress=False)
    max_tokens = [6, 2, 3, 5, 1]  # requests finish one by one, so the decode batch shrinks 4 -> 3 -> 2 -> 1
    params = [SamplingParams(temperature=0, max_tokens=m) for m in max_tokens]
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    assert tokens(outs) == [hf[:m] for hf, m in zip(hf_greedy, max_tokens)]
    assert llm.compiled.num_calls[2] >= 2  # the graph ran, padded or not
    # and on the same engine, batched the other way round
    assert tokens(llm.generate(PROMPTS[::-1], GREEDY, use_tqdm=False)) == hf_greedy[::-1]
