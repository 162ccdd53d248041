"""PagedLlama (our forward over the paged KV cache) against transformers: teacher-forced logits."""

import pytest
import torch

from paged_lab.engine.attention import AttentionMetadata
from paged_lab.engine.llama import TORCH_OPS, Linear, PagedLlama
from paged_lab.engine.rope import rope_inv_freq
from paged_lab.kernels.cpu import fast_path
from paged_lab.kernels.cpu.linear import can_prepack

pytestmark = pytest.mark.slow

U = 2.0**-24  # fp32's unit roundoff


class PagedRun:
    """Drive PagedLlama by hand: sequences get scattered (non-contiguous) blocks of a small pool."""

    def __init__(self, runner: PagedLlama, block_size: int, num_blocks: int = 64, seed: int = 0):
        self.runner, self.block_size = runner, block_size
        shape = (num_blocks, block_size, runner.num_kv_heads, runner.head_dim)
        self.kv = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(runner.num_layers)]
        self.free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
        self.tables: dict[int, list[int]] = {}

    def slot(self, sid: int, pos: int) -> int:
        table = self.tables.setdefault(sid, [])
        while len(table) <= pos // self.block_size:
            table.append(self.free.pop())
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def step(self, chunks: list[tuple[int, list[int], int]]) -> torch.Tensor:
        """chunks: (seq id, token ids, start position). Returns logits of every query token."""
        ids, pos, slots, qsl, ctx = [], [], [], [0], []
        for sid, toks, start in chunks:
            ids += toks
            pos += list(range(start, start + len(toks)))
            slots += [self.slot(sid, p) for p in range(start, start + len(toks))]
            qsl.append(qsl[-1] + len(toks))
            ctx.append(start + len(toks))
        width = max(len(self.tables[sid]) for sid, _, _ in chunks)
        tables = [self.tables[sid] + [0] * (width - len(self.tables[sid])) for sid, _, _ in chunks]
        meta = AttentionMetadata(torch.tensor(slots), torch.tensor(tables, dtype=torch.int32),
                                 torch.tensor(ctx, dtype=torch.int32), torch.tensor(qsl, dtype=torch.int32),
                                 is_decode=qsl[-1] == len(chunks))
        hidden = self.runner.forward(torch.tensor(ids), torch.tensor(pos), self.kv, meta)
        return self.runner.compute_logits(hidden)


def cpu_ops(model, prepack: bool):
    """The ops an engine runs on a CPU (``kernels.cpu.fast_path``), with or without packed weights."""
    return fast_path.install(TORCH_OPS, model, prepack)


@pytest.fixture(scope="module", params=["packed", "F.linear", "torch"])
def runner(smollm2, request):
    """Every path: the CPU fast path with packed weights (where oneDNN can pack them) and without (the
    model's own tensors: the engine's default), and the plain torch forward with none of the fast path."""
    model = smollm2[0]
    if request.param == "torch":
        return PagedLlama.from_hf(model)
    prepack = request.param == "packed" and can_prepack(model.get_input_embeddings().weight)
    return PagedLlama.from_hf(model, cpu_ops(model, prepack))


@pytest.fixture(scope="module")
def smollm2_f64(smollm2):
    """The same model in float64: the reference both fp32 forwards are measured against."""
    import copy

    return copy.deepcopy(smollm2[0]).double()


def assert_logits_match(got: torch.Tensor, model, model_f64, seqs: list[list[int]], rows=None) -> None:
    """Our fp32 logits are as close to the float64 forward as transformers' own fp32 forward is.

    A fixed atol flaked: an fp32 forward of 30 layers errs by ~1e-4 on logits of ~40, and which kernels
    oneDNN and the C attention pick (AVX2 or AVX-512, 1 or 2 threads) moves that by 2x. So the bound is 3x
    transformers' own fp32 error against float64, plus a floor of 16 unit roundoffs of the largest logit
    for when that error happens to be tiny. A wrong attention or cache read errs by 0.1-10.
    ``rows``: per sequence, how many leading logits ``got`` holds (default: all)."""
    rows = rows or [len(ids) for ids in seqs]
    want32 = torch.cat([hf_logits(model, ids)[:n] for ids, n in zip(seqs, rows)]).double()
    with torch.no_grad():
        want64 = torch.cat([model_f64(torch.tensor([ids])).logits[0][:n] for ids, n in zip(seqs, rows)])
    ours, theirs = (got.double() - want64).abs().max().item(), (want32 - want64).abs().max().item()
    bound = 3 * theirs + 16 * U * want64.abs().max().item()
    assert ours <= bound, f"our fp32 logits err by {ours:.3g} against float64, transformers' by {theirs:.3g}"


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:",
           "Once upon a time, in a land far away, there lived"]


def test_prefill_logits_match_transformers(smollm2, smollm2_f64, runner):
    model, tok, _ = smollm2
    ids = tok(PROMPTS[0]).input_ids
    got = PagedRun(runner, block_size=4).step([(0, ids, 0)])
    assert_logits_match(got, model, smollm2_f64, [ids])


def test_batched_prefills_of_different_lengths_match(smollm2, smollm2_f64, runner):
    model, tok, _ = smollm2
    seqs = [tok(p).input_ids for p in PROMPTS]
    got = PagedRun(runner, block_size=8).step([(i, ids, 0) for i, ids in enumerate(seqs)])
    assert_logits_match(got, model, smollm2_f64, seqs)


@pytest.mark.parametrize("block_size", [1, 3])
def test_chunked_prefill_then_decode_matches(smollm2, smollm2_f64, runner, block_size):
    """Teacher forcing through the cache: a first chunk, a second chunk reading it, then one token at a time,
    with two sequences interleaved in every step."""
    model, tok, _ = smollm2
    a = tok(PROMPTS[1]).input_ids
    b = tok(PROMPTS[2]).input_ids
    run = PagedRun(runner, block_size)
    got_a, got_b = [], []
    got_a.append(run.step([(0, a[:5], 0)]))
    both = run.step([(0, a[5:9], 5), (1, b[:7], 0)])
    got_a.append(both[:4])
    got_b.append(both[4:])
    for p in range(9, 13):  # four decode steps; a then b each step
        pb = p - 2
        chunks = [(0, [a[p]], p)] + ([(1, [b[pb]], pb)] if pb >= 7 else [])
        out = run.step(chunks)
        got_a.append(out[:1])
        if len(chunks) == 2:
            got_b.append(out[1:])
    got_a = torch.cat(got_a)
    got_b = torch.cat(got_b)
    assert_logits_match(got_a, model, smollm2_f64, [a], rows=[len(got_a)])
    assert_logits_match(got_b, model, smollm2_f64, [b], rows=[len(got_b)])


def test_llama3_rope_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                      max_position_embeddings=131072,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192})
    ours, scale = rope_inv_freq(cfg, 64)
    theirs, their_scale = ROPE_INIT_FUNCTIONS["llama3"](cfg, None)
    assert scale == their_scale
    torch.testing.assert_close(ours, theirs.float(), atol=0, rtol=0)
    plain, _ = rope_inv_freq(LlamaConfig(hidden_size=2048, num_attention_heads=32, head_dim=64,
                                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
                                         64)
    assert (ours <= plain).all() and (ours < plain).any()  # low frequencies stretched, high ones kept
    assert ours[0] == plain[0] and ours[-1] == pytest.approx(plain[-1] / 32)


def test_untied_head_llama3_rope_and_qkv_bias_on_a_tiny_random_model():
    """Weights we never see in SmolLM2: an untied lm_head, Llama-3 RoPE at long positions, q/k/v biases."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                      attention_bias=True, max_position_embeddings=4096,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64})
    model = LlamaForCausalLM(cfg).eval()
    for lin in (model.model.layers[0].self_attn.q_proj, model.model.layers[1].self_attn.v_proj):
        torch.nn.init.normal_(lin.bias, std=0.5)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    runner = PagedLlama.from_hf(model)
    ids = torch.randint(0, 97, (300,)).tolist()  # past original_max_position_embeddings
    got = PagedRun(runner, block_size=16, num_blocks=32).step([(0, ids, 0)])
    torch.testing.assert_close(got, hf_logits(model, ids), atol=1e-4, rtol=1e-4)


def test_packed_weights_are_shared_per_model_and_plain_runners_use_the_models_tensors(smollm2):
    model = smollm2[0]
    if not can_prepack(model.get_input_embeddings().weight):
        pytest.skip("torch built without mkldnn: nothing is packed")
    packed = PagedLlama.from_hf(model, cpu_ops(model, prepack=True))
    again = PagedLlama.from_hf(model, cpu_ops(model, prepack=True))
    assert again.layers[0].qkv is packed.layers[0].qkv  # several engines over one model share one copy
    plain = PagedLlama.from_hf(model, cpu_ops(model, prepack=False))
    assert plain.ops.linear is Linear and plain.layers[0].qkv is not packed.layers[0].qkv
    assert plain.layers[0].qkv.weights[0] is not None and not hasattr(plain.layers[0].qkv, "packed")
    # the model's own tensors are used as they are, never copied
    assert (plain.layers[0].qkv.weights[0].data_ptr()
            == model.model.layers[0].self_attn.q_proj.weight.data_ptr())
    assert plain.lm_head.weights[0].data_ptr() == model.lm_head.weight.data_ptr()


def test_packed_weights_follow_a_change_of_the_models_tensors():
    """A model whose tensors changed after its first engine (moved to another dtype and back) is packed
    anew (the kept copy would be stale); a plain runner follows a dtype change, as it holds the tensors."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    model = LlamaForCausalLM(cfg).eval()
    if not can_prepack(model.get_input_embeddings().weight):
        pytest.skip("torch built without mkldnn: nothing is packed")
    first = PagedLlama.from_hf(model, cpu_ops(model, prepack=True))
    assert first.dtype == torch.float32
    assert PagedLlama.from_hf(model, cpu_ops(model, prepack=True)).layers[0].qkv is first.layers[0].qkv
    model.double().float()  # new tensors, the same values
    second = PagedLlama.from_hf(model, cpu_ops(model, prepack=True))
    assert second.layers[0].qkv is not first.layers[0].qkv
    q_proj = model.model.layers[0].self_attn.q_proj.weight
    assert second.layers[0].qkv.weights[0].data_ptr() == q_proj.data_ptr()
    model.to(torch.bfloat16)
    plain = PagedLlama.from_hf(model)
    assert plain.dtype == torch.bfloat16 and plain.layers[0].qkv.weights[0].dtype == torch.bfloat16
