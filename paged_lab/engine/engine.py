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
     max_tokens); n > 1 children are forked; the engine adds stop strings and extra EOS ids.
"""

from __future__ import annotations

import numbers
import time
import warnings
from collections import Counter
from collections.abc import Callable
from collections.abc import Sequence as _Seq
from dataclasses import dataclass
from typing import Any

import torch

from paged_lab import kernels
from paged_lab._checks import check_int
from paged_lab.engine.kv_cache import KVCache, resolve_num_blocks
from paged_lab.engine.llama import AttentionMetadata, PagedAttention, PagedLlama
from paged_lab.engine.params import CompletionOutput, RequestMetrics, RequestOutput, SamplingParams
from paged_lab.engine.sampling import make_generator, sample
from paged_lab.kv_math import ModelSpec, canonical_dtype
from paged_lab.memory import BlockManager
from paged_lab.sched import Scheduler, Sequence, SequenceStatus
from paged_lab.sim.latency import latency_summary, token_gaps

PARALLEL_SAMPLING = ("fork", "prefix")  # V0 (the paper) / V1


class _Request:
    """Engine-side bookkeeping of one request: its params, its sequences (one per completion)."""

    def __init__(self, request_id: str, prompt: str | None, prompt_token_ids: list[int], params: SamplingParams):
        self.request_id, self.prompt, self.prompt_token_ids, self.params = (
            request_id, prompt, prompt_token_ids, params)
        self.seqs: list[Sequence] = []
        self.pending_forks = params.n - 1  # children forked after the parent's prefill
        self.num_cached_tokens: int | None = None  # the BlockManager's prefix-cache hit, at the first prefill
        self.arrival_time = time.perf_counter()  # when it joined the scheduler (seconds)


@dataclass
class Batch:
    """One step's model input: the query tokens of every scheduled sequence, concatenated, one-token
    queries (decodes) first. num_tokens = sum of query lengths; num_seqs = len(scheduled)."""

    scheduled: list  # [num_seqs] ScheduledSeq, in batch order
    input_ids: torch.Tensor  # int64 [num_tokens]
    positions: torch.Tensor  # int64 [num_tokens]: each token's position in its sequence
    meta: AttentionMetadata  # slot_mapping [num_tokens], block_tables [num_seqs, max_blocks], context_lens ...
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
    attention_backend: "auto" (Triton on CUDA; on a CPU the C kernels where they can run, else torch),
        "triton", "cpu" (C kernels), "torch", "reference" (``paged_lab.kernels``). ``stats()`` says which ran.
    preemption: "recompute" (a preempted sequence drops its blocks and is prefilled again later).
    parallel_sampling: how ``SamplingParams(n > 1)`` shares the prompt. "fork" (the paper, vLLM V0): once
        the prompt is prefilled, n - 1 children fork the parent's block table (refcounts) and draw their
        first token from its logits; the first write into a shared, partly filled block is a
        copy-on-write (a child that finds no free window of ``max_num_seqs`` waits in the queue and is
        prefilled anew once admitted). "prefix" (vLLM V1): n - 1 independent requests with the same
        prompt, added with it, which find its full blocks in the prefix cache (``enable_prefix_caching``)
        and compute the rest themselves; no copy-on-write. Both give the same tokens (completion i samples
        with seed + i). Default: "prefix", as vLLM V1.
    enforce_eager: True (the default) runs every step eagerly. False compiles the decode step with
        ``torch.compile`` (``engine.compiled``: frozen weights, generated C++ GEMMs, fused element-wise
        ops) for the batch sizes ``compile_sizes`` (default 1, 2, 4; a decode batch is padded up to the
        next one, larger batches and prefills stay eager). CPU float32 only. Compiling takes about a
        minute per size on a laptop CPU, once per engine (``compile_progress`` shows a bar), and holds
        another packed copy of the weights; it pays off in long runs (``benchmarks/engine_bench.py``).
        vLLM compiles by default; paged_lab does not, because notebooks and tests must start fast.
    cpu_prepack: multiply with oneDNN-prepacked copies of the weights (``engine.linear``): about 1.5x
        faster decode steps on CPU (99.8 -> 67.6 ms at batch 8 on the development machine), at the cost of a second copy of the weights in RAM (+540 MB for SmolLM2
        in fp32). None -> on wherever it applies (CPU, fp32/bf16); False -> the model's own tensors.
    """

    def __init__(self, model: Any = "smollm2-135m", tokenizer: Any = None, dtype: Any = "float32",
                 block_size: int = 16, num_kv_blocks: int | None = None, kv_cache_memory: int | None = None,
                 max_num_seqs: int = 32, max_num_batched_tokens: int | None = 4096,
                 enable_prefix_caching: bool = True, attention_backend: str = "auto",
                 preemption: str = "recompute", device: str | None = None, max_model_len: int | None = None,
                 parallel_sampling: str = "prefix",
                 cpu_prepack: bool | None = None, enforce_eager: bool = True,
                 compile_sizes: tuple[int, ...] | None = None, compile_progress: bool = True):
        _check_engine_args(attention_backend, preemption, block_size, compile_sizes, parallel_sampling)
        _check_flags(enable_prefix_caching=enable_prefix_caching, enforce_eager=enforce_eager,
                     compile_progress=compile_progress, cpu_prepack=cpu_prepack)
        if max_model_len is not None:  # (a prompt needs 1 token and must leave room for 1 more)
            max_model_len = check_int("max_model_len", max_model_len, minimum=2)
        self.parallel_sampling = parallel_sampling
        hf_model, self.tokenizer, self.model_name = _load(model, tokenizer, dtype, device)
        self.hf_model = hf_model
        self.device = next(hf_model.parameters()).device
        self.dtype = canonical_dtype(dtype)
        self.spec = ModelSpec.from_hf_config(hf_model.config, name=self.model_name)
        _check_compilable(enforce_eager, self.device, self.dtype)
        self.runner = PagedLlama.from_hf(hf_model, prepack=cpu_prepack)
        self.max_model_len = _check_model_len(max_model_len, self.runner.max_model_len)
        self.block_size = block_size
        self.num_blocks = resolve_num_blocks(self.spec, block_size, self.dtype, num_kv_blocks, kv_cache_memory)
        self.kv = KVCache(self.spec, self.num_blocks, block_size, self.dtype, self.device,
                          size_arg="num_kv_blocks" if num_kv_blocks is not None else "kv_cache_memory")
        self.block_manager = BlockManager(self.num_blocks, block_size, enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, max_num_seqs=max_num_seqs, mode="continuous",
                                   preemption="recompute", max_num_batched_tokens=max_num_batched_tokens)
        self.attention_backend = attention_backend
        self.kernel_stats = kernels.KernelStats()  # which attention backend ran, and any fallbacks
        # The attention backend is chosen once, here, for this cache (one that cannot run here raises now)
        self._attend = PagedAttention(attention_backend, stats=self.kernel_stats, like=self.kv.layers[0],
                                      num_heads=self.runner.num_heads)
        self.enable_prefix_caching = enable_prefix_caching
        self.eos_token_ids = _eos_ids(hf_model, self.tokenizer)
        self._requests: dict[Any, _Request] = {}  # seq_id -> its request
        self._generators: dict[Any, torch.Generator | None] = {}  # seq_id -> its sampling RNG (on self.device)
        self._next_request = 0
        self.compiled = None  # engine.compiled.CompiledDecoder when enforce_eager=False
        if not enforce_eager:
            self.compiled = self._compile(compile_sizes, progress=compile_progress)
        self.timeline: list[dict] = []  # one entry per step: batch composition and KV usage
        self._step_times: list[tuple[float, float]] = []  # step -> (start, end), time.perf_counter
        self._step_open = False  # True from schedule() until the step's update() is done
        self._peak_usage = 0.0

    # ------------------------------------------------------------------------------------ validation
    def _prepare(self, prompts, sampling_params) -> list[tuple[str | None, list[int], SamplingParams]]:
        """Every (prompt, params) pair checked and tokenized, or a ValueError naming the first bad one."""
        single = isinstance(prompts, (str, dict))
        prompts = [prompts] if single else list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(f"sampling_params has {len(params)} entries but there are {len(prompts)} prompts")
        return [self._check_request(i, p, sp) for i, (p, sp) in enumerate(zip(prompts, params))]

    def _check_request(self, i: int, prompt, sp) -> tuple[str | None, list[int], SamplingParams]:
        where = f"prompts[{i}]"
        text, ids = self._tokenize(where, prompt)
        if not isinstance(sp, SamplingParams):
            raise ValueError(f"sampling_params[{i}] must be a SamplingParams, got {type(sp).__name__}")
        try:  # again: a field may have been edited since the SamplingParams was made
            sp.validate()
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        if not ids:
            raise ValueError(f"{where}: prompt is empty (it must hold at least 1 token)")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"{where}: prompt has {len(ids)} tokens; the model context (max_model_len) "
                             f"is {self.max_model_len}, so at most {self.max_model_len - 1} fit")
        if bad := [t for t in ids if not 0 <= t < self.spec.vocab_size]:
            raise ValueError(f"{where}: prompt_token_ids hold ids outside [0, {self.spec.vocab_size}): {bad[:5]}")
        pool_slots = self.num_blocks * self.block_size
        if len(ids) > pool_slots:
            raise ValueError(f"{where}: prompt has {len(ids)} tokens but the whole KV pool holds "
                             f"{pool_slots} ({self.num_blocks} blocks x {self.block_size})")
        max_tokens = self._max_tokens(ids, sp)
        need = self.block_manager.blocks_for(len(ids) + max_tokens - 1)
        if need > self.num_blocks:
            raise ValueError(
                f"{where}: prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) needs {need} KV blocks "
                f"but the pool has {self.num_blocks}; lower max_tokens or enlarge the pool")
        return text, ids, sp

    def _tokenize(self, where: str, prompt) -> tuple[str | None, list[int]]:
        """(text or None, token ids) of a string prompt or a ``{"prompt_token_ids": [...]}`` dict."""
        if isinstance(prompt, str):
            return prompt, self.tokenizer(prompt).input_ids
        if not isinstance(prompt, dict):
            raise ValueError(f"{where}: prompt must be a string or {{'prompt_token_ids': [...]}}, "
                             f"got {type(prompt).__name__}")
        if "prompt_token_ids" not in prompt:
            raise ValueError(f"{where}: a dict prompt needs the key 'prompt_token_ids'")
        ids = list(prompt["prompt_token_ids"])
        for j, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise ValueError(f"{where}: prompt_token_ids[{j}] must be an integer token id, got {t!r}")
        return prompt.get("prompt"), [int(t) for t in ids]

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

        Every request is validated before any work starts: an empty prompt, a prompt as long as the
        model context or longer than the whole KV pool, a prompt + max_tokens that can never fit in the
        pool, or a bad SamplingParams field (max_tokens < 1, temperature < 0 or not finite, top_p outside
        (0, 1], n < 1, a seed that is not an integer in [0, 2**64 - n], ...) raises ValueError naming the
        prompt index and the field, and nothing runs.

        Interrupted (Ctrl-C, or an exception inside a step): every unfinished request of this call is
        aborted -- its blocks freed, its tokens dropped, nothing is resumed later -- a RuntimeWarning says
        how many, and the exception is raised again. The engine is then as usable as before: run the
        prompts again with a new call.
        """
        prepared = self._prepare(prompts, sampling_params)
        arrivals = _check_arrival_steps(arrival_steps, len(prepared))
        requests: list[_Request | None] = [None] * len(prepared)  # filled in as they arrive
        total = sum(sp.n * self._max_tokens(ids, sp) for _, ids, sp in prepared)
        try:
            with _progress_bar(use_tqdm, total) as bar:
                self._run(prepared, arrivals, requests, bar)
        except BaseException as err:  # KeyboardInterrupt included: the engine must survive a Ctrl-C
            self._abort_interrupted(requests, err)
            raise
        return [self._output(r) for r in requests]

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
            live = [r for r in requests if r is not None]
            bar.update(sum(map(self._tokens_done, live)) - bar.n)
            finished = sum(map(self._request_finished, live))
            bar.set_postfix_str(f"{finished}/{len(requests)} requests", refresh=False)  # (drawn by update)

    def _tokens_done(self, req: _Request) -> int:
        """Progress of ``req`` in output tokens: what its completions produced so far, or all it could
        produce (n x max_tokens) once it finished, so that early stops do not leave the bar short."""
        if self._request_finished(req):
            return req.params.n * self._max_tokens(req.prompt_token_ids, req.params)
        return sum(s.num_output_tokens for s in req.seqs)

    def _max_tokens(self, ids: list[int], sp: SamplingParams) -> int:
        """Output tokens one completion can produce: max_tokens, cut where the model context ends."""
        return min(sp.max_tokens, self.max_model_len - len(ids))

    # ------------------------------------------------------------------------------------ interrupted
    def _abort_interrupted(self, requests: list, err: BaseException) -> None:
        """After an exception escaped a generate() call: abort (finish with "abort", freeing the blocks)
        every unfinished sequence of the call, forget their requests, drop the prefix cache when it may
        hold blocks whose KV was never written, and warn about what was lost."""
        seqs = {id(s): s for r in requests if r is not None for s in r.seqs}
        # (a sequence queued by the call but not yet in ``requests``: interrupted inside _add_request)
        sched = self.scheduler
        seqs.update((id(s), s) for q in (sched.waiting, sched.running, sched.swapped) for s in q)
        unfinished = [s for s in seqs.values() if not s.is_finished]
        # Full prompt blocks enter the prefix cache when schedule() allocates them, before their KV is
        # written: by this step's forward (interrupted between schedule() and update()), or by a later
        # chunk of a chunked prefill. Dropping cache entries never makes tokens wrong, only slower, so
        # reset the whole cache rather than pick out the unwritten blocks (forget_uncomputed_cache is not
        # called on purpose: the simple, safe choice).
        stale_cache = self._step_open or any(
            s.status is SequenceStatus.RUNNING and s.num_computed_tokens < s.prefill_end for s in unfinished)
        for seq in unfinished:
            self._abort_seq(seq)
        ids = {s.seq_id for s in unfinished}
        reqs = {id(r): r for r in requests if r is not None}
        reqs.update((id(r), r) for r in map(self._requests.get, ids) if r is not None)
        aborted = [r for r in reqs.values() if r.pending_forks or any(s.seq_id in ids for s in r.seqs)]
        for req in aborted:
            self._forget(req)
        reset = stale_cache and self.enable_prefix_caching
        if reset:
            self.scheduler.block_manager.reset_prefix_cache()
        self._step_open = False
        if aborted:
            warnings.warn(
                f"generate() was interrupted by {type(err).__name__} at step {sched.step_count - 1}: "
                f"its {len(aborted)} unfinished request(s) were aborted (blocks freed, outputs dropped; they "
                f"are not resumed){' and the prefix cache was reset' if reset else ''}. The engine is "
                f"ready: call generate() again to run them.", RuntimeWarning, stacklevel=3)

    def _abort_seq(self, seq: Sequence) -> None:
        """Finish ``seq`` with reason "abort" and free its blocks."""
        try:
            self.scheduler.finish(seq, "abort")
        except KeyError:  # interrupted while being forked: the scheduler never took it, it may hold blocks
            if seq.seq_id in self.block_manager:
                self.block_manager.free(seq.seq_id)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, "abort"
            seq.finish_step = max(self.scheduler.step_count - 1, 0)

    def _forget(self, req: _Request) -> None:
        """Drop an aborted request from the engine's books (latency() counts completed requests only)."""
        req.pending_forks = 0
        for seq in req.seqs:
            self._requests.pop(seq.seq_id, None)
            self._generators.pop(seq.seq_id, None)

    def _add_request(self, text, ids, sp: SamplingParams) -> _Request:
        rid = str(self._next_request)
        self._next_request += 1
        req = _Request(rid, text, ids, sp)
        max_tokens = self._max_tokens(ids, sp)
        seq = Sequence(rid, ids, max_tokens=max_tokens, eos_token_id=self.eos_token_ids[0] if self.eos_token_ids else None,
                       ignore_eos=sp.ignore_eos, arrival_step=self.scheduler.step_count)
        req.seqs.append(seq)
        self._requests[seq.seq_id] = req
        self._generators[seq.seq_id] = None if sp.greedy else make_generator(sp.seed, self.device)
        self.scheduler.add_request(seq)
        if self.parallel_sampling == "prefix":  # V1 fans n > 1 out into n requests at once
            self._add_siblings(req, seq)
        return req

    def _request_finished(self, req: _Request) -> bool:
        return req.pending_forks == 0 and all(s.is_finished for s in req.seqs)

    # ------------------------------------------------------------------------------------ one step
    def step(self) -> list[Sequence]:
        """Schedule, prepare the batch, run the model, post-process. Returns the sequences that finished.

        Interrupted (an exception or Ctrl-C), the step still gets its time and timeline row (marked
        ``"interrupted"``), since schedule() has counted it; the caller (generate) aborts its requests."""
        t0, out = time.perf_counter(), None
        try:
            self._step_open = True  # until update(): the prefix cache may hold blocks with no KV yet
            out = self.scheduler.schedule()  # out.step == len(self._step_times)
            self.kv.copy_blocks(list(out.cow_copies))  # before any layer writes into the copies
            batch = self.prepare_batch(out) if out.scheduled else None
            logits = None if batch is None else self.run_model(batch)  # [num_sampled, vocab] or None
            finished = self.postprocess(out, batch, logits)
            self._step_open = False
            self._record(out, 0 if batch is None else batch.num_tokens, t0)
        except BaseException:
            self._record(out, 0, t0, interrupted=True)
            raise
        return finished

    def prepare_batch(self, out) -> Batch:
        """The flat batch of one step: query tokens, their positions and slots, and per sequence its block
        table and context length. One-token queries (decodes) go first, so that a mixed step can attend
        them apart (``llama.PagedAttention``)."""
        scheduled = decodes_first(out.scheduled)
        bm = self.block_manager
        input_ids, positions, slots, tables, ctx_lens, qsl = [], [], [], [], [], [0]
        sample_rows, sample_seqs = [], []
        for s in scheduled:
            seq = s.seq
            input_ids += seq.token_ids[s.start:s.end]
            positions += range(s.start, s.end)
            slots += bm.slot_mapping(seq.seq_id, s.start, s.end)
            tables.append(bm.block_table(seq.seq_id))
            ctx_lens.append(s.end)
            qsl.append(qsl[-1] + s.num_tokens)
            req = self._requests[seq.seq_id]
            if s.is_prefill and req.num_cached_tokens is None and seq is req.seqs[0]:
                req.num_cached_tokens = bm.num_cached_tokens(seq.seq_id)  # what its first prefill skipped
            if s.samples:  # every known token computed -> sample the next one from the last position
                sample_rows.append(qsl[-1] - 1)
                sample_seqs.append(seq)
        n_decode = sum(1 for s in scheduled if s.num_tokens == 1)
        meta = self._metadata(slots, tables, ctx_lens, qsl, n_decode)
        dev = self.device
        return Batch(scheduled, torch.tensor(input_ids, dtype=torch.long, device=dev),
                     torch.tensor(positions, dtype=torch.long, device=dev), meta, sample_rows, sample_seqs)

    def _metadata(self, slots, tables, ctx_lens, qsl, num_decodes: int) -> AttentionMetadata:
        """The attention tensors of a batch (its first ``num_decodes`` sequences have one query token)."""
        dev, width = self.device, max(len(t) for t in tables)
        q_lens = [b - a for a, b in zip(qsl, qsl[1:])]
        return AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),  # [num_tokens]
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32,
                                      device=dev),  # [num_seqs, width], padded with block 0 (never read)
            context_lens=torch.tensor(ctx_lens, dtype=torch.int32, device=dev),  # [num_seqs]
            query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=dev),  # [num_seqs + 1]
            is_decode=qsl[-1] == len(tables), max_query_len=max(q_lens), max_context_len=max(ctx_lens),
            num_decodes=num_decodes,
        )

    def run_model(self, batch: Batch) -> torch.Tensor | None:
        """One forward over the batch -> fp32 logits of the sampled rows, ``[num_sampled, vocab]`` (None when
        no row samples: prefill chunks that do not reach their prompt's end only fill the cache). A decode
        batch no larger than a compiled size runs the compiled graph (it ends in every row's logits)."""
        meta = batch.meta
        if self.compiled is not None and meta.is_decode and self.compiled.bucket(len(batch.scheduled)):
            logits = self.compiled(batch.input_ids, batch.positions, self.kv.layers, meta, self._attend)
            return logits[batch.sample_rows]  # [num_sampled, vocab]
        hidden = self.runner.forward(batch.input_ids, batch.positions, self.kv.layers, meta, attention=self._attend)
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
        finished += self._fork_children(logits, seqs)
        finished += self._engine_stops(self._live(seqs))
        return finished

    def _compile(self, sizes, progress: bool):
        from paged_lab.engine.compiled import DEFAULT_CAPTURE_SIZES, CompiledDecoder

        compiled = CompiledDecoder(self.runner, DEFAULT_CAPTURE_SIZES if sizes is None else sizes)
        compiled.warm_up(self.kv.layers, progress=progress)
        return compiled

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        params = [self._requests[s.seq_id].params for s in seqs]
        gens = [self._generators[s.seq_id] for s in seqs]
        return sample(logits, params, gens)

    def _fork_children(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[Sequence]:
        """n > 1: a parent that just sampled its first token forks its n - 1 children, each drawing its
        own first token from the same logits row. They share every prompt block; the first write into
        a shared, partly filled block is a copy-on-write. Returns children that finished at once."""
        finished = []
        for row, parent in enumerate(seqs):
            req = self._requests[parent.seq_id]
            if not req.pending_forks or parent.num_output_tokens != 1:
                continue
            while req.pending_forks:  # (fork mode: "prefix" added its siblings with the request)
                child, token = self._new_child(req, parent, logits[row : row + 1])
                if self._place_child(parent, child, token, self._stop_reason(req, child, token)):
                    finished.append(child)
        return finished

    def _add_siblings(self, req: _Request, parent: Sequence) -> None:
        """V1's parallel sampling (``vllm/v1/engine/parallel_sampling.py``, ``ParentRequest``): the n - 1
        other completions join the queue with the first, as requests of their own with the same prompt.
        Admitted in the same step, they find the full prompt blocks the first one computes in the prefix
        cache (those blocks are cached as they are scheduled, and stored before anyone attends)."""
        sp = req.params
        while req.pending_forks:
            i = len(req.seqs)
            child = Sequence(f"{req.request_id}.{i}", req.prompt_token_ids, max_tokens=parent.max_tokens,
                             eos_token_id=parent.eos_token_id, ignore_eos=parent.ignore_eos,
                             arrival_step=parent.arrival_step)
            req.seqs.append(child)
            req.pending_forks -= 1
            self._requests[child.seq_id] = req
            self._generators[child.seq_id] = None if sp.greedy else make_generator(
                None if sp.seed is None else sp.seed + i, self.device)
            self.scheduler.add_request(child)

    def _new_child(self, req: _Request, parent: Sequence, logits_row: torch.Tensor) -> tuple[Sequence, int]:
        """Child i of ``req`` and its first token, drawn from the parent's first logits row ``[1, vocab]``."""
        sp, i = req.params, len(req.seqs)
        child = Sequence(f"{req.request_id}.{i}", req.prompt_token_ids, max_tokens=parent.max_tokens,
                         eos_token_id=parent.eos_token_id, ignore_eos=parent.ignore_eos,
                         arrival_step=parent.arrival_step)
        gen = None if sp.greedy else make_generator(None if sp.seed is None else sp.seed + i, self.device)
        token = sample(logits_row, [sp], [gen])[0]
        req.seqs.append(child)
        req.pending_forks -= 1
        self._requests[child.seq_id], self._generators[child.seq_id] = req, gen
        return child, token

    def _stop_reason(self, req: _Request, child: Sequence, token: int) -> str | None:
        if token in self.eos_token_ids and not req.params.ignore_eos:
            return "stop"
        return "length" if child.max_tokens == 1 else None

    def _place_child(self, parent: Sequence, child: Sequence, token: int, stop: str | None) -> bool:
        """Give a new child to the scheduler (or finish it); True when it finished at once.

        It shares the running parent's blocks when a window is free (``max_num_seqs``); otherwise it
        waits in the queue with its first token, and is prefilled anew once admitted, like a preempted
        sequence (with prefix caching, its full prompt blocks are cache hits)."""
        sched = self.scheduler
        if parent.status is SequenceStatus.RUNNING and len(sched.running) < sched.max_num_seqs:
            self.scheduler.fork(parent, child, last_token_id=token)
            if stop:
                self.scheduler.finish(child, stop)
            return stop is not None
        child.token_ids.append(token)
        child.output_steps = list(parent.output_steps[:1])  # its first token came with the parent's
        child.first_scheduled_step, child.first_token_step = parent.first_scheduled_step, parent.first_token_step
        if stop:  # the parent already finished (and freed its blocks): the child needs none
            child.status, child.finish_reason, child.finish_step = SequenceStatus.FINISHED, stop, parent.first_token_step
            return True
        self.scheduler.add_request(child)  # the parent stopped, or no window is free: prefill the child anew
        return False

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
            if req.params.stop and _cut_at_stop(self._decode(seq.output_token_ids), req.params.stop) is not None:
                self.scheduler.finish(seq, "stop")
                finished.append(seq)
        return finished

    def _live(self, seqs: list[Sequence]) -> list[Sequence]:
        """The sequences plus their just-forked children (their first token may hit a stop string)."""
        out = []
        for seq in seqs:
            out.append(seq)
            req = self._requests[seq.seq_id]
            if req.seqs[0] is seq and seq.num_output_tokens == 1:
                out.extend(req.seqs[1:])
        return out

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _record(self, out, num_tokens: int, t0: float, interrupted: bool = False) -> None:
        """Close the step: its (start, end) time and its timeline row. Only what is missing is added, so
        that every step schedule() counted has both, even one interrupted in here (``out`` None: inside
        schedule()). ``_metrics`` finds step i's time at ``_step_times[i]``."""
        t1 = time.perf_counter()
        if len(self._step_times) < self.scheduler.step_count:
            self._step_times.append((t0, t1))
        if len(self.timeline) >= self.scheduler.step_count:
            return
        usage = self.block_manager.usage
        self._peak_usage = max(self._peak_usage, usage)
        scheduled, preempted = (out.scheduled, out.preempted) if out is not None else ([], [])
        self.timeline.append({
            "step": self.scheduler.step_count,
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_prefill": sum(1 for s in scheduled if s.is_prefill),
            "num_decode": sum(1 for s in scheduled if not s.is_prefill),
            "num_batched_tokens": num_tokens,
            "num_context_tokens": sum(e.end for e in scheduled),  # K/V read by attention this step
            "num_preempted": len(preempted),
            "kv_usage": usage,
            "num_free_blocks": self.block_manager.num_free_blocks,
            "seconds": t1 - t0,
            "interrupted": interrupted,  # an exception or Ctrl-C stopped it: its tokens were dropped
        })

    # ------------------------------------------------------------------------------------ outputs
    def _output(self, req: _Request) -> RequestOutput:
        outs = []
        for i, seq in enumerate(req.seqs):
            ids = list(seq.output_token_ids)
            text, reason = self._decode(ids), seq.finish_reason
            cut = _cut_at_stop(text, req.params.stop)
            if cut is not None:  # the stop string is not part of the returned text
                text, reason = cut, "stop"
            outs.append(CompletionOutput(i, text, ids, reason))
        return RequestOutput(req.request_id, req.prompt, req.prompt_token_ids, outs, req.num_cached_tokens or 0,
                             self._metrics(req))

    def _end_time(self, step: int | None) -> float | None:
        return None if step is None else self._step_times[step][1]

    def _metrics(self, req: _Request) -> RequestMetrics:
        """vLLM V0's RequestMetrics of ``req``: its steps from the scheduler, their times from the timeline."""
        seqs = req.seqs
        first_sched = seqs[0].first_scheduled_step
        first_token = min((s.first_token_step for s in seqs if s.first_token_step is not None), default=None)
        done = all(s.finish_step is not None for s in seqs)
        finished = max(s.finish_step for s in seqs) if done else None
        last = max((s.output_steps[-1] for s in seqs if s.output_steps), default=None)
        sched_time = None if first_sched is None else self._step_times[first_sched][0]
        return RequestMetrics(
            arrival_time=req.arrival_time, last_token_time=self._end_time(last),
            first_scheduled_time=sched_time, first_token_time=self._end_time(first_token),
            time_in_queue=None if sched_time is None else sched_time - req.arrival_time,
            finished_time=self._end_time(finished), arrival_step=seqs[0].arrival_step,
            first_scheduled_step=first_sched, first_token_step=first_token, finished_step=finished)

    def latency(self) -> dict[str, float]:
        """TTFT, ITL and end-to-end latency of every finished request so far, p50 / p90 / p99, in
        seconds (``ttft_s_p90`` ...) and in steps (``ttft_steps_p90`` ...). ITL counts every gap between
        consecutive tokens of one completion."""
        reqs = list({id(r): r for r in self._requests.values() if self._request_finished(r)}.values())
        metrics = [self._metrics(r) for r in reqs]
        seqs = [s for r in reqs for s in r.seqs]
        out = latency_summary([m.ttft for m in metrics],
                              token_gaps([self._end_time(t) for t in s.output_steps] for s in seqs),
                              [m.e2e_latency for m in metrics], "s")
        out.update(latency_summary([m.first_token_step - m.arrival_step + 1 for m in metrics],
                                   token_gaps(s.output_steps for s in seqs),
                                   [m.finished_step - m.arrival_step + 1 for m in metrics], "steps"))
        return out

    def reset_prefix_cache(self) -> int:
        """Forget every cached prompt block (vLLM's ``LLM.reset_prefix_cache``): later prompts are
        computed from scratch. Blocks held by running sequences stay theirs. Returns how many blocks
        were cached."""
        return self.block_manager.reset_prefix_cache()

    def stats(self) -> dict:
        """KV usage, prefix-cache queries/hits (tokens), preemptions, steps, the attention backends that
        ran (calls per backend; failures "auto" fell back from), latency percentiles (``latency()``:
        ``ttft_s_p90``, ``itl_steps_p50``, ...) and the event log."""
        bm = self.block_manager
        ks = self.kernel_stats
        return {
            "attention_backend": self.attention_backend,
            "attention_backend_ran": ", ".join(name for name, _ in Counter(ks.calls).most_common()) or None,
            "attention_calls": dict(ks.calls),
            "attention_failures": dict(ks.failures),
            "attention_errors": dict(ks.last_error),
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "kv_cache_bytes": self.kv.bytes,
            "kv_usage": bm.usage,
            "peak_kv_usage": self._peak_usage,
            "num_free_blocks": bm.num_free_blocks,
            "prefix_cache_queries": bm.stats.prefix_cache_queries,
            "prefix_cache_hits": bm.stats.prefix_cache_hits,
            "prefix_cache_hit_rate": bm.stats.hit_rate,
            "num_preemptions": self.scheduler.num_preemptions,
            "num_steps": self.scheduler.step_count,
            "num_cow": bm.stats.num_cow,
            **self.latency(),
            "events": list(bm.events),
            "timeline": list(self.timeline),
        }


def decodes_first(scheduled):
    """The batch order of one step's ``ScheduledSeq`` entries: one-token queries (decodes) first, then
    prefills and chunks, each group in schedule order (a stable sort)."""
    return sorted(scheduled, key=lambda s: s.num_tokens > 1)


def _check_engine_args(attention_backend, preemption, block_size, compile_sizes, parallel_sampling) -> None:
    if parallel_sampling not in PARALLEL_SAMPLING:
        raise ValueError(f"parallel_sampling must be one of {PARALLEL_SAMPLING}, got {parallel_sampling!r}")
    if attention_backend not in kernels.BACKENDS:
        raise ValueError(f"attention_backend must be one of {kernels.BACKENDS}, got {attention_backend!r}")
    if preemption != "recompute":
        raise ValueError(f"preemption must be 'recompute' (the engine keeps no CPU swap space), "
                         f"got {preemption!r}")
    check_int("block_size", block_size, minimum=1)
    if compile_sizes is not None and (
            not compile_sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in compile_sizes)):
        raise ValueError(f"compile_sizes must be a non-empty list of integers >= 1, got {compile_sizes!r}")


def _progress_bar(use_tqdm, total: int):
    """generate()'s progress bar over ``total`` output tokens: tqdm, made by the callable ``use_tqdm``
    when it is one, and disabled (it prints nothing) when ``use_tqdm`` is False."""
    from tqdm.auto import tqdm

    make = use_tqdm if callable(use_tqdm) else tqdm
    return make(total=total, desc="generate", unit="tok", disable=not use_tqdm)


def _check_flags(cpu_prepack, **flags) -> None:
    """The on/off arguments must be True or False (``enable_prefix_caching='no'`` is truthy: it would
    turn caching on); ``cpu_prepack`` may also be None (auto)."""
    flags["cpu_prepack"] = False if cpu_prepack is None else cpu_prepack
    for name, value in flags.items():
        if not isinstance(value, bool):
            allowed = "True, False or None" if name == "cpu_prepack" else "True or False"
            raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _check_model_len(max_model_len: int | None, model_limit: int) -> int:
    """The context length: ``max_model_len`` (already an integer >= 2), at most the model's own limit."""
    if max_model_len is None:
        return model_limit
    if max_model_len > model_limit:
        raise ValueError(f"max_model_len={max_model_len} is more than the model's context "
                         f"(max_position_embeddings={model_limit}); pass at most {model_limit}")
    return max_model_len


def _check_arrival_steps(arrival_steps, n: int) -> list[int]:
    """One arrival step >= 0 per prompt (all 0 when None), or a ValueError naming the entry."""
    if arrival_steps is None:
        return [0] * n
    steps = list(arrival_steps)
    if len(steps) != n:
        raise ValueError(f"arrival_steps has {len(steps)} entries but there are {n} prompts")
    return [check_int(f"arrival_steps[{i}]", a, minimum=0) for i, a in enumerate(steps)]


def _check_compilable(enforce_eager: bool, device: torch.device, dtype: str) -> None:
    if not enforce_eager and (device.type != "cpu" or dtype != "float32"):
        raise ValueError(f"enforce_eager=False compiles decode steps for CPU float32 only; this model is "
                         f"{dtype} on {device} (use enforce_eager=True)")


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
