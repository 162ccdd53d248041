"""paged_lab._checks.check_int: the one integer validator."""

import numpy as np
import pytest

from paged_lab._checks import check_int
from paged_lab.memory import InvalidBlockConfig


@pytest.mark.parametrize("value,kwargs", [(1.5, {"minimum": 1}), (True, {}), ("3", {}), (None, {}),
                                          (0, {"minimum": 1}), (9, {"maximum": 8}),
                                          (2, {"minimum": 3, "maximum": 8})])
def test_check_int_rejects_and_names_the_argument_and_limit(value, kwargs):
    with pytest.raises(ValueError, match=r"max_num_seqs must be an integer") as err:
        check_int("max_num_seqs", value, **kwargs)
    for op, key in ((">=", "minimum"), ("<=", "maximum")):
        assert (key in kwargs) == (key in kwargs and f"{op} {kwargs[key]}" in str(err.value))
    assert repr(value) in str(err.value)


def test_check_int_returns_plain_ints_and_raises_the_given_error():
    assert check_int("n", 0, minimum=0) == 0
    got = check_int("n", np.int64(5), minimum=1, maximum=5)
    assert got == 5 and type(got) is int
    with pytest.raises(InvalidBlockConfig, match="block_size"):
        check_int("block_size", 0, minimum=1, error=InvalidBlockConfig)
