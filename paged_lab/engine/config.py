"""EngineConfig: every argument of ``LLM``, its default, what it means, and its checks, in one place.

vLLM gathers its engine's arguments the same way (``EngineArgs``, ``vllm/engine/arg_utils.py``:471, which
``LLM.__init__`` builds from its own arguments, ``vllm/entrypoints/llm.py``:296), as nano-vllm does in its
``Config``. ``LLM(model, block_size=16, ...)`` makes one from its keyword arguments;
``LLM(config=EngineConfig(...))`` takes one made beforehand.

Everything that can be checked without the model is checked when the config is made, so a bad argument
raises before any model is looked for, with a ValueError naming the argument and the limit. What depends
on the loaded model (its context length, its device and dtype, its layer groups) is checked by
``check_model`` and ``model_len`` as soon as the engine knows it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from paged_lab import kernels
from paged_lab._checks import check_int, check_positive
from paged_lab.engine import dist
from paged_lab.engine.kv_cache import resolve_kv_cache_dtype
from paged_lab.engine.parallel_sampling import PARALLEL_SAMPLING
from paged_lab.engine.spec_decode.config import SpeculativeConfig
from paged_lab.kv_math import canonical_dtype
from paged_lab.memory.offload.worker import check_tier_size

FLAGS = ("enable_prefix_caching", "enforce_eager", "compile_progress")  # True or False, nothing else


@dataclass(frozen=True)
class EngineConfig:
    """The arguments of ``LLM`` (the same names, defaults and meaning). Frozen once checked: a variant is
    ``dataclasses.replace(config, block_size=32)``, which checks again.

    model: a name or path for ``paged_lab.models.load_model`` ("smollm2-135m" ships offline), or an
        already loaded transformers model (then pass ``tokenizer`` too). dtype: the weights' dtype.
    block_size: tokens per KV block. num_kv_blocks / kv_cache_memory: size of the pool, in blocks or in
        bytes (default 512 MiB); max_num_seqs: sequences running at once; max_num_batched_tokens: tokens
        computed per step (default 4,096: vLLM V1's offline ``LLM`` on a CPU, ``get_batch_defaults`` in
        ``vllm/engine/arg_utils.py``, which picks 8,192-16,384 on GPUs); a longer prompt is prefilled in
        chunks (chunked prefill, on by default in V1). None: no limit. max_model_len: the context a prompt
        and its outputs must fit in (None: the model's own).
    enable_prefix_caching: reuse KV blocks of identical prompt prefixes (vLLM's automatic prefix caching).
        A model with sliding-window layers (``config.layer_types``; ``models.sliding_window_variant``)
        runs its layer groups on a ``HybridBlockManager`` (``engine.kv_groups``), prefix caching included:
        a window group's hit needs only the blocks of its last window, as in vLLM.
    kv_cache_dtype: what the KV pool holds, vLLM's names: "auto" (the model's dtype) or "fp8" (K and V as
        ``torch.float8_e4m3fn``, 1 byte a number, with one scale per layer for K and one for V, 1.0 as
        vLLM's default; ``engine.kv_cache``). An fp8 pool holds 4x the tokens of fp32 in the same
        ``kv_cache_memory`` (2x bf16's). The C and Triton kernels read float caches, so "auto" runs the
        torch backend on an fp8 pool (``stats()["attention_backend_skipped"]`` says why);
        ``tools.kv_dtypes.compare_kv_cache_dtypes`` measures what fp8 changes in the output.
    attention_backend: "auto" (Triton on CUDA; on a CPU the C kernels where they can run, else torch),
        "triton", "cpu" (C kernels), "torch", "reference" (``paged_lab.kernels``). ``stats()`` says which ran.
    preemption: "recompute" (a preempted sequence drops its blocks and is prefilled again later).
    device: where the model loads (None: ``load_model``'s choice).
    parallel_sampling: how ``SamplingParams(n > 1)`` shares the prompt (``engine.parallel_sampling``).
        "fork" (the paper, vLLM V0): once the prompt is prefilled, n - 1 children fork the parent's block
        table (refcounts) and draw their first token from its logits; the first write into a shared,
        partly filled block is a copy-on-write (a child that finds no free window of ``max_num_seqs``
        waits in the queue and is prefilled anew once admitted). "prefix" (vLLM V1): n - 1 independent
        requests with the same prompt, added with it, which find its full blocks in the prefix cache
        (``enable_prefix_caching``) and compute the rest themselves; no copy-on-write. Both give the same
        tokens (completion i samples with seed + i). Default: "prefix", as vLLM V1.
    cpu_prepack: True multiplies with a packed copy of the weights (``kernels.cpu.fast_path``): the C panel
        matmul (AVX-512) for decode-sized batches, oneDNN where it cannot run; faster decode steps on CPU
        (docs/benchmarks.md), at the cost of a second copy of the weights in RAM (+540 MB for SmolLM2 in
        fp32; bf16 also keeps oneDNN's copy for prefills, +2 x 270 MB). None or False (the default): the
        model's own tensors, so that a notebook fits in Binder's 2 GB.
    enforce_eager: True (the default) runs every step eagerly. False compiles the decode step with
        ``torch.compile`` (``engine.compiled``: frozen weights, generated C++ GEMMs, fused element-wise
        ops) for the batch sizes ``compile_sizes`` (default 1, 2, 4; a decode batch is padded up to the
        next one, larger batches and prefills stay eager). CPU float32 only. Compiling takes a while per
        size (docs/benchmarks.md), once per engine (``compile_progress`` shows a bar), and holds another
        packed copy of the weights; it pays off in long runs (``benchmarks/engine_bench.py``). vLLM
        compiles by default; paged_lab does not, because notebooks and tests must start fast.
    kv_offloading_size: GiB of CPU memory for a second KV tier (vLLM's ``CacheConfig.kv_offloading_size``,
        native backend; ``memory/offload/``): every prompt block is copied there as it is computed, and a
        request whose prefix the GPU pool has lost loads it back instead of recomputing it
        (``stats()["external_prefix_cache_hits"]``). None (the default): no tier. Not for a model with
        sliding-window layers.
    speculative_config: None, or vLLM's ``{"method": "ngram", "num_speculative_tokens": k,
        "prompt_lookup_max": M, "prompt_lookup_min": m}`` (``engine.spec_decode``): each step drafts up to
        k tokens from the request's own n-grams and verifies them in the same forward; greedy outputs are
        unchanged. Needs parallel_sampling="prefix" and a full-attention model.
    tensor_parallel_size: split the model over that many ranks (``engine.dist``, notebook 09): each rank
        computes its share of the attention heads and MLP columns and keeps only its KV heads, in blocks
        with the same ids; this process is rank 0 (the one Scheduler and block table), the others are
        worker processes over a gloo process group. It must divide the query heads, and divide or be a
        multiple of the KV heads; eager only, parallel_sampling="prefix". ``kv_cache_memory`` is one
        rank's (vLLM sizes each GPU's pool the same way).
    """

    model: Any = "smollm2-135m"
    tokenizer: Any = None
    dtype: Any = "float32"
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int | None = 4096
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"
    attention_backend: str = "auto"
    preemption: str = "recompute"
    device: str | None = None
    max_model_len: int | None = None
    parallel_sampling: str = "prefix"
    cpu_prepack: bool | None = None
    enforce_eager: bool = True
    compile_sizes: tuple[int, ...] | None = None
    compile_progress: bool = True
    kv_offloading_size: float | None = None
    speculative_config: dict | None = None
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        """The checks that need no model; a bad argument raises here, before any model is looked for."""
        if self.parallel_sampling not in PARALLEL_SAMPLING:
            raise ValueError(f"parallel_sampling must be one of {PARALLEL_SAMPLING}, "
                             f"got {self.parallel_sampling!r}")
        if self.attention_backend not in kernels.BACKENDS:
            raise ValueError(f"attention_backend must be one of {kernels.BACKENDS}, "
                             f"got {self.attention_backend!r}")
        if self.preemption != "recompute":
            raise ValueError(f"preemption must be 'recompute' (the engine keeps no CPU swap space), "
                             f"got {self.preemption!r}")
        check_int("block_size", self.block_size, minimum=1)
        sizes = self.compile_sizes
        if sizes is not None and (not sizes or any(
                isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes)):
            raise ValueError(f"compile_sizes must be a non-empty list of integers >= 1, got {sizes!r}")
        resolve_kv_cache_dtype(self.kv_cache_dtype, "float32")  # (the name only)
        self._check_flags()
        if self.max_model_len is not None:  # a prompt needs 1 token and must leave room for 1 more
            checked = check_int("max_model_len", self.max_model_len, minimum=2)
            object.__setattr__(self, "max_model_len", checked)  # (a numpy integer -> int)
        self._check_sizes()
        if self.kv_offloading_size is not None:  # (the size of one block is checked once the model is known)
            check_tier_size(self.kv_offloading_size)
        spec = SpeculativeConfig.of(self.speculative_config)  # (a SpeculativeConfig from here on)
        if spec is not None and self.parallel_sampling != "prefix":
            raise ValueError(f"speculative_config needs parallel_sampling='prefix' (vLLM V1's), got "
                             f"{self.parallel_sampling!r}")
        object.__setattr__(self, "speculative_config", spec)
        object.__setattr__(self, "tensor_parallel_size", dist.check_args(
            self.tensor_parallel_size, self.enforce_eager, self.parallel_sampling))
        untested = spec is not None or self.kv_offloading_size is not None  # with TP: not combined here
        if self.tensor_parallel_size > 1 and untested:
            raise ValueError("tensor_parallel_size > 1 runs without speculative_config and "
                             "kv_offloading_size here (the ranks do not verify drafts or copy a tier); "
                             "leave them None")

    def _check_flags(self) -> None:
        """The on/off arguments must be True or False (``enable_prefix_caching='no'`` is truthy: it would
        turn caching on); ``cpu_prepack`` may also be None (the default: no packed copy)."""
        for name in FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.cpu_prepack is not None and not isinstance(self.cpu_prepack, bool):
            raise ValueError(f"cpu_prepack must be True, False or None, got {self.cpu_prepack!r}")

    def _check_sizes(self) -> None:
        """The pool's size and the scheduler's limits, with the messages their own owners give
        (``kv_cache.resolve_num_blocks``, ``Scheduler``), only earlier; and the weights' dtype name."""
        canonical_dtype(self.dtype)
        if self.num_kv_blocks is not None and self.kv_cache_memory is not None:
            raise ValueError("give num_kv_blocks or kv_cache_memory, not both")
        if self.num_kv_blocks is not None:
            check_int("num_kv_blocks", self.num_kv_blocks, minimum=1)
        if self.kv_cache_memory is not None:
            check_positive("kv_cache_memory", self.kv_cache_memory)
        check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        if self.max_num_batched_tokens is not None:
            check_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)

    # ------------------------------------------------------------------------------------ with the model
    def load_model(self, progress: bool = True) -> tuple[Any, Any, str]:
        """(transformers model, tokenizer, name) of ``model``: a name or path (``models.load_model``, with
        its progress bar unless ``progress`` is False), or a model already loaded (with ``tokenizer``, its
        weights in ``dtype``)."""
        model, tokenizer, dtype = self.model, self.tokenizer, self.dtype
        if isinstance(model, str):
            from paged_lab.models import load_model

            hf_model, loaded_tok, _ = load_model(model, dtype=dtype, device=self.device, progress=progress)
            return hf_model, tokenizer or loaded_tok, model
        if tokenizer is None:
            raise ValueError("tokenizer is required when model is an already loaded transformers model")
        param = next(model.parameters())
        if canonical_dtype(param.dtype) != canonical_dtype(dtype):
            raise ValueError(f"dtype={dtype!r} but the given model holds {param.dtype} weights")
        return model, tokenizer, getattr(model.config, "_name_or_path", "") or type(model).__name__

    def check_model(self, device, dtype: str, cache_dtype: str, hybrid: bool) -> None:
        """What the loaded model cannot run: the compiled decode step (``enforce_eager=False``) is built for
        CPU float32 over a cache of the model's dtype and for one AttentionMetadata for every layer; a
        model with sliding-window layers (``hybrid``: several layer groups) cannot "fork" either (the
        HybridBlockManager shares no blocks)."""
        if not self.enforce_eager and (device.type != "cpu" or dtype != "float32"):
            raise ValueError(f"enforce_eager=False compiles decode steps for CPU float32 only; this model is "
                             f"{dtype} on {device} (use enforce_eager=True)")
        if not self.enforce_eager and cache_dtype != dtype:
            raise ValueError(f"enforce_eager=False compiles decode steps over a cache of the model's dtype "
                             f"only (kv_cache_dtype='auto'); this cache is {cache_dtype} "
                             f"(use enforce_eager=True)")
        if hybrid and self.parallel_sampling == "fork":
            raise ValueError("parallel_sampling='fork': a model with sliding-window layers keeps one block "
                             "table per layer group and does not fork them; use parallel_sampling='prefix'")
        if hybrid and self.kv_offloading_size is not None:
            raise ValueError("kv_offloading_size: the CPU tier here keeps one full-attention group's blocks; "
                             "this model has sliding-window layer groups (leave kv_offloading_size=None)")
        if hybrid and self.speculative_config is not None:
            raise ValueError("speculative_config: this model has sliding-window layer groups; speculative "
                             "decoding runs on full-attention models only here")
        if hybrid and not self.enforce_eager:
            raise ValueError("enforce_eager=False: the compiled decode step takes one block table for every "
                             "layer; a model with sliding-window layers runs eagerly (enforce_eager=True)")

    def model_len(self, model_limit: int) -> int:
        """The context length: ``max_model_len``, at most the model's own limit (None: that limit)."""
        if self.max_model_len is None:
            return model_limit
        if self.max_model_len > model_limit:
            raise ValueError(f"max_model_len={self.max_model_len} is more than the model's context "
                             f"(max_position_embeddings={model_limit}); pass at most {model_limit}")
        return self.max_model_len


def engine_config(model: Any, tokenizer: Any, config: EngineConfig | None, kwargs: dict) -> EngineConfig:
    """``LLM``'s arguments as one checked EngineConfig: ``config`` as given, or one made of ``model``,
    ``tokenizer`` and the keyword arguments (not both)."""
    if config is None:
        return EngineConfig(model=model, tokenizer=tokenizer, **kwargs)
    if not isinstance(config, EngineConfig):
        raise ValueError(f"config must be an EngineConfig, got {type(config).__name__}")
    if kwargs or tokenizer is not None or model != EngineConfig.model:
        raise ValueError("give either config=EngineConfig(...) or the engine's arguments, not both")
    return config


def llm_signature() -> inspect.Signature:
    """What ``help(LLM)`` and a notebook's Shift+Tab show for ``LLM(...)``: ``model`` and ``tokenizer``,
    then every other EngineConfig field by keyword, with its default, then ``config``."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in fields(EngineConfig):
        kind = (inspect.Parameter.POSITIONAL_OR_KEYWORD if f.name in ("model", "tokenizer")
                else inspect.Parameter.KEYWORD_ONLY)
        params.append(inspect.Parameter(f.name, kind, default=f.default, annotation=f.type))
    params.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None,
                                    annotation="EngineConfig | None"))
    return inspect.Signature(params)


def eos_token_ids(model, tokenizer) -> list[int]:
    """End-of-sequence ids: the generation config's (may be a list), then the tokenizer's."""
    ids: list[int] = []
    for src in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        for t in src if isinstance(src, Sequence) else [src]:
            if t is not None and int(t) not in ids:
                ids.append(int(t))
    return ids
