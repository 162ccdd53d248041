"""paged_lab.engine.spec_decode.speedup: the expected tokens per step (the geometric sum, and the mean of
simulated steps), vLLM's lookahead per proposer, and the replay of a greedy run with drafts."""

import random

import pytest

from paged_lab.engine.spec_decode.speedup import (
    LOOKAHEAD,
    ReplayStep,
    expected_tokens_per_step,
    lookahead_tokens,
    replay_greedy,
)


def test_expected_tokens_per_step_is_the_geometric_sum_and_the_simulated_mean():
    for a in (0.0, 0.3, 0.5, 0.9, 1.0):
        for k in range(0, 8):
            assert expected_tokens_per_step(a, k) == pytest.approx(sum(a ** i for i in range(k + 1)))
    assert expected_tokens_per_step(0.0, 5) == 1.0 and expected_tokens_per_step(1.0, 5) == 6.0
    assert expected_tokens_per_step(0.5, 3) == 1.875
    rng = random.Random(1)
    a, k, steps = 0.7, 4, 40_000
    total = 0
    for _ in range(steps):  # draft k, verify: accept until the first miss, then the target's own token
        n = 0
        while n < k and rng.random() < a:
            n += 1
        total += n + 1
    assert total / steps == pytest.approx(expected_tokens_per_step(a, k), rel=0.02)


def test_lookahead_per_proposer_is_vllms():
    assert lookahead_tokens("ngram", 3) == 0  # the drafts are scheduled tokens; no draft KV
    assert lookahead_tokens("eagle", 3) == 3 and lookahead_tokens("draft_model", 5) == 5
    assert lookahead_tokens("dflash", 3) == 4
    assert set(LOOKAHEAD) >= {"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"}


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="acceptance_rate must be between 0 and 1"):
        expected_tokens_per_step(1.5, 3)
    with pytest.raises(ValueError, match="acceptance_rate"):
        expected_tokens_per_step(float("nan"), 3)
    with pytest.raises(ValueError, match="num_speculative_tokens must be an integer >= 0"):
        expected_tokens_per_step(0.5, -1)
    with pytest.raises(ValueError, match="method must be one of"):
        lookahead_tokens("oracle", 3)
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1 and <= 2"):
        replay_greedy([1], [2, 3], lambda t, m: [], max_tokens=3)


def _oracle(output, prompt_len, wrong_at=()):
    """A proposer that knows the output and drafts it, except at the given output positions."""
    def propose(tokens, max_drafts):
        start = len(tokens) - prompt_len
        return [(-1 if start + i in wrong_at else output[start + i]) for i in range(min(3, max_drafts))]
    return propose


def test_replay_counts_steps_drafts_and_accepted_tokens():
    prompt, out = [7, 7, 7], list(range(10, 20))  # 10 output tokens
    never = replay_greedy(prompt, out, lambda tokens, m: [])
    assert [s.num_emitted for s in never] == [1] * 10  # no drafts: one token per step
    perfect = replay_greedy(prompt, out, _oracle(out, 3))
    # prefill (1), then 1 + 3 per step: 1, 4, 4, then 1 left (max_drafts 0)
    assert [(s.num_drafts, s.num_accepted, s.num_emitted) for s in perfect] == [
        (0, 0, 1), (3, 3, 4), (3, 3, 4), (0, 0, 1)]
    missed = replay_greedy(prompt, out, _oracle(out, 3, wrong_at={3}))
    assert missed[1] == ReplayStep(3, 2, 3)  # drafts for 1, 2, 3: 3 is wrong: 2 accepted + the target's 3
    for steps in (never, perfect, missed):
        assert sum(s.num_emitted for s in steps) == len(out)
        assert all(s.num_accepted <= s.num_drafts and s.num_emitted == s.num_accepted + 1 for s in steps)


def test_replay_of_random_runs_emits_every_token_once():
    rng = random.Random(2)
    for _ in range(200):
        out = [rng.randint(0, 3) for _ in range(rng.randint(1, 30))]
        wrong = {i for i in range(len(out)) if rng.random() < 0.3}
        steps = replay_greedy([1, 2], out, _oracle(out, 2, wrong))
        assert sum(s.num_emitted for s in steps) == len(out)
        assert len(steps) <= len(out)


def test_blocks_taken_ahead_follow_allocate_slots_with_a_lookahead_and_the_length_cap():
    """verify.blocks_to_allocate_ahead, extended: vLLM's allocate_slots asks for computed + scheduled (drafts
    included) + num_lookahead_tokens slots, capped at max_model_len (kv_cache_manager.py:541-544)."""
    from paged_lab.engine.spec_decode.verify import blocks_to_allocate_ahead

    assert blocks_to_allocate_ahead(14, 3, 4, 4) == 1                          # 17 slots: 5 blocks, 4 held
    assert blocks_to_allocate_ahead(15, 3, 4, 4, num_lookahead_tokens=lookahead_tokens("eagle", 3)) == 2
    assert blocks_to_allocate_ahead(14, 3, 4, 4, num_lookahead_tokens=lookahead_tokens("ngram", 3)) == 1
    assert blocks_to_allocate_ahead(14, 3, 4, 4, max_model_len=16) == 0        # capped: 16 slots, 4 blocks
    assert blocks_to_allocate_ahead(16, 3, 5, 4) == 0                          # a block kept after a rollback
    for known in range(1, 30):
        for drafts in range(0, 5):
            for held in range(0, 10):
                want = max(0, -(-(known + drafts) // 4) - held)
                assert blocks_to_allocate_ahead(known, drafts, held, 4) == want
    for bad, match in (((0, 3, 4, 4), "num_tokens must be an integer >= 1"),
                       ((14, -1, 4, 4), "num_draft_tokens must be an integer >= 0"),
                       ((14, 3, 4, 0), "block_size must be an integer >= 1"),
                       ((14, 3, -1, 4), "num_blocks_held must be an integer >= 0")):
        with pytest.raises(ValueError, match=match):
            blocks_to_allocate_ahead(*bad)
