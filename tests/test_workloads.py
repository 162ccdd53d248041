import pytest

from paged_lab.sim import workloads as W


def test_seeded_generators_are_deterministic():
    for make in (W.uniform, W.long_tail, W.shared_prefix):
        assert make(20, seed=3) == make(20, seed=3)
        assert make(20, seed=3) != make(20, seed=4)


def test_uniform_lengths_stay_in_range():
    wl = W.uniform(200, prompt_len=(5, 9), output_len=(2, 3), seed=1)
    assert len(wl) == 200
    assert {r.prompt_len for r in wl} == set(range(5, 10))
    assert {r.max_tokens for r in wl} == {2, 3}


def test_fixed_and_poisson_arrivals():
    wl = W.fixed(50, prompt_len=7, output_len=3, requests_per_step=0.5, seed=0)
    assert all(r.prompt_len == 7 and r.max_tokens == 3 for r in wl)
    arrivals = [r.arrival_step for r in wl]
    assert arrivals == sorted(arrivals) and arrivals[-1] > 50  # ~2 steps apart on average


def test_prompts_never_share_a_prefix_by_accident():
    wl = W.uniform(100, seed=0)
    firsts = [r.prompt_token_ids[0] for r in wl]
    assert len(set(firsts)) == 100


def test_long_tail_is_skewed_and_clipped():
    wl = W.long_tail(2000, prompt_median=100, output_median=100, sigma=1.0, max_seq_len=512, seed=0)
    outs = sorted(r.max_tokens for r in wl)
    mean, median = sum(outs) / len(outs), outs[len(outs) // 2]
    assert mean > 1.3 * median  # a long tail pulls the mean above the median
    assert max(r.max_num_slots for r in wl) <= 512


def test_shared_prefix_groups_share_their_first_tokens():
    wl = W.shared_prefix(30, prefix_len=16, num_prefixes=2, seed=0)
    heads = {r.prompt_token_ids[:16] for r in wl}
    assert len(heads) == 2
    assert len({r.prompt_token_ids[16:] for r in wl}) == 30  # suffixes are each request's own


def test_story_presets():
    lockers = W.locker_story()
    assert [r.name for r in lockers] == list("ABCDEF")
    assert [r.max_num_slots for r in lockers] == list(W.LOCKER_LUGGAGE)
    assert lockers.total_slots <= W.LOCKER_SLOTS < W.locker_story_overflow().total_slots
    assert max(W.LOCKER_LUGGAGE_OVERFLOW) <= W.LOCKER_RESERVATION  # the old manager can hold each one
    windows = W.windows_story()
    assert [r.max_tokens for r in windows] == [6, 2, 2, 2, 2, 2]


@pytest.mark.parametrize("call, arg", [
    (lambda: W.uniform(-1), "num_requests"),
    (lambda: W.uniform(3, prompt_len=(-2, 4)), "prompt_len"),
    (lambda: W.uniform(3, output_len=(5, 2)), "output_len"),
    (lambda: W.fixed(3, prompt_len=0), "prompt_len"),
    (lambda: W.fixed(3, output_len=-1), "output_len"),
    (lambda: W.fixed(3, requests_per_step=0), "requests_per_step"),
    (lambda: W.long_tail(3, sigma=-1), "sigma"),
    (lambda: W.long_tail(3, max_seq_len=1), "max_seq_len"),
    (lambda: W.shared_prefix(3, prefix_len=0), "prefix_len"),
    (lambda: W.locker_story((3, -1)), "luggage"),
    (lambda: W.windows_story((0,)), "rounds"),
    (lambda: W.Request("x", (), 1), "prompt_token_ids"),
    (lambda: W.Request("x", (1,), -2), "max_tokens"),
    (lambda: W.Request("x", (1,), 1, arrival_step=-1), "arrival_step"),
])
def test_bad_input_names_the_argument(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()
