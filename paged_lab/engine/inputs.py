"""Input checking: every prompt and SamplingParams of a ``generate()`` call against the engine, before any
work starts (the engine's own arguments are checked by ``engine.config.EngineConfig``).

Each bad input raises ValueError naming the argument (and, for a request, its index) and the limit.
Whether a request can ever fit in the KV pool is the Scheduler's rule (``Scheduler.never_fits``); this
module only words its answer for ``generate()``'s caller.
"""

from __future__ import annotations

import numbers

from paged_lab._checks import check_int
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


def check_arrival_steps(arrival_steps, n: int) -> list[int]:
    """One arrival step >= 0 per prompt (all 0 when None), or a ValueError naming the entry."""
    if arrival_steps is None:
        return [0] * n
    steps = list(arrival_steps)
    if len(steps) != n:
        raise ValueError(f"arrival_steps has {len(steps)} entries but there are {n} prompts")
    return [check_int(f"arrival_steps[{i}]", a, minimum=0) for i, a in enumerate(steps)]
