"""What speculative decoding buys, counted without running a model (notebook 10).

A step with ``k`` drafts yields the accepted drafts plus one token of the target's own. How many that is on
average, what the drafts cost in KV slots for each kind of proposer, and how a greedy run's steps fall out
once its tokens are known: greedy speculation never changes the tokens, so the steps of a run with ``k``
drafts follow from the run's own tokens and the proposer alone (``replay_greedy``), which is what the
notebook's playground draws. The rules themselves (which drafts are accepted, the slots a step takes) are
the engine's, in ``verify.py``.

vLLM 0.32.0, under ``site-packages/vllm/``: ``config/vllm.py`` ``VllmConfig.num_lookahead_tokens``
(615-641); the expected tokens per step are the speculative decoding paper's (Leviathan et al., 2023,
eq. 1), the paper ``v1/sample/rejection_sampler.py``'s ``RejectionSampler`` follows (line 46).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paged_lab._checks import check_int, check_token_ids

# Lookahead slots per proposer, as (multiple of k, constant) (vllm/config/vllm.py
# VllmConfig.num_lookahead_tokens): a draft model or an EAGLE/MTP head writes KV for the k positions it
# drafts, DFlash's fill-in drafting one more; an n-gram proposer reads the request's own tokens and writes
# no KV, so its drafts need only the slots they are scheduled into.
LOOKAHEAD = {"ngram": (0, 0), "suffix": (0, 0), "eagle": (1, 0), "eagle3": (1, 0), "mtp": (1, 0),
             "draft_model": (1, 0), "dflash": (1, 1)}


def lookahead_tokens(method: str, num_speculative_tokens: int) -> int:
    """KV slots vLLM reserves past the scheduled tokens for a proposer (``num_lookahead_tokens``): 0 for
    ``ngram`` (its drafts are scheduled tokens already), k for a draft model or an EAGLE/MTP head, k + 1 for
    ``dflash``.

    >>> lookahead_tokens("ngram", 3), lookahead_tokens("eagle", 3)
    (0, 3)
    """
    k = check_int("num_speculative_tokens", num_speculative_tokens, minimum=1)
    if method not in LOOKAHEAD:
        raise ValueError(f"method must be one of {sorted(LOOKAHEAD)}, got {method!r}")
    per_draft, extra = LOOKAHEAD[method]
    return per_draft * k + extra


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """Tokens a step yields on average when each draft is accepted with probability ``a``, independently,
    and the first rejection ends the step: ``1 + a + a² + ... + a^k = (1 − a^(k+1)) / (1 − a)``
    (Leviathan et al., 2023, eq. 1). ``a = 0`` gives 1 (the target's own token), ``a = 1`` gives ``k + 1``.

    >>> expected_tokens_per_step(0.5, 3)
    1.875
    """
    k = check_int("num_speculative_tokens", num_speculative_tokens, minimum=0)
    a = float(acceptance_rate)
    if math.isnan(a) or not 0.0 <= a <= 1.0:
        raise ValueError(f"acceptance_rate must be between 0 and 1, got {acceptance_rate!r}")
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass(frozen=True)
class ReplayStep:
    """One step of a replayed greedy run: the drafts it verified, how many were accepted, the tokens it
    emitted (accepted + 1, fewer only where ``max_tokens`` cut the run)."""

    num_drafts: int
    num_accepted: int
    num_emitted: int


def replay_greedy(prompt_token_ids: Sequence[int], output_token_ids: Sequence[int],
                  propose: Callable[[list[int], int], list[int]], max_tokens: int | None = None
                  ) -> list[ReplayStep]:
    """The steps of a greedy run with speculation, from the tokens a run without it produced: step 1 is the
    prefill (no drafts); each later step verifies ``propose(tokens so far, max_drafts)`` against the next
    output tokens, keeps the agreeing prefix and the target's own token. ``max_drafts`` is what is left of
    ``max_tokens`` (default: the output's length) after the step's own token. Exact because greedy
    verification emits the target's tokens whatever the drafts."""
    prompt = check_token_ids("prompt_token_ids", prompt_token_ids)
    out = check_token_ids("output_token_ids", output_token_ids)
    limit = len(out) if max_tokens is None else check_int("max_tokens", max_tokens, minimum=1,
                                                          maximum=len(out))
    steps, n = [ReplayStep(0, 0, 1)], 1
    while n < limit:
        drafts = list(propose(prompt + out[:n], limit - n - 1))
        a = 0
        while a < len(drafts) and drafts[a] == out[n + a]:
            a += 1
        steps.append(ReplayStep(len(drafts), a, min(a + 1, limit - n)))
        n += steps[-1].num_emitted
    return steps
