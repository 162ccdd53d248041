"""The engine benchmark: one skewed workload, paged_lab against two transformers baselines, one process.

Workload (fixed, seeded): ``num_requests`` prompts of 8-48 tokens; most ask for a few output tokens,
``num_long`` ask for many. Every request generates exactly its ``max_tokens`` (EOS ignored everywhere),
so all three runs produce the same number of useful tokens and tokens/s compare directly.

- **paged_lab**: ``LLM.generate`` - continuous batching over the paged KV cache,
  ``max_num_seqs = batch_size``.
- **hf_static**: transformers ``generate`` on padded batches of ``batch_size`` in arrival order; a batch
  runs until its longest member is done (tokens past a request's own max_tokens are not counted).
- **hf_generate_batch**: transformers' own paged continuous batching (the manager behind
  ``model.generate_batch``, fed request by request so each keeps its own ``max_new_tokens``),
  at most ``batch_size`` requests per batch.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import time
from dataclasses import dataclass, field

import torch

from paged_lab.kv_math import cdiv

METHODS = ("paged_lab", "hf_static", "hf_generate_batch")

_TEXT = (
    "The history of computing is a story of memory. Early machines stored a few thousand words, and "
    "programmers counted every one of them. Today a language model answers questions by reading its "
    "own past: for every token it has seen it keeps a key and a value in each layer, and the next token "
    "looks back at all of them. Serving many users at once means keeping many such caches in one GPU, "
    "and the way that memory is cut into pieces decides how many users fit. Operating systems solved a "
    "similar puzzle decades ago with pages, page tables and copy-on-write."
)


@dataclass(frozen=True)
class BenchRequest:
    prompt_token_ids: list[int]
    max_tokens: int


@dataclass
class RunResult:
    method: str
    seconds: float
    output_tokens: int  # useful tokens: each request's own max_tokens
    # paged_lab only: seconds of each engine step by kind, "prefill" (steps that carry prompt tokens) or
    # "decode N" (N sequences, one token each), from the engine's own timeline
    steps: dict[str, list[float]] = field(default_factory=dict)
    token_ids: list[list[int]] = field(default_factory=list)  # paged_lab only: each request's output tokens

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


@dataclass
class BenchReport:
    workload: list[BenchRequest]
    batch_size: int
    threads: int
    runs: dict[str, list[RunResult]] = field(default_factory=dict)
    paged_lab_weights: str = ""  # how paged_lab multiplies: "packed copy" or "model tensors (F.linear)"
    paged_lab_attention: str = ""  # the attention backend(s) that ran (llm.stats()), and any fallbacks

    def median_tokens_per_s(self, method: str) -> float:
        return statistics.median(r.tokens_per_s for r in self.runs[method])

    def ratio(self, method: str, baseline: str) -> float:
        return self.median_tokens_per_s(method) / self.median_tokens_per_s(baseline)


def bench_workload(tokenizer, num_requests: int = 32, num_long: int = 4,
                   short_tokens: tuple[int, int] = (4, 16),
                   long_tokens: int = 128, seed: int = 0) -> list[BenchRequest]:
    """The fixed skewed workload: ``num_requests - num_long`` short outputs, ``num_long`` long ones."""
    if not 0 <= num_long <= num_requests:
        raise ValueError(f"num_long must be in [0, num_requests={num_requests}], got {num_long}")
    rng = random.Random(seed)
    text_ids = tokenizer(_TEXT).input_ids
    long_at = set(rng.sample(range(num_requests), num_long))
    out = []
    for i in range(num_requests):
        start, length = rng.randrange(0, len(text_ids) - 48), rng.randint(8, 48)
        n = long_tokens if i in long_at else rng.randint(*short_tokens)
        out.append(BenchRequest(text_ids[start:start + length], n))
    return out


def _useful(workload) -> int:
    return sum(r.max_tokens for r in workload)


def run_paged_lab(llm, workload, use_tqdm=False) -> RunResult:
    """``use_tqdm``: generate()'s (a callable makes its progress bar)."""
    from paged_lab.engine import SamplingParams

    params = [SamplingParams(temperature=0, max_tokens=r.max_tokens, ignore_eos=True) for r in workload]
    # every run starts cold: prompt blocks cached by the previous repeat would be free prefill work that
    # the baselines do not get (hits between this run's own prompts still count)
    llm.reset_prefix_cache()
    first = llm.scheduler.step_count  # (the timeline keeps the latest rows: select by step)
    t = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": r.prompt_token_ids} for r in workload], params,
                        use_tqdm=use_tqdm)
    seconds = time.perf_counter() - t
    made = sum(len(o.outputs[0].token_ids) for o in outs)
    assert made == _useful(workload), f"paged_lab produced {made} tokens, expected {_useful(workload)}"
    steps: dict[str, list[float]] = {}
    for step in (t for t in llm.timeline if t["step"] > first):
        kind = "prefill" if step["num_prefill"] else f"decode {step['num_decode']}"
        steps.setdefault(kind, []).append(step["seconds"])
    return RunResult("paged_lab", seconds, made, steps, [list(o.outputs[0].token_ids) for o in outs])


def run_hf_static(model, tokenizer, workload, batch_size: int, on_batch=None) -> RunResult:
    """Padded batches in arrival order, each run until its longest member has its tokens;
    ``on_batch(i, n)`` is told as batch i of n starts (a progress bar's postfix)."""
    from transformers import GenerationConfig

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    t = time.perf_counter()
    for b in range(0, len(workload), batch_size):
        batch = workload[b:b + batch_size]
        if on_batch is not None:
            on_batch(b // batch_size + 1, cdiv(len(workload), batch_size))
        width = max(len(r.prompt_token_ids) for r in batch)
        ids = torch.tensor([[pad] * (width - len(r.prompt_token_ids)) + r.prompt_token_ids for r in batch])
        mask = torch.tensor([[0] * (width - len(r.prompt_token_ids)) + [1] * len(r.prompt_token_ids)
                             for r in batch])
        longest = max(r.max_tokens for r in batch)
        gc = GenerationConfig(max_new_tokens=longest, min_new_tokens=longest, do_sample=False,
                              pad_token_id=pad, eos_token_id=None)
        with torch.inference_mode():
            out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                                 generation_config=gc)
        assert out.shape[1] == width + longest, "hf_static stopped early"
    if model.device.type == "cuda":
        # stop the clock when the GPU has finished, not when it was told to
        torch.cuda.synchronize(model.device)
    return RunResult("hf_static", time.perf_counter() - t, _useful(workload))


def run_hf_generate_batch(model, workload, batch_size: int) -> RunResult:
    """transformers' paged continuous batching (``generate_batch``'s manager), EOS disabled."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.utils import logging as hf_logging

    gc = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                          max_new_tokens=max(r.max_tokens for r in workload))
    cbc = ContinuousBatchingConfig(max_requests_per_batch=batch_size)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        t = time.perf_counter()
        with model.continuous_batching_context_manager(generation_config=gc,
                                                       continuous_batching_config=cbc) as m:
            ids = [m.add_request(r.prompt_token_ids, max_new_tokens=r.max_tokens, eos_token_id=-1)
                   for r in workload]
            done: dict[str, int] = {}
            while len(done) < len(ids):
                res = m.get_result(timeout=1)
                if res is not None and res.is_finished():
                    done[res.request_id] = len(res.generated_tokens)
                elif res is None and not m.is_running():
                    raise RuntimeError("transformers' continuous batching loop stopped unexpectedly")
        seconds = time.perf_counter() - t
    finally:
        hf_logging.set_verbosity(verbosity)
    made = sum(done.values())
    assert made == _useful(workload), f"generate_batch produced {made} tokens, expected {_useful(workload)}"
    return RunResult("hf_generate_batch", seconds, made)


def run_bench(model_name: str = "smollm2-135m", repeats: int = 1, batch_size: int = 8,
              threads: int | None = None,
              methods: tuple[str, ...] = METHODS, num_requests: int = 32, num_long: int = 4,
              long_tokens: int = 128, progress: bool = True, loaded=None,
              enforce_eager: bool = True, cpu_prepack: bool | None = None) -> BenchReport:
    """Load the model once, then run each method ``repeats`` times, interleaved (noise hits all alike).

    cpu_prepack: passed to paged_lab's ``LLM``: None or False (its default) multiplies with the model's own
    tensors, True with a packed copy of them (``kernels.cpu.fast_path``; ``python -m paged_lab bench``).

    enforce_eager=False: paged_lab compiles its decode steps first (``LLM(enforce_eager=False)``); the
    compile time is start-up, outside the timed runs, as vLLM's is. That compiler path is CPU-only: on a
    GPU the engine runs eagerly and the report says so."""
    from tqdm.auto import tqdm

    from paged_lab.engine import LLM
    from paged_lab.models import load_model

    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"methods must be among {METHODS}, got {sorted(unknown)}")
    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    model, tok, _ = loaded or load_model(model_name, dtype="float32", progress=progress)
    workload = bench_workload(tok, num_requests, num_long, long_tokens=long_tokens)
    report = BenchReport(workload, batch_size, threads, {m: [] for m in methods})
    # KV pool: room for batch_size of the largest requests, twice over (no preemption; little RAM)
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in workload)
    num_kv_blocks = 2 * batch_size * cdiv(longest, 16)
    on_cpu = next(model.parameters()).device.type == "cpu"
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")  # the loaded model's, bf16 on a GPU
    llm = (LLM(model, tokenizer=tok, dtype=dtype, max_num_seqs=batch_size, block_size=16,
               num_kv_blocks=num_kv_blocks,
               enforce_eager=enforce_eager or not on_cpu, compile_progress=progress, cpu_prepack=cpu_prepack)
           if "paged_lab" in methods else None)
    if llm is not None:
        report.paged_lab_weights = (f"packed copy ({llm.runner.ops.name})" if cpu_prepack
                                    else f"model tensors (F.linear; {llm.runner.ops.name})")
        if llm.compiled is not None:
            report.paged_lab_weights += (f"; decode batches of <= {llm.compiled.capture_sizes[-1]} compiled "
                                         f"(sizes {', '.join(map(str, llm.compiled.capture_sizes))})")
        elif not enforce_eager:
            report.paged_lab_weights += "; every step eager (compiled decode steps are CPU-only)"
    with tqdm(total=len(methods) * (repeats + 1), desc="bench", disable=not progress) as bar:
        runners = _runners(llm, model, tok, batch_size, bar if progress else None)
        warm = workload[:2]
        for m in methods:  # warm-up: first-touch of weights and caches, kernel selection
            bar.set_postfix_str(f"warm-up {m}")
            runners[m]([BenchRequest(r.prompt_token_ids, 2) for r in warm])
            bar.update(1)
        for i in range(repeats):
            for m in methods:
                bar.set_postfix_str(f"{m} run {i + 1}/{repeats}")
                res = runners[m](workload)
                report.runs[m].append(res)
                bar.write(f"{m} run {i + 1}/{repeats}: {res.tokens_per_s:.1f} tok/s ({res.seconds:.1f} s)")
                bar.update(1)
    if llm is not None:
        report.paged_lab_attention = attention_summary(llm.stats())
    return report


def _runners(llm, model, tok, batch_size: int, bar) -> dict:
    """``{method: run(workload)}``. With a progress ``bar``, a run of seconds shows its own progress:
    paged_lab's generate() bar (gone when done), hf_static's batch in ``bar``'s postfix."""
    from tqdm.auto import tqdm

    generate_bar = bar is not None and functools.partial(tqdm, leave=False)
    on_batch = None if bar is None else (lambda i, n: bar.set_postfix_str(f"hf_static batch {i}/{n}"))
    return {
        "paged_lab": lambda w: run_paged_lab(llm, w, generate_bar),
        "hf_static": lambda w: run_hf_static(model, tok, w, batch_size, on_batch=on_batch),
        "hf_generate_batch": lambda w: run_hf_generate_batch(model, w, batch_size),
    }


def attention_summary(stats: dict) -> str:
    """The attention backend that ran, from ``llm.stats()``: "cpu", or "torch (auto
    fell back 3 times ...)"."""
    text = stats["attention_backend_ran"] or "none"
    if stats["attention_failures"]:
        failed = ", ".join(f"{name} failed {n} times" for name, n in stats["attention_failures"].items())
        text += f" (backend={stats['attention_backend']!r} fell back: {failed})"
    return text


def format_report(report: BenchReport) -> str:
    w = report.workload
    lens = sorted(r.max_tokens for r in w)
    lines = [
        f"workload: {len(w)} requests, prompts {min(len(r.prompt_token_ids) for r in w)}-"
        f"{max(len(r.prompt_token_ids) for r in w)} tokens, outputs {lens[0]}-{lens[-1]} tokens "
        f"(median {statistics.median(lens):g}), {sum(lens)} output tokens in all",
        f"batch size {report.batch_size}, torch threads {report.threads}, runs per method "
        f"{len(next(iter(report.runs.values())))}" + (f"; paged_lab weights: {report.paged_lab_weights}"
                                                       if report.paged_lab_weights else ""),
        f"{'method':<20}{'median tok/s':>14}{'median s':>10}   runs (tok/s)",
    ]
    if report.paged_lab_attention:
        lines.insert(2, f"paged_lab attention backend: {report.paged_lab_attention}")
    for m, runs in report.runs.items():
        secs = statistics.median(r.seconds for r in runs)
        per = ", ".join(f"{r.tokens_per_s:.1f}" for r in runs)
        lines.append(f"{m:<20}{report.median_tokens_per_s(m):>14.1f}{secs:>10.2f}   {per}")
    if report.runs.get("paged_lab"):
        lines += format_steps(report.runs["paged_lab"])
        for base in ("hf_static", "hf_generate_batch"):
            if base in report.runs:
                lines.append(f"paged_lab / {base}: {report.ratio('paged_lab', base):.2f}x")
    return "\n".join(lines)


def format_steps(runs: list[RunResult]) -> list[str]:
    """paged_lab's step times in its median run, by kind ("prefill", "decode N"): count, total, median."""
    runs = sorted(runs, key=lambda r: r.tokens_per_s)
    median = runs[(len(runs) - 1) // 2]
    lines = [f"paged_lab's steps in its median run ({median.tokens_per_s:.1f} tok/s), by kind: "
             "count, total s, median ms"]
    for kind, secs in sorted(median.steps.items(), key=lambda kv: (kv[0] != "prefill", len(kv[0]), kv[0])):
        lines.append(f"  {kind:<12}{len(secs):>5}{sum(secs):>8.2f}{statistics.median(secs) * 1e3:>9.1f}")
    return lines
