"""LLM: the paged engine, in vLLM's shape.

    llm = LLM("smollm2-135m", block_size=16)
    outs = llm.generate(["The capital of France is"], SamplingParams(max_tokens=8, temperature=0))
    outs[0].outputs[0].text

One engine step (``LLM.step``), in the phases of nano-vllm's model runner:
  0. ``Scheduler.schedule()`` picks the batch: new prefills (only their uncached tokens) and one
     decode token per running sequence; it reserves slots in the BlockManager, preempting when full.
     Copy-on-write block copies are applied to the KV tensors;
  1. ``prepare_batch``: one flat ``Batch`` of every scheduled query token, with the attention metadata
     (slot_mapping, block tables, context lengths) the kernels read;
  2. ``run_model``: one forward over the batch (``PagedLlama``, or a compiled decode graph), attention
     through ``paged_lab.kernels``; it returns the logits of the sampled rows only;
  3. ``postprocess``: sample, ``Scheduler.update()`` appends the tokens and finishes sequences (EOS,
     max_tokens); "fork" mode forks n > 1 children; the engine adds stop strings and extra EOS ids.

Around the step, in their own modules: ``engine.inputs`` checks what ``generate()`` is given,
``engine.parallel_sampling`` makes the n completions of a request, ``engine.metrics`` times the steps
and computes ``stats()``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from collections.abc import Sequence as _Seq
from dataclasses import dataclass
from typing import Any

import torch

from paged_lab import _interrupts as interrupts
from paged_lab import kernels
from paged_lab.engine import dist, inputs
from paged_lab.engine.concurrency import OneCaller
from paged_lab.engine.kv_cache import KVCache, resolve_kv_cache_dtype, resolve_num_blocks
from paged_lab.engine.kv_groups import LayerGroups
from paged_lab.engine.llama import AttentionMetadata, PagedAttention, PagedLlama
from paged_lab.engine.metrics import EngineMetrics, engine_stats, progress_bar, show_progress
from paged_lab.engine.parallel_sampling import ParallelSampling
from paged_lab.engine.params import CompletionOutput, RequestOutput, SamplingParams
from paged_lab.engine.request import Request
from paged_lab.engine.sampling import sample
from paged_lab.kv_math import ModelSpec, canonical_dtype
from paged_lab.sched import Scheduler, Sequence, SequenceStatus


@dataclass
class Batch:
    """One step's model input: the query tokens of every scheduled sequence, concatenated, one-token
    queries (decodes) first. num_tokens = sum of query lengths; num_seqs = len(scheduled)."""

    scheduled: list  # [num_seqs] ScheduledSeq, in batch order
    input_ids: torch.Tensor  # int64 [num_tokens]
    positions: torch.Tensor  # int64 [num_tokens]: each token's position in its sequence
    meta: AttentionMetadata | list  # slot_mapping [num_tokens], block_tables [num_seqs, max_blocks], ...;
    # layer groups: one per layer (each its group's)
    sample_rows: list[int]  # [num_sampled]: the row of each sampled sequence's last query token
    sample_seqs: list[Sequence]  # [num_sampled]: the sequence each of those rows samples for

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]


class LLM:
    """A paged-KV inference engine over a Llama-family transformers model.

    model: a name or path for ``paged_lab.models.load_model`` ("smollm2-135m" ships offline), or an
        already loaded transformers model (then pass ``tokenizer`` too).
    block_size: tokens per KV block. num_kv_blocks / kv_cache_memory: size of the pool, in blocks or in
        bytes (default 512 MiB); max_num_seqs: sequences running at once; max_num_batched_tokens: tokens
        computed per step (default 4,096: vLLM V1's offline ``LLM`` on a CPU, ``get_batch_defaults`` in
        ``vllm/engine/arg_utils.py``, which picks 8,192-16,384 on GPUs); a longer prompt is prefilled in
        chunks (chunked prefill, on by default in V1). None: no limit.
    enable_prefix_caching: reuse KV blocks of identical prompt prefixes (vLLM's automatic prefix caching).
        A model with sliding-window layers (``config.layer_types``; ``models.sliding_window_variant``)
        runs its layer groups on a ``HybridBlockManager`` (``engine.kv_groups``), prefix caching included:
        a window group's hit needs only the blocks of its last window, as in vLLM.
    kv_cache_dtype: what the KV pool holds, vLLM's names: "auto" (the model's dtype) or "fp8" (K and V as
        ``torch.float8_e4m3fn``, 1 byte a number, with one scale per layer for K and one for V, 1.0 as
        vLLM's default; ``engine.kv_cache``). An fp8 pool holds 4x the tokens of fp32 in the same
        ``kv_cache_memory`` (2x bf16's). The C and Triton kernels read float caches, so "auto" runs the
        torch backend on an fp8 pool (``stats()["attention_backend_skipped"]`` says why);
        ``engine.kv_quant.compare_kv_cache_dtypes`` measures what fp8 changes in the output.
    attention_backend: "auto" (Triton on CUDA; on a CPU the C kernels where they can run, else torch),
        "triton", "cpu" (C kernels), "torch", "reference" (``paged_lab.kernels``). ``stats()`` says which ran.
    preemption: "recompute" (a preempted sequence drops its blocks and is prefilled again later).
    parallel_sampling: how ``SamplingParams(n > 1)`` shares the prompt (``engine.parallel_sampling``).
        "fork" (the paper, vLLM V0): once the prompt is prefilled, n - 1 children fork the parent's block
        table (refcounts) and draw their first token from its logits; the first write into a shared,
        partly filled block is a copy-on-write (a child that finds no free window of ``max_num_seqs``
        waits in the queue and is prefilled anew once admitted). "prefix" (vLLM V1): n - 1 independent
        requests with the same prompt, added with it, which find its full blocks in the prefix cache
        (``enable_prefix_caching``) and compute the rest themselves; no copy-on-write. Both give the same
        tokens (completion i samples with seed + i). Default: "prefix", as vLLM V1.
    enforce_eager: True (the default) runs every step eagerly. False compiles the decode step with
        ``torch.compile`` (``engine.compiled``: frozen weights, generated C++ GEMMs, fused element-wise
        ops) for the batch sizes ``compile_sizes`` (default 1, 2, 4; a decode batch is padded up to the
        next one, larger batches and prefills stay eager). CPU float32 only. Compiling takes about a
        minute per size on a laptop CPU, once per engine (``compile_progress`` shows a bar), and holds
        another packed copy of the weights; it pays off in long runs (``benchmarks/engine_bench.py``).
        vLLM compiles by default; paged_lab does not, because notebooks and tests must start fast.
    cpu_prepack: multiply with a packed copy of the weights (``engine.linear``): the C panel matmul
        (``kernels.cpu_gemm``, AVX-512) for decode-sized batches, oneDNN where it cannot run; faster decode
        steps on CPU (docs/benchmarks.md), at the cost of a second copy of the weights in RAM (+540 MB for
        SmolLM2 in fp32; bf16 also keeps oneDNN's copy for prefills, +2 x 270 MB). None -> on wherever it
        applies (CPU, fp32/bf16); False -> the model's own tensors.
    """

    def __init__(self, model: Any = "smollm2-135m", tokenizer: Any = None, dtype: Any = "float32",
                 block_size: int = 16, num_kv_blocks: int | None = None, kv_cache_memory: int | None = None,
                 max_num_seqs: int = 32, max_num_batched_tokens: int | None = 4096,
                 enable_prefix_caching: bool = True, kv_cache_dtype: str = "auto",
                 attention_backend: str = "auto",
                 preemption: str = "recompute", device: str | None = None, max_model_len: int | None = None,
                 parallel_sampling: str = "prefix",
                 cpu_prepack: bool | None = None, enforce_eager: bool = True,
                 compile_sizes: tuple[int, ...] | None = None, compile_progress: bool = True,
                 tensor_parallel_size: int = 1):
        tp = dist.check_args(tensor_parallel_size, enforce_eager, parallel_sampling)
        inputs.check_engine_args(attention_backend, preemption, block_size, compile_sizes, parallel_sampling)
        resolve_kv_cache_dtype(kv_cache_dtype, "float32")  # a bad name raises before the model loads
        inputs.check_flags(enable_prefix_caching=enable_prefix_caching, enforce_eager=enforce_eager,
                           compile_progress=compile_progress, cpu_prepack=cpu_prepack)
        max_model_len = inputs.check_max_model_len(max_model_len)
        hf_model, self.tokenizer, self.model_name = _load(model, tokenizer, dtype, device)
        self.hf_model = hf_model
        self.device = next(hf_model.parameters()).device
        self.dtype = canonical_dtype(dtype)
        self.kv_cache_dtype = kv_cache_dtype
        self.cache_dtype = resolve_kv_cache_dtype(kv_cache_dtype, self.dtype)  # "float32", ..., or "fp8"
        self.spec = ModelSpec.from_hf_config(hf_model.config, name=self.model_name)
        inputs.check_compilable(enforce_eager, self.device, self.dtype, self.cache_dtype)
        self.runner = PagedLlama.from_hf(hf_model, prepack=cpu_prepack if tp == 1 else False)
        self.max_model_len = inputs.model_len(max_model_len, self.runner.max_model_len)
        self.block_size = block_size
        self.layer_groups = groups = LayerGroups.of(self.spec)  # one group, unless some layers have a window
        inputs.check_layer_groups(groups.hybrid, parallel_sampling, enforce_eager)
        self.tensor_parallel_size, rank_spec = tp, dist.rank_spec(self.spec, tp)  # one rank's KV heads
        self.num_blocks = resolve_num_blocks(rank_spec, block_size, self.cache_dtype, num_kv_blocks,
                                             kv_cache_memory,  # fp8: 1 byte a number
                                             groups.layers_per_block if groups.hybrid else None)
        self.kv = KVCache(rank_spec, self.num_blocks, block_size, self.cache_dtype, self.device,
                          size_arg="num_kv_blocks" if num_kv_blocks is not None else "kv_cache_memory",
                          layer_tensor=groups.layer_tensor)  # the i-th layers of all groups share tensor i
        self.block_manager = groups.block_manager(self.num_blocks, block_size, enable_prefix_caching,
                                                  max_num_batched_tokens)
        self.scheduler = Scheduler(self.block_manager, max_num_seqs=max_num_seqs, mode="continuous",
                                   preemption="recompute", max_num_batched_tokens=max_num_batched_tokens)
        self.attention_backend = attention_backend
        if tp > 1:  # rank 0 (here) keeps the Scheduler and the pool of its heads; workers run the others
            self.runner = dist.start_tensor_parallel(self.runner, tp, self.kv, self.cache_dtype,
                                                     attention_backend, groups.hybrid)
        self.kernel_stats = kernels.KernelStats()  # which attention backend ran, and any fallbacks
        # The attention backend is chosen once, here, for this cache (one that cannot run here raises now)
        self._attend = PagedAttention(attention_backend, stats=self.kernel_stats, like=self.kv.layers[0],
                                      num_heads=self.runner.num_heads, sliding_window=groups.sliding_window)
        self.enable_prefix_caching = enable_prefix_caching
        self.eos_token_ids = _eos_ids(hf_model, self.tokenizer)
        self.inputs = inputs.InputProcessor(self.tokenizer, self.spec.vocab_size, self.max_model_len,
                                            self.scheduler)
        self._requests: dict[Any, Request] = {}  # seq_id -> its request
        self.parallel = ParallelSampling(parallel_sampling, self.scheduler, self._requests,
                                         self.eos_token_ids, self.device)
        self._next_request = 0
        self.compiled = None  # engine.compiled.CompiledDecoder when enforce_eager=False
        if not enforce_eager:
            self.compiled = self._compile(compile_sizes, progress=compile_progress)
        self.metrics = EngineMetrics(self.scheduler, self.block_manager, self.layer_groups)  # times, timeline
        self._caller = OneCaller()  # generate() from two threads at once: the second raises

    @property
    def timeline(self) -> list[dict]:
        """One row per step, the latest ``EngineMetrics.TIMELINE_ROWS`` (1,024) steps: batch composition, KV
        usage, seconds (``EngineMetrics.record_step``); ``row["step"]`` says which step it is."""
        return list(self.metrics.timeline)

    def _compile(self, sizes, progress: bool):
        """The compiled decode graphs (enforce_eager=False), warmed up: each size compiles now, once."""
        from paged_lab.engine.compiled import DEFAULT_CAPTURE_SIZES, CompiledDecoder

        compiled = CompiledDecoder(self.runner, DEFAULT_CAPTURE_SIZES if sizes is None else sizes)
        compiled.warm_up(self.kv.layers, progress=progress)
        return compiled

    # ------------------------------------------------------------------------------------ generate
    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool | Callable[..., Any] = True, arrival_steps=None) -> list[RequestOutput]:
        """Run every prompt to completion; one RequestOutput per prompt, in order.

        prompts: a string, ``{"prompt_token_ids": [...]}``, or a list of them.
        sampling_params: one SamplingParams for all prompts, or a list with one per prompt.
        use_tqdm: show a progress bar counting output tokens (a request that stops early counts as done
            at once), or, as in vLLM, a callable that makes it (``functools.partial(tqdm, leave=False)``).
        arrival_steps: None (every request arrives now) or one integer >= 0 per prompt: prompt i joins
            the scheduler when ``arrival_steps[i]`` engine steps of this call have run (0: at once), as
            requests reach a server over time (``workloads.poisson_arrivals`` makes seeded ones). Each
            output's ``metrics`` records its arrival, first scheduled step, first token and finish.

        Every request is validated before any work starts (``engine.inputs``): an empty prompt, a prompt
        as long as the model context or longer than the whole KV pool, a prompt + max_tokens that can
        never fit in the pool, or a bad SamplingParams field (max_tokens < 1, temperature < 0 or not
        finite, top_p outside (0, 1], n < 1, a seed that is not an integer in [0, 2**64 - n], ...) raises
        ValueError naming the prompt index and the field, and nothing runs.

        Interrupted (Ctrl-C, or an exception inside a step): a Ctrl-C lets the step in progress finish
        (``paged_lab._interrupts``) and stops the call there. Every unfinished request of the call is
        aborted -- its tokens dropped, nothing is resumed later -- the scheduler and the KV pool are
        emptied (every block free, the prefix cache dropped), a RuntimeWarning says how many requests
        were lost, and the exception is raised again. The engine is then as usable as a new one: run the
        prompts again with a new call.

        Not thread-safe, as vLLM's ``LLM`` is not: a second generate() on the same engine while one runs
        (another thread) raises RuntimeError at once, changing nothing; give each thread its own LLM.
        """
        with self._caller.call("generate()"), interrupts.held():  # one call at a time; Ctrl-C at step ends
            prepared = self.inputs.process(prompts, sampling_params)
            arrivals = inputs.check_arrival_steps(arrival_steps, len(prepared))
            requests: list[Request | None] = [None] * len(prepared)  # filled in as they arrive
            total = sum(sp.n * self.inputs.max_tokens(ids, sp) for _, ids, sp in prepared)
            try:
                with progress_bar(use_tqdm, total) as bar:
                    self._run(prepared, arrivals, requests, bar)
            except BaseException as err:  # KeyboardInterrupt included: the engine must survive a Ctrl-C
                with interrupts.atomic():
                    self._abort_interrupted(requests, err)
                raise
            with interrupts.atomic():
                outputs = [self._output(r) for r in requests]
                self.metrics.retire(requests)  # their latencies and counts; the engine keeps no request
                self._requests.clear()
            return outputs

    def _run(self, prepared, arrivals: list[int], requests: list, bar) -> None:
        """Step until every request of ``prepared`` has arrived (``arrivals``) and finished; ``requests[i]``
        is set when prompt i joins the scheduler. ``bar`` counts output tokens."""
        order = sorted(range(len(prepared)), key=arrivals.__getitem__)  # the queue of future arrivals
        start, nxt = self.scheduler.step_count, 0
        while nxt < len(order) or self.scheduler.has_unfinished():
            while nxt < len(order) and arrivals[order[nxt]] <= self.scheduler.step_count - start:
                i = order[nxt]
                requests[i] = self._add_request(*prepared[i])  # its arrival has come
                nxt += 1
            self.step()  # (an idle step when nobody has arrived yet)
            show_progress(bar, requests)

    def _add_request(self, text: str | None, ids: list[int], sp: SamplingParams) -> Request:
        """Queue one checked request: its first completion, and in "prefix" mode the n - 1 others."""
        req = Request(str(self._next_request), text, ids, sp, max_tokens=self.inputs.max_tokens(ids, sp),
                      arrival_step=self.scheduler.step_count)
        self._next_request += 1
        self.scheduler.add_request(self.parallel.new_completion(req))
        self.parallel.add_siblings(req)
        return req

    # ------------------------------------------------------------------------------------ one step
    def step(self) -> list[Sequence]:
        """Schedule, prepare the batch, run the model, post-process. Returns the sequences that finished.

        A Ctrl-C (SIGINT, main thread) during the step is held until the step has finished and raised
        then (``paged_lab._interrupts``), so it never cuts the scheduler or the pool half-way. Interrupted by
        an exception, the step still gets its time and timeline row (marked ``"interrupted"``), since
        schedule() has counted it; the caller (generate) aborts its requests."""
        self._caller.check("step()")
        t0, out = time.perf_counter(), None
        with interrupts.atomic():
            try:
                out = self.scheduler.schedule()
                self.kv.copy_blocks(list(out.cow_copies))  # before any layer writes into the copies
                batch = self.prepare_batch(out) if out.scheduled else None
                logits = None if batch is None else self.run_model(batch)  # [num_sampled, vocab] or None
                finished = self.postprocess(out, batch, logits)
                self.metrics.record_step(out, 0 if batch is None else batch.num_tokens, t0)
            except BaseException:
                self.metrics.record_step(out, 0, t0, interrupted=True)
                raise
        return finished

    def prepare_batch(self, out) -> Batch:
        """The flat batch of one step: query tokens, their positions and slots, and per sequence its block
        table and context length (layer groups: slots and tables per group). One-token queries (decodes) go
        first, so that a mixed step can attend them apart (``llama.PagedAttention``)."""
        scheduled = decodes_first(out.scheduled)
        bm, groups = self.block_manager, self.layer_groups
        input_ids, positions, ctx_lens, qsl = [], [], [], [0]
        slots, tables = {g: [] for g in groups.layers}, {g: [] for g in groups.layers}  # group -> ...
        sample_rows, sample_seqs = [], []
        for s in scheduled:
            seq = s.seq
            input_ids += seq.token_ids[s.start:s.end]
            positions += range(s.start, s.end)
            for g, group_slots in groups.slots(bm, seq.seq_id, s.start, s.end).items():
                slots[g] += group_slots
            for g, table in groups.tables(bm, seq.seq_id).items():
                tables[g].append(table)
            ctx_lens.append(s.end)
            qsl.append(qsl[-1] + s.num_tokens)
            req = self._requests[seq.seq_id]
            if s.is_prefill and req.num_cached_tokens is None and seq is req.seqs[0]:
                req.num_cached_tokens = bm.num_cached_tokens(seq.seq_id)  # what its first prefill skipped
            if s.samples:  # every known token computed -> sample the next one from the last position
                sample_rows.append(qsl[-1] - 1)
                sample_seqs.append(seq)
        n_decode = sum(1 for s in scheduled if s.num_tokens == 1)
        metas = {g.name: self._metadata(slots[g.name], tables[g.name], ctx_lens, qsl, n_decode,
                                        g.sliding_window) for g in groups.groups}
        meta = [metas[g] for g in groups.group_of_layer] if groups.hybrid else metas[groups.groups[0].name]
        dev = self.device
        return Batch(scheduled, torch.tensor(input_ids, dtype=torch.long, device=dev),
                     torch.tensor(positions, dtype=torch.long, device=dev), meta, sample_rows, sample_seqs)

    def _metadata(self, slots, tables, ctx_lens, qsl, num_decodes: int,
                  sliding_window: int | None = None) -> AttentionMetadata:
        """The attention tensors of a batch (its first ``num_decodes`` sequences have one query token) for
        the layers of one group (``sliding_window``: theirs)."""
        dev, width = self.device, max(len(t) for t in tables)
        q_lens = [b - a for a, b in zip(qsl, qsl[1:])]
        return AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),  # [num_tokens]
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32,
                                      device=dev),  # [num_seqs, width], padded with block 0 (never read);
            # a window group's NULL_BLOCK entries lie before every query's window (never read either)
            context_lens=torch.tensor(ctx_lens, dtype=torch.int32, device=dev),  # [num_seqs]
            query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=dev),  # [num_seqs + 1]
            is_decode=qsl[-1] == len(tables), max_query_len=max(q_lens), max_context_len=max(ctx_lens),
            num_decodes=num_decodes, sliding_window=sliding_window,
        )

    def run_model(self, batch: Batch) -> torch.Tensor | None:
        """One forward over the batch -> fp32 logits of the sampled rows, ``[num_sampled, vocab]`` (None when
        no row samples: prefill chunks that do not reach their prompt's end only fill the cache). A decode
        batch no larger than a compiled size runs the compiled graph (it ends in every row's logits)."""
        meta = batch.meta
        if self.compiled is not None and meta.is_decode and self.compiled.bucket(len(batch.scheduled)):
            logits = self.compiled(batch.input_ids, batch.positions, self.kv.layers, meta, self._attend)
            return logits[batch.sample_rows]  # [num_sampled, vocab]
        hidden = self.runner.forward(batch.input_ids, batch.positions, self.kv.layers, meta,
                                     attention=self._attend,  # hidden: [num_tokens, hidden]
                                     kv_scales=self.kv.scales if self.kv.quantized else None)
        if not batch.sample_rows:
            return None
        rows = torch.tensor(batch.sample_rows, device=self.device)
        return self.runner.compute_logits(hidden[rows])  # [num_sampled, vocab]

    def postprocess(self, out, batch: Batch | None, logits: torch.Tensor | None) -> list[Sequence]:
        """Sample the next tokens, hand them to the scheduler (EOS, max_tokens), fork n > 1 children
        from parents that just sampled their first token, and apply the engine's own stops."""
        if logits is None:
            return list(self.scheduler.update(out, []))
        seqs = batch.sample_seqs
        sampled = self._sample(logits, seqs)
        if len(seqs) > 1:  # back to the scheduler's order
            token_of = {seq.seq_id: t for seq, t in zip(seqs, sampled)}
            sampled = [token_of[s.seq.seq_id] for s in out.scheduled if s.samples]
        finished = list(self.scheduler.update(out, sampled))
        finished += self.parallel.fork_children(logits, seqs)  # ("fork" mode only)
        finished += self._engine_stops(self.parallel.with_new_children(seqs))
        return finished

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """One token per row of ``logits`` ``[num_sampled, vocab]``, with ``seqs[row]``'s params and RNG."""
        reqs = [self._requests[s.seq_id] for s in seqs]
        return sample(logits, [r.params for r in reqs], [r.generators[s.seq_id] for r, s in zip(reqs, seqs)])

    def _engine_stops(self, seqs: list[Sequence]) -> list[Sequence]:
        """Stops the Scheduler does not know: extra EOS ids of the model, and stop strings."""
        finished = []
        for seq in seqs:
            if seq.is_finished or not seq.num_output_tokens:
                continue
            req = self._requests[seq.seq_id]
            last = seq.token_ids[-1]
            if not req.params.ignore_eos and last in self.eos_token_ids[1:]:
                self.scheduler.finish(seq, "stop")
                finished.append(seq)
                continue
            stops = req.params.stop
            if stops and _cut_at_stop(self._decode(seq.output_token_ids), stops) is not None:
                self.scheduler.finish(seq, "stop")
                finished.append(seq)
        return finished

    # ------------------------------------------------------------------------------------ outputs
    def _output(self, req: Request) -> RequestOutput:
        outs = []
        for i, seq in enumerate(req.seqs):
            ids = list(seq.output_token_ids)
            text, reason = self._decode(ids), seq.finish_reason
            cut = _cut_at_stop(text, req.params.stop)
            if cut is not None:  # the stop string is not part of the returned text
                text, reason = cut, "stop"
            outs.append(CompletionOutput(i, text, ids, reason))
        return RequestOutput(req.request_id, req.prompt, req.prompt_token_ids, outs,
                             req.num_cached_tokens or 0, self.metrics.request_metrics(req))

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def latency(self) -> dict[str, float]:
        """TTFT, ITL and end-to-end latency of the finished requests, p50 / p90 / p99, in seconds
        (``ttft_s_p90`` ...) and in steps (``ttft_steps_p90`` ...): the latest
        ``EngineMetrics.REQUESTS_KEPT`` (1,024) of them, so that a long-lived engine neither grows nor slows
        down. ITL counts every gap between consecutive tokens of one completion."""
        return self.metrics.latency()

    def stats(self) -> dict:
        """KV usage, prefix-cache queries/hits (tokens), preemptions, steps, the attention backends that
        ran (calls per backend; failures "auto" fell back from), latency percentiles (``latency()``:
        ``ttft_s_p90``, ``itl_steps_p50``, ...) and the event log."""
        return engine_stats(self)

    def reset_prefix_cache(self) -> int:
        """Forget every cached prompt block (vLLM's ``LLM.reset_prefix_cache``): later prompts are
        computed from scratch. Blocks held by running sequences stay theirs. Returns how many blocks
        were cached."""
        with self._caller.call("reset_prefix_cache()"), interrupts.atomic():
            return self.block_manager.reset_prefix_cache()

    # ------------------------------------------------------------------------------------ interrupted
    def _abort_interrupted(self, requests: list, err: BaseException) -> None:
        """After an exception escaped a generate() call: abort every unfinished request of the call, empty
        the scheduler and the pool (``Scheduler.abort_all``: an exception from inside a step may have cut
        a change half-way, and the prefix cache may hold blocks whose KV was never written), record the
        finished ones, and warn about what was lost."""
        reqs = {id(r): r for r in [*requests, *self._requests.values()] if r is not None}
        self.scheduler.abort_all()
        for seq in (s for r in reqs.values() for s in r.seqs if not s.is_finished):  # (never scheduled)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "abort"
        aborted = [r for r in reqs.values()
                   if r.num_pending or any(s.finish_reason == "abort" for s in r.seqs)]
        self.metrics.retire([r for r in reqs.values() if r not in aborted], aborted=len(aborted))
        self._requests.clear()
        if aborted:
            warnings.warn(
                f"generate() was interrupted by {type(err).__name__} at step {self.scheduler.step_count - 1}"
                f": its {len(aborted)} unfinished request(s) were aborted (outputs dropped; they are not "
                f"resumed), every block was freed and the prefix cache was reset. The engine is ready: call "
                f"generate() again to run them.", RuntimeWarning, stacklevel=3)


def decodes_first(scheduled):
    """The batch order of one step's ``ScheduledSeq`` entries: one-token queries (decodes) first, then
    prefills and chunks, each group in schedule order (a stable sort)."""
    return sorted(scheduled, key=lambda s: s.num_tokens > 1)


def _load(model, tokenizer, dtype, device) -> tuple[Any, Any, str]:
    """(transformers model, tokenizer, name) from a name/path (``models.load_model``) or a loaded model."""
    if isinstance(model, str):
        from paged_lab.models import load_model

        hf_model, loaded_tok, _ = load_model(model, dtype=dtype, device=device)
        return hf_model, tokenizer or loaded_tok, model
    if tokenizer is None:
        raise ValueError("tokenizer is required when model is an already loaded transformers model")
    param = next(model.parameters())
    if canonical_dtype(param.dtype) != canonical_dtype(dtype):
        raise ValueError(f"dtype={dtype!r} but the given model holds {param.dtype} weights")
    return model, tokenizer, getattr(model.config, "_name_or_path", "") or type(model).__name__


def _cut_at_stop(text: str, stops: list[str]) -> str | None:
    """``text`` up to the first stop string, or None when none occurs."""
    hits = [text.find(s) for s in stops if s in text]
    return text[: min(hits)] if hits else None


def _eos_ids(model, tokenizer) -> list[int]:
    """End-of-sequence ids: the generation config's (may be a list), then the tokenizer's."""
    ids: list[int] = []
    for src in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        for t in src if isinstance(src, _Seq) else [src]:
            if t is not None and int(t) not in ids:
                ids.append(int(t))
    return ids
