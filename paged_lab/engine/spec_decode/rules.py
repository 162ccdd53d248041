"""Speculative decoding's rules, as numbers and small functions (notebook 10), free of the engine.

A step with drafts schedules ``1 + k`` tokens for a request: its last verified token and ``k`` drafted
ones. The target model scores every position in one forward pass; the request keeps the longest prefix
of drafts the target agrees with, plus one token of the target's own. These functions say which tokens
are kept (greedy and random sampling, as vLLM's ``RejectionSampler`` decides), how many KV blocks the step
must hold first (vLLM's ``KVCacheManager.allocate_slots`` arithmetic), and how many tokens a step yields
on average (the speculative decoding paper's formula).

vLLM 0.32.0 files, under ``site-packages/vllm/``: ``v1/sample/rejection_sampler.py`` (greedy 726-776,
random 829-890, the recovered token 1004-1070), ``v1/core/kv_cache_manager.py`` (``allocate_slots``,
541-544), ``v1/core/single_type_kv_cache_manager.py`` (``get_num_blocks_to_allocate``, 213, 227-235),
``config/vllm.py`` (``VllmConfig.num_lookahead_tokens``, 615-641).
"""

from __future__ import annotations

import math

import torch

from paged_lab._checks import check_int, check_token_ids
from paged_lab.kv_math import cdiv

# Lookahead slots per proposer, as multiples of k plus a constant (vllm/config/vllm.py
# VllmConfig.num_lookahead_tokens): a draft model or an EAGLE/MTP head writes KV for the k positions it
# drafts, DFlash's fill-in drafting one more; an n-gram proposer reads the request's own tokens and writes
# no KV, so it needs none.
LOOKAHEAD = {"ngram": (0, 0), "suffix": (0, 0), "eagle": (1, 0), "eagle3": (1, 0), "mtp": (1, 0),
             "draft_model": (1, 0), "dflash": (1, 1)}


def accepted_prefix(draft_token_ids, target_token_ids) -> int:
    """How many drafts the target accepts under greedy decoding: the leading drafts equal to the target's
    argmax at their position (vLLM ``rejection_greedy_sample_kernel``: the first mismatch stops it).

    ``target_token_ids[i]`` is the target's argmax after the request's tokens and drafts ``0..i-1``; it
    has one more entry than the drafts (after the last draft: the bonus token).

    >>> accepted_prefix([5, 9, 2], [5, 9, 7, 4])
    2
    """
    draft = check_token_ids("draft_token_ids", draft_token_ids)
    target = check_token_ids("target_token_ids", target_token_ids)
    if len(target) != len(draft) + 1:
        raise ValueError(f"target_token_ids must have len(draft_token_ids) + 1 = {len(draft) + 1} entries "
                         f"(one per scheduled position), got {len(target)}")
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return n


def verify_greedy(draft_token_ids, target_token_ids) -> list[int]:
    """The tokens a greedy step appends: the accepted drafts, then the target's own token where the first
    draft was rejected (or the bonus token after the last one). Always at least one token: a step with
    drafts never yields fewer tokens than a step without.

    >>> verify_greedy([5, 9, 2], [5, 9, 7, 4])
    [5, 9, 7]
    """
    n = accepted_prefix(draft_token_ids, target_token_ids)
    return list(target_token_ids[:n + 1])


def lookahead_tokens(method: str, num_speculative_tokens: int) -> int:
    """KV slots vLLM reserves past the scheduled tokens for a proposer (``VllmConfig.num_lookahead_tokens``):
    0 for ``ngram`` (the drafts are scheduled tokens already), k for a draft model or an EAGLE/MTP head,
    k + 1 for ``dflash``."""
    k = check_int("num_speculative_tokens", num_speculative_tokens, minimum=1)
    if method not in LOOKAHEAD:
        raise ValueError(f"method must be one of {sorted(LOOKAHEAD)}, got {method!r}")
    per_draft, extra = LOOKAHEAD[method]
    return per_draft * k + extra


def blocks_to_allocate(num_computed_tokens: int, num_new_tokens: int, num_lookahead_tokens: int,
                       block_size: int, num_blocks_held: int, max_model_len: int | None = None) -> int:
    """New blocks a running request needs before a step (vLLM ``allocate_slots`` for one full-attention
    group): slots for every computed token, every scheduled one (drafts included) and the lookahead,
    capped at ``max_model_len``, in whole blocks, less the blocks it already holds. Never negative: blocks
    a rejected draft left behind stay with the request and are written over later.

    >>> blocks_to_allocate(14, 4, 0, 4, 4)   # 14 computed + 1 + 3 drafts = 18 slots: 5 blocks, 4 held
    1
    """
    computed = check_int("num_computed_tokens", num_computed_tokens, minimum=0)
    new = check_int("num_new_tokens", num_new_tokens, minimum=1)
    lookahead = check_int("num_lookahead_tokens", num_lookahead_tokens, minimum=0)
    size = check_int("block_size", block_size, minimum=1)
    held = check_int("num_blocks_held", num_blocks_held, minimum=0)
    need_slot = computed + new + lookahead
    if max_model_len is not None:
        need_slot = min(need_slot, check_int("max_model_len", max_model_len, minimum=1))
    return max(cdiv(need_slot, size) - held, 0)


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """Tokens a step yields on average when each draft is accepted with probability ``a``, independently,
    and a rejection ends the step: ``1 + a + a² + ... + a^k = (1 − a^(k+1)) / (1 − a)`` (Leviathan et al.,
    2023, eq. 1). ``a = 0`` gives 1 (the target's own token), ``a = 1`` gives ``k + 1``.

    >>> expected_tokens_per_step(0.5, 3)
    1.875
    """
    k = check_int("num_speculative_tokens", num_speculative_tokens, minimum=0)
    a = float(acceptance_rate)
    if not 0.0 <= a <= 1.0 or math.isnan(a):
        raise ValueError(f"acceptance_rate must be between 0 and 1, got {acceptance_rate!r}")
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def rejection_sample(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, draft_token_id: int,
                     generator: torch.Generator) -> tuple[bool, int]:
    """One draft position under random sampling, vLLM's rule (``rejection_random_sample_kernel``): accept
    the draft ``x`` with probability ``min(1, p(x) / q(x))``; on rejection draw the token from
    ``max(p − q, 0)``, normalized (``sample_recovered_tokens_kernel``). The token that comes out is
    distributed exactly as ``p``, the target's distribution, whatever the draft.

    ``draft_probs=None`` is an n-gram draft, with no distribution of its own: ``q`` is all on ``x``, so
    the draft is accepted with probability ``p(x)`` and a rejection draws from ``p`` without ``x``.
    Returns ``(accepted, token_id)``.
    """
    p = target_probs.double()                                  # (vocab,)
    x = check_int("draft_token_id", draft_token_id, minimum=0, maximum=p.numel() - 1)
    q = torch.zeros_like(p) if draft_probs is None else draft_probs.double()
    if draft_probs is None:
        q[x] = 1.0                                             # a point mass on the drafted token
    if q.shape != p.shape:
        raise ValueError(f"draft_probs must have the target's shape {tuple(p.shape)}, got {tuple(q.shape)}")
    u = torch.rand((), generator=generator, dtype=torch.float64)
    if q[x] > 0 and p[x] / q[x] >= u:                          # vLLM's test, line for line
        return True, x
    residual = torch.clamp(p - q, min=0.0)                     # what the draft under-proposed
    if residual.sum() <= 0:                                    # p == q: a rejection cannot happen
        residual = p
    return False, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))


def sampled_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor | None, num_trials: int,
                         seed: int = 0) -> tuple[torch.Tensor, float]:
    """Run ``rejection_sample`` ``num_trials`` times, the draft drawn from ``q`` each time (an n-gram's
    fixed draft when ``draft_probs`` is None: the target's least likely token, the hardest case), and
    return the share of each output token and the share of drafts accepted. The shares approach
    ``target_probs``; the acceptance approaches ``Σ min(p, q)``."""
    trials = check_int("num_trials", num_trials, minimum=1)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    p = target_probs.double()
    counts = torch.zeros_like(p)
    accepted = 0
    fixed = int(torch.argmin(p)) if draft_probs is None else None
    for _ in range(trials):
        x = fixed if draft_probs is None else int(torch.multinomial(draft_probs.double(), 1, generator=gen))
        ok, token = rejection_sample(p, draft_probs, x, gen)
        counts[token] += 1
        accepted += ok
    return counts / trials, accepted / trials
