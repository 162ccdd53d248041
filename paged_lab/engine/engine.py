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

Around the step, each in a module of its own (docs/architecture.md): the arguments (``engine.config``),
the checks of generate()'s input, the requests, the outputs, the metrics; ``paged_lab._interrupts`` holds
a Ctrl-C until a step ends.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from paged_lab import _interrupts as interrupts
from paged_lab import kernels
from paged_lab.engine import dist, inputs
from paged_lab.engine.attention import PagedAttention
from paged_lab.engine.batch import Batch, prepare_batch
from paged_lab.engine.compiled import CompiledDecoder
from paged_lab.engine.concurrency import OneCaller
from paged_lab.engine.config import EngineConfig, engine_config, eos_token_ids, llm_signature
from paged_lab.engine.kv_cache import KVCache, resolve_kv_cache_dtype, resolve_num_blocks
from paged_lab.engine.kv_groups import LayerGroups
from paged_lab.engine.llama import TORCH_OPS, PagedLlama
from paged_lab.engine.metrics import EngineMetrics, engine_stats, progress_bar, show_progress
from paged_lab.engine.outputs import OutputProcessor
from paged_lab.engine.parallel_sampling import ParallelSampling
from paged_lab.engine.params import RequestOutput, SamplingParams
from paged_lab.engine.request import EngineRequest, RequestTable
from paged_lab.engine.sampling import sample
from paged_lab.engine.spec_decode import SpecDecode
from paged_lab.kernels.cpu import fast_path
from paged_lab.kv_math import ModelSpec, canonical_dtype
from paged_lab.memory.offload.worker import OffloadTier
from paged_lab.sched import Scheduler, Sequence, TieredScheduler


class LLM:
    """A paged-KV inference engine over a Llama-family transformers model.

    Its arguments are ``EngineConfig``'s (``engine.config``: their defaults, meaning and checks), given
    by keyword as to vLLM's ``LLM``: ``LLM("smollm2-135m", block_size=16, num_kv_blocks=64)``; or made
    beforehand: ``LLM(config=EngineConfig(...))``. A bad argument raises before the model loads.
    """

    def __init__(self, model: Any = "smollm2-135m", tokenizer: Any = None, *,
                 config: EngineConfig | None = None, **kwargs: Any):
        self.config = cfg = engine_config(model, tokenizer, config, kwargs)  # checked: raises before loading
        hf_model, self.tokenizer, self.model_name = cfg.load_model()
        self.hf_model, self.device = hf_model, next(hf_model.parameters()).device
        self.dtype, self.kv_cache_dtype = canonical_dtype(cfg.dtype), cfg.kv_cache_dtype
        self.cache_dtype = resolve_kv_cache_dtype(cfg.kv_cache_dtype, self.dtype)  # "float32", ..., or "fp8"
        self.spec = ModelSpec.from_hf_config(hf_model.config, name=self.model_name)
        self.layer_groups = groups = LayerGroups.of(self.spec)  # one group, unless some layers have a window
        cfg.check_model(self.device, self.dtype, self.cache_dtype, groups.hybrid)
        prepack = bool(cfg.cpu_prepack) and cfg.tensor_parallel_size == 1  # (TP: each rank its own slices)
        ops = fast_path.install(TORCH_OPS, hf_model, prepack)  # the one choice of path
        self.runner = PagedLlama.from_hf(hf_model, ops)
        self.max_model_len = cfg.model_len(self.runner.max_model_len)
        self._build_pool(cfg)
        if cfg.tensor_parallel_size > 1:  # rank 0 (here) schedules; workers hold the other heads
            self.runner = dist.start_tensor_parallel(self.runner, cfg.tensor_parallel_size, self.kv,
                                                     self.cache_dtype, cfg.attention_backend, groups.hybrid)
        self.attention_backend, self.kernel_stats = cfg.attention_backend, kernels.KernelStats()  # (what ran)
        # The attention backend is chosen once, here, for this cache (one that cannot run here raises now)
        self.attention = PagedAttention(cfg.attention_backend, stats=self.kernel_stats,
                                        like=self.kv.layers[0], num_heads=self.runner.num_heads,
                                        sliding_window=groups.sliding_window)
        self.eos_token_ids = eos_token_ids(hf_model, self.tokenizer)
        self.inputs = inputs.InputProcessor(self.tokenizer, self.spec.vocab_size, self.max_model_len,
                                            self.scheduler)
        self.requests = RequestTable()  # the running requests, by seq_id (none outlives its generate())
        self.parallel = ParallelSampling(cfg.parallel_sampling, self.scheduler, self.requests,
                                         self.eos_token_ids, self.device)
        self.outputs = OutputProcessor(self.tokenizer, self.eos_token_ids, self.requests)
        spec = cfg.speculative_config  # engine/spec_decode: n-gram drafts, verified in the forward
        self.spec_decode = None if spec is None else SpecDecode(spec, self.max_model_len, self.block_manager,
                                                                self.eos_token_ids, self.outputs.decode)
        self.compiled = None if cfg.enforce_eager else CompiledDecoder.warmed(  # the decode graphs
            self.runner, cfg.compile_sizes, self.kv.layers, cfg.compile_progress)
        self.metrics = EngineMetrics(self.scheduler, self.block_manager, self.layer_groups)  # times, timeline
        self._caller = OneCaller()  # generate() from two threads at once: the second raises

    def _build_pool(self, cfg: EngineConfig) -> None:
        """The KV pool (its tensors, its BlockManager) and the Scheduler over it."""
        groups, self.block_size = self.layer_groups, cfg.block_size
        rank_spec = dist.rank_spec(self.spec, cfg.tensor_parallel_size)  # one rank's KV heads
        self.num_blocks = resolve_num_blocks(rank_spec, cfg.block_size, self.cache_dtype, cfg.num_kv_blocks,
                                             cfg.kv_cache_memory,  # fp8: 1 byte a number
                                             groups.layers_per_block if groups.hybrid else None)
        self.kv = KVCache(rank_spec, self.num_blocks, cfg.block_size, self.cache_dtype, self.device,
                          size_arg="num_kv_blocks" if cfg.num_kv_blocks is not None else "kv_cache_memory",
                          layer_tensor=groups.layer_tensor)  # the i-th layers of all groups share tensor i
        self.enable_prefix_caching = cfg.enable_prefix_caching
        self.block_manager = groups.block_manager(self.num_blocks, cfg.block_size, cfg.enable_prefix_caching,
                                                  cfg.max_num_batched_tokens)
        # a second tier in CPU memory (memory/offload/): its connector is the Scheduler's, its copies a step's
        size = cfg.kv_offloading_size
        self.offload = None if size is None else OffloadTier(self.kv, size)
        sched = dict(max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens)
        self.scheduler = (Scheduler(self.block_manager, **sched) if self.offload is None  # (V1's modes)
                          else TieredScheduler(self.block_manager, connector=self.offload.connector, **sched))

    @property
    def timeline(self) -> list[dict]:
        """One row per step, the latest ``EngineMetrics.TIMELINE_ROWS`` (1,024) steps: batch composition, KV
        usage, seconds (``EngineMetrics.record_step``); ``row["step"]`` says which step it is."""
        return list(self.metrics.timeline)

    # ------------------------------------------------------------------------------------ generate
    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool | Callable[..., Any] = True, arrival_steps=None) -> list[RequestOutput]:
        """Run every prompt to completion; one RequestOutput per prompt, in order.

        prompts: a string, ``{"prompt_token_ids": [...]}``, or a list of them.
        sampling_params: one SamplingParams for all prompts, or a list with one per prompt.
        use_tqdm: a progress bar counting output tokens, or (as in vLLM) a callable that makes it
            (``functools.partial(tqdm, leave=False)``).
        arrival_steps: None (every request arrives now) or one integer >= 0 per prompt: prompt i joins
            the scheduler once ``arrival_steps[i]`` steps of this call have run, as requests reach a server
            over time (``workloads.poisson_arrivals``). Each output's ``metrics`` records its arrival, first
            scheduled step, first token and finish.

        Every request is checked before any work starts (``engine.inputs``: a prompt that can never fit,
        max_tokens < 1, temperature < 0, ...): ValueError names the prompt index and the field; nothing runs.

        Interrupted (Ctrl-C, or an exception inside a step): a Ctrl-C lets the step in progress finish
        (``paged_lab._interrupts``). Every unfinished request of the call is aborted (not resumed later),
        the scheduler and the KV pool are emptied (the prefix cache too), a RuntimeWarning says how many
        requests were lost, and the exception is raised again: the engine is as usable as a new one.

        Not thread-safe, as vLLM's ``LLM`` is not: a second generate() on the same engine while one runs
        raises RuntimeError at once, changing nothing; give each thread its own LLM.
        """
        with self._caller.call("generate()"), interrupts.held():  # one call at a time; Ctrl-C at step ends
            prepared = self.inputs.process(prompts, sampling_params)
            arrivals = inputs.check_arrival_steps(arrival_steps, len(prepared))
            requests: list[EngineRequest | None] = [None] * len(prepared)  # filled in as they arrive
            total = sum(sp.n * self.inputs.max_tokens(ids, sp) for _, ids, sp in prepared)
            with interrupts.on_error(self._abort, requests), progress_bar(use_tqdm, total) as bar:
                self._run(prepared, arrivals, requests, bar)  # an exception escaping here: self._abort
            with interrupts.atomic():
                outputs = [self.outputs.output(r, self.metrics.request_metrics(r)) for r in requests]
                self.metrics.retire(requests)  # their latencies and counts; the engine keeps no request
                self.requests.release()
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
        if self.offload:  # the tier's last stores done before the call returns (an error here aborts too)
            with interrupts.atomic():
                self.offload.drain(self.block_manager)

    def _add_request(self, text: str | None, ids: list[int], sp: SamplingParams) -> EngineRequest:
        """Queue one checked request: its first completion, and in "prefix" mode the n - 1 others."""
        req = self.requests.new(text, ids, sp, max_tokens=self.inputs.max_tokens(ids, sp),
                                arrival_step=self.scheduler.step_count)
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
                if self.offload:  # a second tier's copies (memory/offload/worker.py)
                    self.offload.before_forward(out.kv_meta)
                self.kv.copy_blocks(list(out.cow_copies))  # before any layer writes into the copies
                batch = self.prepare_batch(out) if out.scheduled else None
                logits = None if batch is None else self.run_model(batch)  # [num_sampled, vocab] or None
                if self.offload:
                    self.offload.after_forward(out.kv_meta)
                finished = self.postprocess(out, batch, logits)
                self.metrics.record_step(out, 0 if batch is None else batch.num_tokens, t0)
            except BaseException:
                self.metrics.record_step(out, 0, t0, interrupted=True)
                raise
        return finished

    def prepare_batch(self, out) -> Batch:
        """The flat batch of one step (``engine.batch``): query tokens, their positions and slots, and per
        sequence its block table and context length (layer groups: per group); decodes first."""
        tier = self.offload and self.offload.connector  # (a prefill's tokens loaded from it count as cached)
        self.requests.note_cached_tokens(out.scheduled, self.block_manager, tier)
        return prepare_batch(out.scheduled, self.block_manager, self.layer_groups, self.device)

    def run_model(self, batch: Batch) -> torch.Tensor | None:
        """One forward over the batch -> fp32 logits of the sampled rows, ``[num_sampled, vocab]`` (None when
        no row samples: prefill chunks that do not reach their prompt's end only fill the cache). A decode
        batch no larger than a compiled size runs the compiled graph (it ends in every row's logits)."""
        meta = batch.meta
        if self.compiled is not None and meta.is_decode and self.compiled.bucket(len(batch.scheduled)):
            logits = self.compiled(batch.input_ids, batch.positions, self.kv.layers, meta, self.attention)
            return logits[batch.sample_rows]  # [num_sampled, vocab]
        hidden = self.runner.forward(batch.input_ids, batch.positions, self.kv.layers, meta,
                                     attention=self.attention,  # hidden: [num_tokens, hidden]
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
        seqs, spec = batch.sample_seqs, self.spec_decode
        sampled = (spec.verify(logits, [s for s in batch.scheduled if s.samples], self.requests) if spec
                   else self._sample(logits, seqs))
        if len(seqs) > 1:  # back to the scheduler's order
            token_of = {seq.seq_id: t for seq, t in zip(seqs, sampled)}
            sampled = [token_of[s.seq.seq_id] for s in out.scheduled if s.samples]
        finished = list(self.scheduler.update(out, sampled))
        if spec:
            spec.propose(seqs)  # the next step's drafts
        finished += self.parallel.fork_children(logits, seqs)  # ("fork" mode only)
        stopped = self.outputs.stopped(self.parallel.with_new_children(seqs))  # stop strings, extra EOS
        for seq in stopped:
            self.scheduler.finish(seq, "stop")
        return finished + stopped

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """One token per row of ``logits`` ``[num_sampled, vocab]``, with ``seqs[row]``'s params and RNG."""
        reqs = [self.requests[s.seq_id] for s in seqs]
        return sample(logits, [r.params for r in reqs], [r.generators[s.seq_id] for r, s in zip(reqs, seqs)])

    def latency(self) -> dict[str, float]:
        """TTFT, ITL (every gap between two tokens of a completion) and end-to-end latency, p50 / p90 / p99,
        in seconds (``ttft_s_p90`` ...) and steps (``ttft_steps_p90`` ...), of the latest 1,024 finished
        requests (``EngineMetrics.REQUESTS_KEPT``: a long-lived engine neither grows nor slows down)."""
        return self.metrics.latency()

    def stats(self) -> dict:
        """KV usage, prefix-cache queries/hits (tokens), preemptions, steps, the attention backends that ran
        (calls per backend; failures "auto" fell back from), ``latency()``'s percentiles and the event log."""
        return engine_stats(self)

    def reset_prefix_cache(self) -> int:
        """Forget every cached prompt block (vLLM's ``LLM.reset_prefix_cache``): later prompts are computed
        from scratch; blocks held by running sequences stay theirs. Returns how many blocks were cached."""
        with self._caller.call("reset_prefix_cache()"), interrupts.atomic():
            return self.block_manager.reset_prefix_cache()

    def _abort(self, err: BaseException, requests: list[EngineRequest | None]) -> None:
        """After an exception escaped a generate() call (``interrupts.on_error``): empty the scheduler and
        the pool (``Scheduler.abort_all``: a step may have been cut half-way, its blocks' KV never written),
        abort every unfinished request of the call, record the finished ones, warn about what was lost."""
        self.scheduler.abort_all()
        finished, aborted = self.requests.abort(requests)
        self.metrics.retire(finished, aborted=len(aborted))
        if aborted:
            warnings.warn(
                f"generate() was interrupted by {type(err).__name__} at step {self.scheduler.step_count - 1}"
                f": its {len(aborted)} unfinished request(s) were aborted (outputs dropped; they are not "
                f"resumed), every block was freed and the prefix cache was reset. The engine is ready: call "
                f"generate() again to run them.", RuntimeWarning, stacklevel=4)  # (at generate()'s caller)


LLM.__init__.__signature__ = llm_signature()  # help(LLM): every EngineConfig field, by keyword
