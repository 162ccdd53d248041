"""Sampling (greedy, temperature, top-k, top-p, seeds) and SamplingParams validation: no model needed."""

import pytest
import torch

from paged_lab.engine.params import SamplingParams
from paged_lab.engine.sampling import filter_probs, make_generator, sample

LOGITS = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))


def test_greedy_rows_take_the_argmax_in_one_batch():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 1.0]])
    assert sample(logits, [SamplingParams(temperature=0)] * 2, [None, None]) == [1, 0]


def test_top_k_keeps_the_k_most_likely():
    p = filter_probs(LOGITS, temperature=1.0, top_k=2)
    torch.testing.assert_close(p, torch.tensor([0.5, 0.2, 0, 0, 0]) / 0.7)


@pytest.mark.parametrize("top_p,kept", [(0.5, 1), (0.6, 2), (0.69, 2), (0.71, 3), (0.9, 4), (1.0, 5)])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    p = filter_probs(LOGITS, temperature=1.0, top_p=top_p)
    assert int((p > 0).sum()) == kept
    assert p.sum().item() == pytest.approx(1.0)


def test_temperature_sharpens_and_flattens():
    cold, hot = filter_probs(LOGITS, 0.5), filter_probs(LOGITS, 2.0)
    assert cold[0] > 0.5 > hot[0]
    torch.testing.assert_close(filter_probs(LOGITS, 1.0), torch.softmax(LOGITS, -1))


def test_seeded_draws_repeat_and_follow_the_distribution():
    sp = SamplingParams(temperature=1.0, seed=3)
    logits = LOGITS.repeat(4000, 1)
    a = sample(logits, [sp] * 4000, [make_generator(3)] * 4000)
    b = sample(logits, [sp] * 4000, [make_generator(3)] * 4000)
    assert a == b
    freq = torch.bincount(torch.tensor(a), minlength=5).float() / 4000
    torch.testing.assert_close(freq, LOGITS.exp(), atol=0.03, rtol=0)  # 4000 draws: sd ~0.008
    c = sample(logits[:50], [sp] * 50, [make_generator(4)] * 50)
    assert c != a[:50]


@pytest.mark.parametrize("kw,field", [({"max_tokens": 0}, "max_tokens"), ({"temperature": -0.1},
                                                                          "temperature"),
                                      ({"top_p": 0.0}, "top_p"), ({"top_p": 1.01}, "top_p"), ({"n": 0}, "n"),
                                      ({"top_k": -2}, "top_k"), ({"stop": [""]}, "stop")])
def test_bad_params_raise_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kw)


def test_defaults_and_stop_string_normalisation():
    sp = SamplingParams(stop="\n")
    assert sp.stop == ["\n"] and sp.n == 1 and sp.max_tokens == 16 and not sp.greedy
    assert SamplingParams(temperature=0).greedy


def test_greedy_rows_take_the_first_of_tied_maxima_as_argmax_does():
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    logits[:, [17, 400, 999]] = logits.max() + 1  # three tied maxima in every row
    logits[2, 3] = float("nan")  # a NaN row: argmax picks the NaN
    got = sample(logits, [SamplingParams(temperature=0)] * 3, [None] * 3)
    assert got == torch.argmax(logits, dim=-1).tolist() == [17, 17, 3]
