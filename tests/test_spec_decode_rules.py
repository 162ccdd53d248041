"""paged_lab.engine.spec_decode.rules: the greedy accepted prefix, the blocks a step with drafts allocates
(vLLM's allocate_slots arithmetic), the expected tokens per step, and the rejection-sampling rule, whose
output must follow the target's distribution whatever the draft (a statistical test, seeded)."""

import random

import pytest
import torch

from paged_lab.engine.spec_decode import rules
from paged_lab.engine.spec_decode.rules import (
    accepted_prefix,
    blocks_to_allocate,
    expected_tokens_per_step,
    lookahead_tokens,
    rejection_sample,
    sampled_distribution,
    verify_greedy,
)


def test_the_accepted_prefix_stops_at_the_first_disagreement():
    assert accepted_prefix([5, 9, 2], [5, 9, 7, 4]) == 2
    assert accepted_prefix([5, 9, 2], [1, 9, 2, 4]) == 0          # a later agreement does not count
    assert accepted_prefix([5, 9, 2], [5, 9, 2, 4]) == 3
    assert accepted_prefix([], [8]) == 0
    assert verify_greedy([5, 9, 2], [5, 9, 7, 4]) == [5, 9, 7]     # 2 accepted + the target's own token
    assert verify_greedy([5, 9, 2], [5, 9, 2, 4]) == [5, 9, 2, 4]  # all accepted + the bonus token
    assert verify_greedy([5], [6, 1]) == [6]                       # never fewer than one token


def test_greedy_verification_keeps_exactly_the_targets_tokens():
    """Whatever the drafts, the kept tokens are a prefix of what the target alone would pick."""
    rng = random.Random(0)
    for _ in range(500):
        k = rng.randint(0, 6)
        target = [rng.randint(0, 3) for _ in range(k + 1)]
        draft = [t if rng.random() < 0.6 else rng.randint(0, 3) for t in target[:k]]
        kept = verify_greedy(draft, target)
        assert kept == target[:len(kept)] and 1 <= len(kept) <= k + 1
        assert kept[:-1] == draft[:len(kept) - 1]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"target_token_ids must have len\(draft_token_ids\) \+ 1 = 3"):
        accepted_prefix([1, 2], [1, 2])
    with pytest.raises(ValueError, match="draft_token_ids"):
        accepted_prefix([1, "a"], [1, 2, 3])
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        blocks_to_allocate(4, 1, 0, 0, 1)
    with pytest.raises(ValueError, match="num_new_tokens must be an integer >= 1"):
        blocks_to_allocate(4, 0, 0, 4, 1)
    with pytest.raises(ValueError, match="acceptance_rate must be between 0 and 1"):
        expected_tokens_per_step(1.5, 3)
    with pytest.raises(ValueError, match="method must be one of"):
        lookahead_tokens("oracle", 3)
    with pytest.raises(ValueError, match="draft_token_id must be an integer >= 0 and <= 3"):
        rejection_sample(torch.full((4,), 0.25), None, 4, torch.Generator())


def test_blocks_to_allocate_follows_allocate_slots():
    """vLLM: slots for computed + new (drafts included) + lookahead tokens, capped at max_model_len, in
    whole blocks, less the blocks held, never below 0 (single_type_kv_cache_manager.py:227-235)."""
    # 14 computed, 1 + 3 drafts scheduled, blocks of 4, 4 held (16 slots): 18 slots need a 5th block
    assert blocks_to_allocate(14, 4, 0, 4, 4) == 1
    # an EAGLE-style proposer reserves k more: 14 + 4 + 3 = 21 slots, 6 blocks
    assert blocks_to_allocate(14, 4, 3, 4, 4) == 2
    # after 2 of 3 drafts were rejected the request holds 5 blocks for 16 computed tokens: nothing new,
    # the blocks of the rejected drafts are kept and written over
    assert blocks_to_allocate(16, 4, 0, 4, 5) == 0
    assert blocks_to_allocate(14, 4, 0, 4, 4, max_model_len=16) == 0   # capped at max_model_len
    for computed in range(0, 40):
        for new in range(1, 6):
            for held in range(0, 12):
                slots = computed + new
                assert blocks_to_allocate(computed, new, 0, 4, held) == max(-(-slots // 4) - held, 0)


def test_lookahead_per_proposer_is_vllms():
    assert lookahead_tokens("ngram", 3) == 0       # the drafts are scheduled tokens; no draft KV
    assert lookahead_tokens("eagle", 3) == 3 and lookahead_tokens("draft_model", 5) == 5
    assert lookahead_tokens("dflash", 3) == 4
    assert set(rules.LOOKAHEAD) >= {"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"}


def test_expected_tokens_per_step_is_the_geometric_sum_and_the_simulated_mean():
    for a in (0.0, 0.3, 0.5, 0.9, 1.0):
        for k in range(0, 8):
            assert expected_tokens_per_step(a, k) == pytest.approx(sum(a ** i for i in range(k + 1)))
    assert expected_tokens_per_step(0.0, 5) == 1.0 and expected_tokens_per_step(1.0, 5) == 6.0
    assert expected_tokens_per_step(0.5, 3) == 1.875
    rng = random.Random(1)
    a, k, steps = 0.7, 4, 40_000
    total = 0
    for _ in range(steps):                                   # draft, verify: accept until the first miss
        n = 0
        while n < k and rng.random() < a:
            n += 1
        total += n + 1                                       # + the target's own token
    assert total / steps == pytest.approx(expected_tokens_per_step(a, k), rel=0.02)


def _dist(values):
    t = torch.tensor(values, dtype=torch.float64)
    return t / t.sum()


@pytest.mark.parametrize("draft", ["a bad draft model", "a close draft model", "n-gram (no draft probs)"])
def test_rejection_sampling_keeps_the_targets_distribution(draft):
    p = _dist([0.5, 0.2, 0.15, 0.1, 0.05])
    q = {"a bad draft model": _dist([0.05, 0.05, 0.1, 0.3, 0.5]),
         "a close draft model": _dist([0.45, 0.25, 0.1, 0.15, 0.05]),
         "n-gram (no draft probs)": None}[draft]
    shares, accepted = sampled_distribution(p, q, num_trials=20_000, seed=3)
    assert torch.max(torch.abs(shares - p)) < 0.015, (shares, p)
    want = float(torch.minimum(p, q).sum()) if q is not None else float(p.min())  # Σ min(p, q)
    assert accepted == pytest.approx(want, abs=0.015)


def test_without_the_residual_rule_the_distribution_is_wrong():
    """The test above can fail: resampling from p itself (not max(p − q, 0)) after a rejection skews the
    output towards the draft's favourites."""
    p, q = _dist([0.5, 0.2, 0.15, 0.1, 0.05]), _dist([0.05, 0.05, 0.1, 0.3, 0.5])
    gen = torch.Generator().manual_seed(3)
    counts = torch.zeros(5, dtype=torch.float64)
    for _ in range(20_000):
        x = int(torch.multinomial(q, 1, generator=gen))
        ok, token = rejection_sample(p, q, x, gen)
        counts[token if ok else int(torch.multinomial(p, 1, generator=gen))] += 1
    assert torch.max(torch.abs(counts / 20_000 - p)) > 0.05


def test_a_draft_equal_to_the_target_is_always_accepted():
    p = _dist([0.4, 0.3, 0.3])
    gen = torch.Generator().manual_seed(0)
    assert all(rejection_sample(p, p, x, gen)[0] for x in (0, 1, 2) for _ in range(50))
