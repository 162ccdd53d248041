"""Input checking: the engine's arguments, and every prompt and SamplingParams of a ``generate()`` call
against the engine, before any work starts.

Each bad input raises ValueError naming the argument (and, for a request, its index) and the limit.
Whether a request can ever fit in the KV pool is the Scheduler's rule (``Scheduler.never_fits``); this
module only words its answer for ``generate()``'s caller.
"""

from __future__ import annotations

import numbers

import torch

from paged_lab import kernels
from paged_lab._checks import check_int
from paged_lab.engine.parallel_sampling import PARALLEL_SAMPLING
from paged_lab.engine.params import SamplingParams
from paged_lab.sched import Scheduler

# One checked request: (its text or None, its prompt token ids, its SamplingParams).
Prepared = tuple[str | None, list[int], SamplingParams]


class InputProcessor:
    """Checks and tokenizes ``generate()``'s prompts against the model and the pool.

    max_model_len: the model context a prompt plus its outputs must fit in; vocab_size: token ids must
    be in [0, vocab_size); scheduler: the one whose pool-fit rule the requests must pass.
    """

    def __init__(self, tokenizer, vocab_size: int, max_model_len: int, scheduler: Scheduler):
        self.tokenizer, self.vocab_size, self.max_model_len = tokenizer, vocab_size, max_model_len
        self.scheduler = scheduler

    def process(self, prompts, sampling_params) -> list[Prepared]:
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
                raise ValueError(f"sampling_params has {len(params)} entries but there are "
                                 f"{len(prompts)} prompts")
        return [self._check_request(i, p, sp) for i, (p, sp) in enumerate(zip(prompts, params))]

    def max_tokens(self, prompt_token_ids: list[int], sp: SamplingParams) -> int:
        """Output tokens one completion can produce: max_tokens, cut where the model context ends."""
        return min(sp.max_tokens, self.max_model_len - len(prompt_token_ids))

    def _check_request(self, i: int, prompt, sp) -> Prepared:
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
        if bad := [t for t in ids if not 0 <= t < self.vocab_size]:
            raise ValueError(f"{where}: prompt_token_ids hold ids outside [0, {self.vocab_size}): {bad[:5]}")
        self._check_fits_pool(where, len(ids), self.max_tokens(ids, sp))
        return text, ids, sp

    def _check_fits_pool(self, where: str, num_prompt_tokens: int, max_tokens: int) -> None:
        """The Scheduler's pool-fit rule: the prompt, and prompt + max_tokens - 1, must fit in the slots one
        sequence can hold (the whole pool; with layer groups, what the groups' share of it allows), or the
        request could never be admitted. The message names the allocator's own reason for that limit."""
        sched = self.scheduler
        arg = sched.never_fits(num_prompt_tokens, max_tokens)
        cap, why = sched.max_slots_per_seq, sched.allocator.max_slots_per_seq_reason
        if arg == "prompt_token_ids":
            raise ValueError(f"{where}: prompt has {num_prompt_tokens} tokens but one sequence can hold at "
                             f"most {cap} ({why})")
        if arg == "max_tokens":
            raise ValueError(
                f"{where}: prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) needs up to "
                f"{num_prompt_tokens + max_tokens - 1} KV slots but one sequence can hold at most {cap} "
                f"({why}); lower max_tokens to <= {cap - num_prompt_tokens + 1} or enlarge the pool")

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


# ------------------------------------------------------------------------------------ engine arguments
def check_engine_args(attention_backend, preemption, block_size, compile_sizes, parallel_sampling) -> None:
    if parallel_sampling not in PARALLEL_SAMPLING:
        raise ValueError(f"parallel_sampling must be one of {PARALLEL_SAMPLING}, got {parallel_sampling!r}")
    if attention_backend not in kernels.BACKENDS:
        raise ValueError(f"attention_backend must be one of {kernels.BACKENDS}, got {attention_backend!r}")
    if preemption != "recompute":
        raise ValueError(f"preemption must be 'recompute' (the engine keeps no CPU swap space), "
                         f"got {preemption!r}")
    check_int("block_size", block_size, minimum=1)
    if compile_sizes is not None and (not compile_sizes or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in compile_sizes)):
        raise ValueError(f"compile_sizes must be a non-empty list of integers >= 1, got {compile_sizes!r}")


def check_speculative(spec, hybrid: bool, parallel_sampling: str):
    """``spec`` (a checked SpeculativeConfig) when the engine can run it: its tables must be plain
    full-attention ones, and "fork" parallel sampling shares partly filled blocks that drafts would write
    into."""
    if hybrid:
        raise ValueError("speculative_config: this model has sliding-window layer groups; speculative "
                         "decoding runs on full-attention models only here")
    if parallel_sampling != "prefix":
        raise ValueError(f"speculative_config needs parallel_sampling='prefix' (vLLM V1's), got "
                         f"{parallel_sampling!r}")
    return spec


def check_flags(cpu_prepack, **flags) -> None:
    """The on/off arguments must be True or False (``enable_prefix_caching='no'`` is truthy: it would
    turn caching on); ``cpu_prepack`` may also be None (auto)."""
    flags["cpu_prepack"] = False if cpu_prepack is None else cpu_prepack
    for name, value in flags.items():
        if not isinstance(value, bool):
            allowed = "True, False or None" if name == "cpu_prepack" else "True or False"
            raise ValueError(f"{name} must be {allowed}, got {value!r}")


def check_max_model_len(max_model_len: int | None) -> int | None:
    """None (the model's own limit) or an integer >= 2: a prompt needs 1 token and must leave room for 1
    more."""
    return None if max_model_len is None else check_int("max_model_len", max_model_len, minimum=2)


def model_len(max_model_len: int | None, model_limit: int) -> int:
    """The context length: ``max_model_len`` (already checked), at most the model's own limit."""
    if max_model_len is None:
        return model_limit
    if max_model_len > model_limit:
        raise ValueError(f"max_model_len={max_model_len} is more than the model's context "
                         f"(max_position_embeddings={model_limit}); pass at most {model_limit}")
    return max_model_len


def check_compilable(enforce_eager: bool, device: torch.device, dtype: str,
                      cache_dtype: str = "float32") -> None:
    if not enforce_eager and (device.type != "cpu" or dtype != "float32"):
        raise ValueError(f"enforce_eager=False compiles decode steps for CPU float32 only; this model is "
                         f"{dtype} on {device} (use enforce_eager=True)")
    if not enforce_eager and cache_dtype != dtype:
        raise ValueError(f"enforce_eager=False compiles decode steps over a cache of the model's dtype only "
                         f"(kv_cache_dtype='auto'); this cache is {cache_dtype} (use enforce_eager=True)")


def check_layer_groups(hybrid: bool, parallel_sampling: str, enforce_eager: bool) -> None:
    """What a model with sliding-window layers (several layer groups) cannot run here yet: "fork"
    parallel sampling (the HybridBlockManager shares no blocks) and the compiled decode graph (built
    for one AttentionMetadata for every layer)."""
    if hybrid and parallel_sampling == "fork":
        raise ValueError("parallel_sampling='fork': a model with sliding-window layers keeps one block table "
                         "per layer group and does not fork them; use parallel_sampling='prefix'")
    if hybrid and not enforce_eager:
        raise ValueError("enforce_eager=False: the compiled decode step takes one block table for every "
                         "layer; a model with sliding-window layers runs eagerly (enforce_eager=True)")


def check_arrival_steps(arrival_steps, n: int) -> list[int]:
    """One arrival step >= 0 per prompt (all 0 when None), or a ValueError naming the entry."""
    if arrival_steps is None:
        return [0] * n
    steps = list(arrival_steps)
    if len(steps) != n:
        raise ValueError(f"arrival_steps has {len(steps)} entries but there are {n} prompts")
    return [check_int(f"arrival_steps[{i}]", a, minimum=0) for i, a in enumerate(steps)]
