"""An interrupt at any line of the scheduler or the block manager leaves the engine whole (issue 35).

``KeyboardInterrupt`` is raised at every k-th executed line of paged_lab/memory/ and paged_lab/sched/ during
one generate() (``interrupt_sweep``: a ``sys.settrace`` hook), on a plain random Llama ("fork" parallel
sampling, n = 2, prefix caching, a pool small enough to preempt) and on one with a sliding-window layer
(a HybridBlockManager, prefix caching). After each: the invariants hold, every block is free, stats()
works and the next two calls give a fresh engine's tokens. On the code before, 93 of 620 points at
stride 7 broke the plain engine and 1,401 of 1,504 the windowed one.

A real SIGINT sent at such a line must not raise there at all: the step finishes first."""

import signal

import pytest
from interrupt_sweep import check_point, count_lines, plain_case, sweep, tokens, window_case

CASES = {"plain": (plain_case, 41), "window": (window_case, 97)}  # strides: ~110 points each, < 30 s


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    make, stride = CASES[request.param]
    return make(), stride


def test_a_raise_at_every_kth_line_leaves_the_engine_whole(case):
    case, stride = case
    points, broken = sweep(case, stride)
    assert points > 90
    assert broken == {}


def test_a_sigint_inside_a_step_waits_for_its_end(case):
    """SIGINT at a few lines inside the scheduler and the pool: KeyboardInterrupt comes at the end of the
    step (never from a line of memory/ or sched/), the handler is put back, and the engine is whole."""
    case, _ = case
    fresh = tokens(case.make(), case)
    total = count_lines(case)
    for at in (1, total // 5, total // 2, total - 3):
        assert check_point(case, at, fresh, sigint=True) is None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
