import pytest

from paged_lab.sched import Sequence, SequenceStatus


def test_new_sequence_views():
    s = Sequence("A", [5, 6, 7], max_tokens=4, arrival_step=2)
    assert s.status is SequenceStatus.WAITING
    assert (s.num_prompt_tokens, s.num_output_tokens, s.num_tokens, len(s)) == (3, 0, 3, 3)
    assert s.max_num_slots == 3 + 4 - 1  # the last sampled token is returned, never stored
    s.token_ids += [8, 9]
    assert s.output_token_ids == [8, 9] and s.prompt_token_ids == [5, 6, 7]
    assert s.latency_steps is None
    s.finish_step = 6
    assert s.latency_steps == 5  # steps 2..6, both included
    assert "A" in repr(s) and s.name == "A"


def test_prompt_is_copied():
    prompt = [1, 2]
    s = Sequence(0, prompt, 1)
    s.token_ids.append(3)
    assert prompt == [1, 2]


@pytest.mark.parametrize("kwargs, arg", [
    (dict(prompt_token_ids=[], max_tokens=1), "prompt_token_ids"),
    (dict(prompt_token_ids=[1], max_tokens=0), "max_tokens"),
    (dict(prompt_token_ids=[1], max_tokens=-3), "max_tokens"),
    (dict(prompt_token_ids=[1], max_tokens=1.5), "max_tokens"),
    (dict(prompt_token_ids=[1], max_tokens=1, arrival_step=-1), "arrival_step"),
])
def test_bad_input_names_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        Sequence("x", **kwargs)
