"""paged_lab._interrupts.on_error: the way back a call names for an exception that escapes it (issue 36:
the engine's abort path is this mechanism, not code of its own around generate())."""

import os
import signal

import pytest

from paged_lab import _interrupts as interrupts


def test_undo_runs_once_with_the_error_and_the_error_goes_on():
    seen = []
    with pytest.raises(RuntimeError, match="fell over"):
        with interrupts.on_error(lambda err, *args: seen.append((str(err), args)), "a", 2):
            raise RuntimeError("fell over")
    assert seen == [("fell over", ("a", 2))]
    with interrupts.on_error(lambda err: seen.append(err)):
        pass  # a body that ends normally runs nothing
    assert len(seen) == 1


def test_a_ctrl_c_during_the_undo_waits_for_it_to_finish():
    """The undo runs inside atomic(): a SIGINT that arrives while it puts the state back is raised when
    it has finished, never half-way."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    done = []

    def undo(err):
        os.kill(os.getpid(), signal.SIGINT)
        done.append(type(err).__name__)  # still runs: the SIGINT is held

    with pytest.raises(KeyboardInterrupt, match="held until the step"):
        with interrupts.on_error(undo):
            raise ValueError("cut")
    assert done == ["ValueError"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
