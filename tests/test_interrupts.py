"""paged_lab._interrupts: a SIGINT during a step is raised at the step's end (main thread, Python's default
handler only); simulate() steps are atomic too (issue 35)."""

import os
import signal
import threading

import pytest

from paged_lab import _interrupts as interrupts
from paged_lab.sim import paged, simulate, workloads


def _sigint():
    os.kill(os.getpid(), signal.SIGINT)


def test_a_sigint_in_a_step_is_raised_at_its_end_and_the_handler_is_put_back():
    done = []
    with pytest.raises(KeyboardInterrupt, match="held until the step"):
        with interrupts.atomic():
            _sigint()
            done.append("the rest of the step ran")
    assert done and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt, match="held until the step"):  # held(): once per call
        with interrupts.held():
            for step in range(3):
                with interrupts.atomic():
                    if step == 1:
                        _sigint()
                    done.append(step)
    assert done[1:] == [0, 1]  # step 1 finished, step 2 never started
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_another_handler_and_other_threads_are_left_alone():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *a: seen.append("theirs"))
    try:
        with interrupts.atomic():
            _sigint()
            assert seen == ["theirs"]  # delivered at once, to the program's own handler
    finally:
        signal.signal(signal.SIGINT, previous)
    errors = []

    def in_a_thread():
        try:
            with interrupts.held(), interrupts.atomic():
                pass
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert not errors and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_simulate_lets_the_step_finish(monkeypatch):
    """A Ctrl-C inside the scheduler's update() of step 3: the step ends, the run stops there, and the
    allocator is whole (a SIGINT before would have cut update() half-way)."""
    from paged_lab.sched.scheduler import Scheduler

    bm = paged(64, 4, enable_prefix_caching=True, record_events=True)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=16)
    update, calls = sched.update, []

    def update_with_ctrl_c(out, sampled):
        calls.append(out.step)
        if out.step == 3:
            _sigint()
        return update(out, sampled)

    monkeypatch.setattr(sched, "update", update_with_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="held until the step"):
        simulate(workloads.uniform(12, prompt_len=(8, 24), output_len=(4, 12), seed=1), scheduler=sched)
    assert calls == [0, 1, 2, 3] and sched._last_out is None  # update() of step 3 ran to its end
    bm.check_invariants()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
