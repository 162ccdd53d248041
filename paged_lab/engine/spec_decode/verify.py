"""Verify the drafts: one forward pass scores every draft position, and the longest agreeing prefix stays.

A request with pending token ``t`` and drafts ``d1..dk`` runs ``[t, d1, .., dk]`` as one short query (a
prefill-like chunk over its block table); row i's logits are the target's next token after position i.
So row 0 checks d1, row 1 checks d2 (given d1), ..., and row k is the token after dk.

* Greedy: keep d1..da while each equals the target's argmax, then append the target's own token at the
  first disagreement (or row k's when all agree): ``a + 1`` tokens per step, the same tokens as plain
  decoding, one token at worst (vLLM: ``rejection_greedy_sample_kernel``, ``v1/sample/rejection_sampler.py``).
* Random: accept draft d with probability p(d) (the n-gram draft is a single token: its "draft
  probability" is 1, vLLM's ``NO_DRAFT_PROBS``); at the first rejection draw from p with d removed
  (``sample_recovered_tokens_kernel``); all accepted -> the bonus token from the last row. Each output
  token is then distributed exactly as p: p(d) * [x = d] + (1 - p(d)) * p(x) / (1 - p(d)) * [x != d] = p(x).
"""

from __future__ import annotations

import torch

from paged_lab._checks import check_int
from paged_lab.kv_math import cdiv


def accepted_prefix(draft_token_ids, target_token_ids) -> int:
    """How many leading drafts the target agrees with: ``target_token_ids[i]`` is the target's own token
    at draft position i (its argmax, greedy).

    >>> accepted_prefix([5, 7, 9], [5, 7, 2, 4])
    2
    """
    n = 0
    for draft, target in zip(draft_token_ids, target_token_ids):
        if draft != target:
            break
        n += 1
    return n


def greedy_verify(draft_token_ids, target_argmax) -> list[int]:
    """The tokens a greedy step emits: the accepted drafts plus the target's token after them
    (``target_argmax``: ``len(drafts) + 1`` ids, one per scored row).

    >>> greedy_verify([5, 7, 9], [5, 7, 2, 4])   # accept 2 of 3, then the target's own 2
    [5, 7, 2]
    """
    a = accepted_prefix(draft_token_ids, target_argmax)
    return list(draft_token_ids[:a]) + [int(target_argmax[a])]


def rejection_sample(
    draft_token_ids, target_probs: torch.Tensor, generator: torch.Generator | None
) -> list[int]:
    """The tokens a sampled step emits. ``target_probs``: ``[len(drafts) + 1, vocab]``, the target's
    probabilities at each scored row (after temperature / top-k / top-p)."""
    out = []
    for i, d in enumerate(draft_token_ids):
        p = target_probs[i]  # [vocab]
        u = torch.rand((), generator=generator, device=p.device, dtype=torch.float64)
        if p[d] >= u and p[d] > 0:  # vLLM: target_prob / draft_prob >= uniform, draft_prob = 1
            out.append(int(d))
            continue
        residual = p.clone()
        residual[d] = 0.0  # max(p - q, 0) with q the draft's one-hot
        out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(target_probs[len(draft_token_ids)], 1, generator=generator)))  # bonus
    return out


def blocks_to_allocate_ahead(
    num_tokens: int, num_draft_tokens: int, num_blocks_held: int, block_size: int,
    num_lookahead_tokens: int = 0, max_model_len: int | None = None,
) -> int:
    """New blocks a step takes so that ``num_draft_tokens`` drafts after the ``num_tokens`` known tokens (the
    pending one included) have slots: vLLM's ``allocate_slots`` (``kv_cache_manager.py:541-544``) asks for
    ``num_tokens_need_slot`` = computed + scheduled (drafts included) + ``num_lookahead_tokens``, at most
    ``max_model_len``, and ``get_num_blocks_to_allocate`` takes
    ``cdiv(num_tokens_need_slot, block_size) - len(req_blocks)``, never below 0 (a block kept from an earlier
    rollback is reused). The lookahead is 0 for the n-gram proposer; a draft model or an EAGLE head writes KV
    of its own and needs k more (``speedup.lookahead_tokens``).

    >>> blocks_to_allocate_ahead(num_tokens=14, num_draft_tokens=3, num_blocks_held=4, block_size=4)
    1
    >>> blocks_to_allocate_ahead(15, 3, 4, 4, num_lookahead_tokens=3)   # an EAGLE-style proposer
    2
    """
    need_slot = (check_int("num_tokens", num_tokens, minimum=1)
                 + check_int("num_draft_tokens", num_draft_tokens, minimum=0)
                 + check_int("num_lookahead_tokens", num_lookahead_tokens, minimum=0))
    if max_model_len is not None:
        need_slot = min(need_slot, check_int("max_model_len", max_model_len, minimum=1))
    held = check_int("num_blocks_held", num_blocks_held, minimum=0)
    return max(0, cdiv(need_slot, check_int("block_size", block_size, minimum=1)) - held)
