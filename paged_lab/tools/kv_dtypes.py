"""What an fp8 KV cache changes in a real model's output, measured: :func:`compare_kv_cache_dtypes`
(notebook 08 runs it; ``benchmarks/fp8_kv.py`` on more prompts). An experiment over the engine, so it lives
with the instruments, not in the engine room.

Two engines over one loaded model, alike in everything but ``kv_cache_dtype`` ("auto", the model's dtype,
and "fp8"; ``engine.kv_cache``), generate greedily from the same prompts. Two measures per prompt:

- **tokens**: where the fp8 engine's greedy tokens first differ from the reference's
  (``first_divergence``), and the share of positions whose tokens agree (``tokens_equal_fraction``).
  Once one token differs, the rest of the text continues from another prefix, so this compounds;
- **logits, teacher-forced**: both caches are filled with the *reference's* tokens (prompt + output) in
  one prefill each, and the next-token logits at every output position are compared
  (``max_logit_error``, ``mean_logit_error``: |fp8 - reference|, over positions and vocabulary;
  ``teacher_forced_agreement``: how often fp8's argmax is still the reference's token). Every position
  then reads the same context, so the error is the cache's alone and does not compound.

Both engines run the same attention backend (``"torch"`` by default: the only one here that reads an fp8
cache) so that no kernel difference is counted as the cache's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from paged_lab.engine.attention import AttentionMetadata, PagedAttention
from paged_lab.engine.config import EngineConfig
from paged_lab.engine.engine import LLM
from paged_lab.engine.kv_cache import KVCache
from paged_lab.engine.params import SamplingParams
from paged_lab.kv_math import cdiv

# Varied on purpose: facts, arithmetic, code, a list, a translation, a story, a definition, long context.
DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "What is 17 times 23? Show your working.",
    "Write a Python function that reverses a string.",
    "List three primary colours.",
    "Translate 'good morning, how are you?' into Spanish.",
    "Tell a two-sentence story about a lighthouse keeper.",
    "Explain in one paragraph what a KV cache is in a transformer.",
    "Here is a shopping list: apples, rice, milk, eggs, bread, tea, lemons, flour. "
    "Which items on it are drinks, and which need a fridge?",
)


@dataclass(frozen=True)
class KVDtypeReport:
    """The fp8 cache against the model-dtype cache, one entry per prompt in every per-prompt tuple.

    first_divergence: index of the first generated token where fp8's differs, None if all agree.
    tokens_equal_fraction: share of the ``max_tokens`` positions whose tokens agree.
    teacher_forced_agreement: share of positions where fp8's teacher-forced argmax is the reference token.
    max_logit_error / mean_logit_error: max and mean |delta logit| of the teacher-forced next-token
        logits, over positions and vocabulary.
    kv_bytes: the two pools' bytes for the same number of blocks, ``{reference dtype: ..., "fp8": ...}``.
    max_abs_k / max_abs_v: per layer, the largest |K| (after RoPE) and |V| the reference cache held:
        with scale 1.0, values past 448 would be clamped.
    """

    model: str
    dtype: str  # the model's (and the reference cache's) dtype
    max_tokens: int
    prompts: tuple[str, ...]  # the user messages (each sent inside the chat template)
    reference_tokens: tuple[tuple[int, ...], ...]
    fp8_tokens: tuple[tuple[int, ...], ...]
    first_divergence: tuple[int | None, ...]
    tokens_equal_fraction: tuple[float, ...]
    teacher_forced_agreement: tuple[float, ...]
    max_logit_error: tuple[float, ...]
    mean_logit_error: tuple[float, ...]
    kv_bytes: dict
    max_abs_k: tuple[float, ...]
    max_abs_v: tuple[float, ...]
    seconds: float

    def rows(self) -> list[dict[str, Any]]:
        """One dict per prompt (a table's rows)."""
        return [{"prompt": p, "first_divergence": d, "tokens_equal_fraction": f,
                 "teacher_forced_agreement": a, "max_logit_error": mx, "mean_logit_error": mn}
                for p, d, f, a, mx, mn in zip(self.prompts, self.first_divergence, self.tokens_equal_fraction,
                                              self.teacher_forced_agreement, self.max_logit_error,
                                              self.mean_logit_error)]

    def summary(self) -> str:
        """A few lines of text: the table and the pool sizes."""
        lines = [f"{self.model} ({self.dtype}), {len(self.prompts)} prompts x {self.max_tokens} greedy "
                 f"tokens, fp8 KV cache vs {self.dtype} ({self.seconds:.1f} s)",
                 f"{'#':>2} {'first diff':>10} {'tokens =':>8} {'argmax =':>8} {'max|dlogit|':>11} "
                 f"{'mean|dlogit|':>12}  prompt"]
        for i, r in enumerate(self.rows()):
            d = "-" if r["first_divergence"] is None else r["first_divergence"]
            lines.append(f"{i:>2} {d:>10} {r['tokens_equal_fraction']:>8.2f} "
                         f"{r['teacher_forced_agreement']:>8.2f} {r['max_logit_error']:>11.3f} "
                         f"{r['mean_logit_error']:>12.4f}  {r['prompt'][:40]}")
        ref, fp8 = self.kv_bytes[self.dtype], self.kv_bytes["fp8"]
        lines.append(f"KV pool: {ref:,} bytes ({self.dtype}) vs {fp8:,} bytes (fp8) for the same blocks: "
                     f"{ref / fp8:g}x; largest |K| {max(self.max_abs_k):.1f}, |V| {max(self.max_abs_v):.1f} "
                     f"(fp8 e4m3 holds up to 448)")
        return "\n".join(lines)


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first position where the two token lists differ (a missing token counts), else None."""
    for i in range(max(len(reference), len(other))):
        if i >= len(reference) or i >= len(other) or reference[i] != other[i]:
            return i
    return None


def compare_kv_cache_dtypes(model: Any = "smollm2-135m", prompts=None, max_tokens: int = 32,
                            dtype: Any = "float32", tokenizer: Any = None, block_size: int = 16,
                            attention_backend: str = "torch", chat: bool = True,
                            cpu_prepack: bool | None = None, progress: bool = True) -> KVDtypeReport:
    """Run ``prompts`` (default: :data:`DEFAULT_PROMPTS`) greedily through an fp8-cache engine and a
    model-dtype one and compare them (see the module docstring). ``model``: a name for
    ``models.load_model`` or a loaded transformers model (then pass ``tokenizer``); ``chat``: send each
    prompt inside the tokenizer's chat template, as notebook 07 does; ``cpu_prepack``: the engines' (``LLM``;
    True: a packed copy of the weights, 0.5 GB more RAM for SmolLM2). It takes seconds
    (docs/benchmarks.md, "fp8 KV cache"), shown by a progress bar (``progress=False``: none)."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    loading = EngineConfig(model=model, tokenizer=tokenizer, dtype=dtype)  # (the engines' own loader)
    hf_model, tokenizer, name = loading.load_model(progress)
    prompts = tuple(DEFAULT_PROMPTS if prompts is None else prompts)
    if not prompts or any(not isinstance(p, str) or not p for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty strings")
    texts = [_chat(tokenizer, p) if chat else p for p in prompts]
    lengths = [len(tokenizer(t).input_ids) for t in texts]
    num_blocks = sum(cdiv(n + max_tokens, block_size) for n in lengths)  # every prompt at once, no preemption
    engines = {kind: LLM(hf_model, tokenizer=tokenizer, dtype=dtype, kv_cache_dtype=kind,
                         block_size=block_size, num_kv_blocks=num_blocks, attention_backend=attention_backend,
                         cpu_prepack=cpu_prepack)
               for kind in ("auto", "fp8")}
    greedy = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)  # equal lengths
    label = f"fp8 vs {engines['auto'].cache_dtype} cache"
    with tqdm(total=2 + len(texts), desc=label, disable=not progress) as bar:
        outs = {}
        for kind, llm in engines.items():  # one step of the bar per engine, then one per prompt
            bar.set_postfix_str(f"generating, {kind} cache")
            outs[kind] = llm.generate(texts, greedy, use_tqdm=False)
            bar.update(1)
        ref = [list(o.outputs[0].token_ids) for o in outs["auto"]]
        fp8 = [list(o.outputs[0].token_ids) for o in outs["fp8"]]
        bar.set_postfix_str("teacher-forced logits")
        per_prompt, max_k, max_v = [], None, None
        for out, ref_ids in zip(outs["auto"], ref):
            ref_logits, ref_kv = teacher_forced_logits(engines["auto"], out.prompt_token_ids, ref_ids)
            fp8_logits, _ = teacher_forced_logits(engines["fp8"], out.prompt_token_ids, ref_ids)
            err = (fp8_logits - ref_logits).abs()  # [max_tokens, vocab]
            agree = (fp8_logits.argmax(-1) == torch.tensor(ref_ids)).float().mean().item()
            per_prompt.append((err.max().item(), err.mean().item(), agree))
            k, v = _max_abs_per_layer(ref_kv)
            max_k = k if max_k is None else torch.maximum(max_k, k)
            max_v = v if max_v is None else torch.maximum(max_v, v)
            bar.update(1)
    cache = engines["auto"].cache_dtype
    return KVDtypeReport(
        model=name, dtype=cache, max_tokens=max_tokens, prompts=prompts,
        reference_tokens=tuple(map(tuple, ref)), fp8_tokens=tuple(map(tuple, fp8)),
        first_divergence=tuple(first_divergence(r, f) for r, f in zip(ref, fp8)),
        tokens_equal_fraction=tuple(sum(a == b for a, b in zip(r, f)) / max(len(r), len(f), 1)
                                    for r, f in zip(ref, fp8)),
        teacher_forced_agreement=tuple(a for _, _, a in per_prompt),
        max_logit_error=tuple(m for m, _, _ in per_prompt),
        mean_logit_error=tuple(m for _, m, _ in per_prompt),
        kv_bytes={cache: engines["auto"].kv.bytes, "fp8": engines["fp8"].kv.bytes},
        max_abs_k=tuple(max_k.tolist()), max_abs_v=tuple(max_v.tolist()), seconds=time.perf_counter() - t0)


def teacher_forced_logits(llm: LLM, prompt_ids: list[int],
                          output_ids: list[int]) -> tuple[torch.Tensor, KVCache]:
    """The next-token logits ``[len(output_ids), vocab]`` (fp32) that ``llm``'s model and cache dtype give at
    each output position when the context is ``prompt_ids + output_ids`` (teacher forcing), and the cache
    that one prefill filled. The engine's own pieces, on a fresh cache of its dtype and scales so that
    its pool is untouched: ``PagedLlama.forward`` over one sequence whose blocks are 0, 1, 2, ..."""
    ids = list(prompt_ids) + list(output_ids[:-1])  # the last output token predicts nothing we compare
    n, bs, dev = len(ids), llm.block_size, llm.device
    kv = KVCache(llm.spec, cdiv(n, bs), bs, llm.cache_dtype, dev)
    kv.scales = list(llm.kv.scales)  # the engine's scales (1.0 each by default)
    meta = AttentionMetadata(
        slot_mapping=torch.arange(n, device=dev),  # token i -> slot i: block i // bs, offset i % bs
        block_tables=torch.arange(cdiv(n, bs), dtype=torch.int32, device=dev)[None],  # [1, num_blocks]
        context_lens=torch.tensor([n], dtype=torch.int32, device=dev),
        query_start_loc=torch.tensor([0, n], dtype=torch.int32, device=dev),
        is_decode=n == 1, max_query_len=n, max_context_len=n)
    attend = PagedAttention(llm.attention_backend, like=kv.layers[0], num_heads=llm.runner.num_heads)
    hidden = llm.runner.forward(torch.tensor(ids, device=dev), torch.arange(n, device=dev), kv.layers, meta,
                                attention=attend, kv_scales=kv.scales if kv.quantized else None)
    # hidden: [n, hidden]
    return llm.runner.compute_logits(hidden[len(prompt_ids) - 1:]), kv  # [len(output_ids), vocab]


def _max_abs_per_layer(kv: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest |K| and |V| of each layer of a float cache: ``[num_layers]`` each."""
    data = kv.data.float().abs()  # [layers, 2, blocks, block_size, kv_heads, d]
    per = data.flatten(2).amax(-1)  # [layers, 2]
    return per[:, 0], per[:, 1]


def _chat(tokenizer, question: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
