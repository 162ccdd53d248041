"""Graded exercises: the learner writes a function, ``check`` grades it against the package's own code.

    def slot_for(pos, block_table, block_size):
        ...
    check(slot_for)            # ✓, or the smallest input it gets wrong, expected vs actual, and a hint

``check`` finds the exercise by the function's name (or ``exercise=``), runs the function on a few
fixed cases, then on inputs that hypothesis generates; on a wrong answer hypothesis shrinks the input
to the smallest one that still fails. The expected answer always comes from the real implementation
(``paged_lab.kv_math``, ``memory``, ``sched``, ``kernels.reference``, ``engine``), never from a copy.
The solution is shown only when asked: ``check(fn, show_solution=True)`` or ``solution("slot_for")``
print the package code that the answer is checked against.

The result renders as coloured HTML in Jupyter and as plain text anywhere else (``print(result)``).
A function that raises, such as the stub's ``NotImplementedError``, is reported in a sentence, not a
traceback. ``make exercises`` (scripts/make_exercises.py) writes the learner copies of the notebooks.

Two things the grader does not let through:
- a function that does not return: each call gets ``time_limit`` seconds (TIME_LIMIT_S by default),
  then it is stopped and the case it was stuck on is reported. The clock is ``signal.setitimer``, whose
  signal interrupts even a pure-Python ``while True:`` loop between two bytecodes and leaves the kernel
  as it was. It works where Jupyter runs a cell, in the main thread of a POSIX kernel; elsewhere (Windows,
  another thread) the calls run without a limit.
- an answer that only claims to be right: ``==`` asks the learner's object too (Python tries its
  ``__eq__`` when the answer's says NotImplemented, and first when it is a subclass), so an object whose
  ``__eq__`` always says True would pass. The answer's type is checked first, element by element, then
  the values are compared.
"""

from __future__ import annotations

import html
import importlib
import inspect
import math
import re
import signal
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from paged_lab import kv_math
from paged_lab.classroom import i18n
from paged_lab.kv_math import cdiv
from paged_lab.memory import block_manager as _bm
from paged_lab.memory import prefix_cache

CHECK_CLASS = "paged-lab-check"  # the result's HTML box (the browser test reads it)
WRAP = 88  # the plain-text feedback (print(result)) is wrapped at word boundaries to this width
PASS, FAIL = "✓", "✗"
MAX_EXAMPLES = 25  # generated inputs per check: enough to find the usual slips, fast on a laptop CPU
TIME_LIMIT_S = 10.0  # seconds per call of the learner's function; the package's answers take milliseconds


@dataclass(frozen=True)
class Exercise:
    name: str  # the function the learner writes
    params: tuple[str, ...]
    expected: Callable[..., Any]  # the real implementation's answer for the same arguments
    cases: tuple[tuple, ...]  # fixed arguments, tried first
    strategy: Callable[[], Any]  # builds a hypothesis strategy of argument tuples (lazily)
    hint: str
    real: str  # "module:qualname" of the package code the answer comes from (shown only when asked)
    same: Callable[[Any, Any], bool] = lambda a, b: a == b
    fmt: Callable[[Any], str] = repr  # how an argument or an answer is shown


@dataclass(frozen=True)
class Result:
    """What ``check`` found: ``passed``, and a text for the learner (``str(result)``)."""

    exercise: str
    passed: bool
    text: str
    solution: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return _wrapped(self.text) + (f"\n\n{self.solution}" if self.solution else "")

    def _repr_html_(self) -> str:
        color = "#2ca02c" if self.passed else "#d62728"
        head, _, rest = _shown(self.text).partition("\n")
        # pre-wrap keeps the lines; word-break:normal undoes JupyterLab's break-all (which cut words in two)
        body = (f"<pre style='white-space:pre-wrap;word-break:normal;overflow-wrap:break-word;margin:4px 0'>"
                f"{html.escape(rest)}</pre>" if rest else "")
        sol = (f"<details open><summary>{i18n.t('Solution')}</summary><pre>{html.escape(_shown_solution(self.solution))}"
               "</pre></details>" if self.solution else "")
        return (f'<div class="{CHECK_CLASS}" data-passed="{str(self.passed).lower()}" '
                f'style="border-left:4px solid {color};padding:4px 8px">'
                f'<b style="color:{color}">{html.escape(head)}</b>{body}{sol}</div>')

    def __repr__(self) -> str:
        return f"Result({self.exercise!r}, passed={self.passed})"

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text/plain: the feedback itself
        p.text(_wrapped(_shown(self.text)) + (f"\n\n{_shown_solution(self.solution)}" if self.solution else ""))


def stub_message(name: str) -> str:
    """What a learner copy's stub raises (scripts/make_exercises.py): where to write, no hint (the
    check prints the hint once, under its verdict)."""
    return f"write {name}() here"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _wrapped(text: str, width: int = WRAP) -> str:
    """``text`` with each line wrapped at word boundaries (never inside a word); an indented line's
    continuation keeps the indent, four spaces deeper."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip()
        indent = line[:len(line) - len(body)]
        out.append(textwrap.fill(body, width, initial_indent=indent, subsequent_indent=indent + ("    " if indent else "  "),
                                 break_long_words=False, break_on_hyphens=False) if body else line)
    return "\n".join(out)


def _shown(text: str) -> str:
    """The feedback in the learner's language (``paged_lab.classroom.i18n``), line by line; the Result itself
    stays English, so a notebook's ``assert result, result.text`` reads the same in every edition."""
    if i18n.lang() == "en":
        return text
    lines = []
    for line in text.split("\n"):
        body = line.lstrip()  # the indent of "  expected: ..." stays
        lines.append(line[:len(line) - len(body)] + i18n.t(body, record=False) if body else line)
    return "\n".join(lines)


def _shown_solution(text: str) -> str:
    """The solution's first line in the learner's language; the package's source below it as it is."""
    head, sep, code = text.partition("\n")
    return i18n.t(head, record=False) + sep + code


# ---------------------------------------------------------------- grading


class _Wrong(Exception):
    """The learner's answer differs from the real one on ``args``."""


class _TimedOut(BaseException):
    """The learner's function ran past the time limit on ``args``. A BaseException, so that neither the
    learner's ``except Exception:`` nor hypothesis (which would shrink, at a time limit per try) holds it."""

    def __init__(self, args: tuple):
        super().__init__(args)
        self.case = args


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise _TimedOut (without arguments) in the code run inside, once ``seconds`` have passed.

    SIGALRM from ``signal.setitimer``: Python runs its handler in the main thread between two
    bytecodes, so it stops a pure-Python endless loop; the timer and the previous handler are put back
    on the way out. Without SIGALRM (Windows) or outside the main thread, no limit."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise _TimedOut(())

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(fn: Callable, args: tuple, time_limit: float | None = None) -> tuple[bool, Any]:
    """(True, answer) or (False, the exception the learner's function raised); raises _TimedOut(args)
    when it has not returned after ``time_limit`` seconds."""
    try:
        with _time_limit(time_limit):
            return True, fn(*_copy(args))
    except _TimedOut:
        raise _TimedOut(args) from None
    except Exception as e:  # the learner's code: any error is feedback, not a crash
        return False, _stub_error(e) or e


def _stub_error(e: BaseException) -> NotImplementedError | None:
    """The stub's NotImplementedError, also when a wrapper re-raised it (Triton's interpreter does)."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, NotImplementedError):
            return e
        found = re.search(r"NotImplementedError\((['\"])(.*)\1\)", str(e), flags=re.S)
        if found:
            return NotImplementedError(found.group(2))
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _copy(args: tuple) -> tuple:
    """Fresh copies of list and tensor arguments, so a function that mutates them cannot fool the grader."""
    out = []
    for a in args:
        if isinstance(a, list):
            a = list(a)
        elif hasattr(a, "clone"):
            a = a.clone()
        out.append(a)
    return tuple(out)


def _mismatch(ex: Exercise, fn: Callable, args: tuple, time_limit: float | None = None) -> str | None:
    """Why ``fn`` fails on ``args`` (a message), or None when its answer is right (_TimedOut: see _run)."""
    ok, got = _run(fn, args, time_limit)
    want = ex.expected(*_copy(args))
    if not ok:
        return f"raised {type(got).__name__}: {got}"
    return _compare(ex, want, got)


def _compare(ex: Exercise, want, got) -> str | None:
    """Types first, then values: once ``got`` has the answer's types all the way down, ``==`` runs the
    built-in types' own comparison, never a method the learner wrote."""
    different = _type_difference(want, got)
    if different is not None:
        where, got_type, want_type = different
        if not where:
            return f"returned {ex.fmt(got)} (type {got_type}, but the answer is of type {want_type})"
        return f"returned {ex.fmt(got)} (yours{where} is of type {got_type}, but the answer's is of type {want_type})"
    try:
        if ex.same(want, got):
            return None
    except Exception as e:  # e.g. a tensor of the wrong shape
        return f"returned {ex.fmt(got)}, which cannot be compared with the answer ({type(e).__name__}: {e})"
    return f"returned {ex.fmt(got)}"


# The answers' types that _type_difference holds a learner's answer to (the exercises' answers are made of
# these; a tensor or a float answer is compared by the exercise's own `same`, which reads numbers, not ==).
_CHECKED_TYPES = (int, str, bytes, list, tuple, dict, type(None))  # int: bool too


def _type_difference(want, got, where: str = "") -> tuple[str, str, str] | None:
    """Where ``got`` first differs in type from the answer ``want``: (path, its type, the answer's type),
    e.g. ("[2]", "str", "int"), or None. Exact types, not isinstance(): a subclass could redefine ==.
    Inside lists, tuples, dicts and dataclasses, element by element."""
    if not (isinstance(want, _CHECKED_TYPES) or is_dataclass(want)):
        return None
    if type(got) is not type(want):
        return where, type(got).__name__, type(want).__name__
    if isinstance(want, (list, tuple)):
        pairs = [(f"[{i}]", w, g) for i, (w, g) in enumerate(zip(want, got))]
    elif isinstance(want, dict):
        pairs = [(f"[{k!r}]", want[k], got[k]) for k in want if k in got]
    elif is_dataclass(want):
        pairs = [(f".{f.name}", getattr(want, f.name), getattr(got, f.name)) for f in fields(want)]
    else:
        return None
    for step, w, g in pairs:
        found = _type_difference(w, g, where + step)
        if found is not None:
            return found
    return None


def _call(ex: Exercise, args: tuple) -> str:
    return f"{ex.name}(" + ", ".join(f"{p}={ex.fmt(a)}" for p, a in zip(ex.params, args)) + ")"


def _failure(ex: Exercise, args: tuple, why: str) -> str:
    return (f"{FAIL} {ex.name}: not yet. On the smallest input it gets wrong:\n"
            f"  {_call(ex, args)}\n"
            f"  expected: {ex.fmt(ex.expected(*_copy(args)))}\n"
            f"  yours:    {why.removeprefix('returned ')}\n"
            f"Hint: {ex.hint}")


def _timed_out(ex: Exercise, args: tuple, time_limit: float, generated: bool) -> str:
    where = "a generated input" if generated else "a fixed case"
    return (f"{FAIL} {ex.name}: still running after {time_limit:g} s, so the check stopped it. On {where}:\n"
            f"  {_call(ex, args)}\n"
            f"A loop that never ends? If your function is only slow, give it more time: "
            f"check({ex.name}, time_limit={4 * time_limit:g}).\n"
            f"Hint: {ex.hint}")


def _size(value) -> float:
    """How big an input is, as hypothesis shrinks: numbers by magnitude, collections by length and
    contents, a model by its fields, a tensor by its elements. The grader reports the smallest."""
    if isinstance(value, bool) or value is None:
        return float(bool(value))
    if isinstance(value, (int, float)):
        return abs(value)
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return len(value) + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) + sum(_size(v) for v in value)
    if is_dataclass(value):
        return sum(_size(getattr(value, f.name)) for f in fields(value) if not isinstance(getattr(value, f.name), str))
    if hasattr(value, "numel"):
        return value.numel()
    return 0.0


def _search(ex: Exercise, fn: Callable, max_examples: int, time_limit: float | None = None) -> tuple | None:
    """The smallest generated arguments on which ``fn`` is wrong (hypothesis shrinks them), or None.
    _TimedOut goes straight through: hypothesis does not shrink a BaseException."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings

    last_failing: list[tuple] = []

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
              verbosity=Verbosity.quiet, phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(ex.strategy())
    def answers_like_the_package(args):
        if _mismatch(ex, fn, args, time_limit) is not None:
            last_failing.append(args)  # hypothesis replays the shrunk example last
            raise _Wrong

    try:
        answers_like_the_package()
    except _TimedOut:
        raise
    except _Wrong:
        return last_failing[-1]
    except BaseException as e:  # hypothesis groups errors it saw (an ExceptionGroup on several kinds)
        if last_failing:
            return last_failing[-1]
        raise e
    return None


def check(fn: Callable, exercise: str | None = None, *, show_solution: bool = False,
          max_examples: int = MAX_EXAMPLES, time_limit: float | None = TIME_LIMIT_S) -> Result:
    """Grade the learner's ``fn`` against the package's implementation (see the module docstring).
    Each call of ``fn`` may take ``time_limit`` seconds (None: no limit)."""
    name = exercise or getattr(fn, "__name__", None)
    if name not in EXERCISES:
        raise ValueError(f"exercise must be one of {sorted(EXERCISES)}, got {name!r} "
                         "(name your function as the exercise does, or pass exercise=...)")
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a number of seconds above 0, or None for no limit; got {time_limit!r}")
    ex = EXERCISES[name]
    shown = solution(name) if show_solution else None
    if not callable(fn):
        return Result(name, False, f"{FAIL} {name}: pass the function itself, check({name}), "
                                   f"not {type(fn).__name__}", shown)
    failing = []  # (args, why) of every fixed case it gets wrong
    for args in ex.cases:
        try:
            why = _mismatch(ex, fn, args, time_limit)
        except _TimedOut:
            return Result(name, False, _timed_out(ex, args, time_limit, generated=False), shown)
        if why is not None and why.startswith("raised NotImplementedError"):
            said = why.removeprefix("raised NotImplementedError: ")
            own = "" if said in ("", stub_message(name)) else f"\n  (it raised NotImplementedError: {said})"
            text = (f"{FAIL} {name}: not written yet. Replace the `...` and the `raise NotImplementedError` "
                    f"line with your code.{own}\nHint: {ex.hint}")
            return Result(name, False, text, shown)
        if why is not None:
            failing.append((args, why))
    # Generated inputs too, even after a fixed case failed: hypothesis may find a smaller one (a fixed
    # case with n=5 is no help when n=1 fails too). A generated input that hangs after a fixed case
    # failed is not news: the fixed case is reported.
    try:
        args = _search(ex, fn, max_examples, time_limit)
        if args is not None:
            failing.append((args, _mismatch(ex, fn, args, time_limit) or "?"))
    except _TimedOut as stuck:
        if not failing:
            return Result(name, False, _timed_out(ex, stuck.case, time_limit, generated=True), shown)
    if failing:
        args, why = min(failing, key=lambda f: _size(f[0]))
        return Result(name, False, _failure(ex, args, why), shown)
    return Result(name, True, f"{PASS} {name}: right on {_plural(len(ex.cases), 'fixed case')} and "
                              f"{_plural(max_examples, 'generated one')}; it answers as the package does.", shown)


def solution(name: str) -> str:
    """The package code ``name`` is checked against: the reference solution, on request only."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {sorted(EXERCISES)}, got {name!r}")
    where = EXERCISES[name].real
    module, _, qualname = where.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    obj = obj.fget if isinstance(obj, property) else getattr(obj, "fn", obj)  # a property, a @triton.jit
    return f"Solution: the package's own code ({module}.{qualname}):\n\n{inspect.getsource(obj)}"


# ---------------------------------------------------------------- how values are shown


def _fmt(value) -> str:
    """Short, readable values: a model by the fields that matter, a tensor by shape and values."""
    if isinstance(value, kv_math.ModelSpec):
        return (f"ModelSpec(num_layers={value.num_layers}, num_heads={value.num_heads}, "
                f"num_kv_heads={value.num_kv_heads}, head_dim={value.head_dim}, num_params={value.num_params:_})")
    if hasattr(value, "shape") and hasattr(value, "tolist"):
        flat = value.flatten().tolist()
        vals = ", ".join(f"{v:.4g}" for v in flat[:8]) + (", ..." if len(flat) > 8 else "")
        return f"tensor(shape={list(value.shape)}, [{vals}])"
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)


def _close(want, got) -> bool:
    if isinstance(want, float):
        return isinstance(got, (int, float)) and math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12)
    import torch

    got = torch.as_tensor(got)
    return got.shape == want.shape and torch.allclose(got.float(), want.float(), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- the exercises, notebook by notebook
# Each `_expect_*` asks the package for the answer; each `_st_*` builds hypothesis inputs.


def _st_spec():
    from hypothesis import strategies as st

    @st.composite
    def spec(draw):
        kv = draw(st.integers(1, 8))
        return kv_math.ModelSpec(
            name="generated", num_layers=draw(st.integers(1, 40)), num_heads=kv * draw(st.integers(1, 8)),
            num_kv_heads=kv, head_dim=draw(st.sampled_from([16, 64, 80, 128])), hidden_size=64, vocab_size=100,
            num_params=draw(st.integers(1, 10**10)))
    return spec()


_DTYPES = sorted(kv_math.DTYPE_BYTES)


def _st_kv_bytes():
    from hypothesis import strategies as st

    return st.tuples(_st_spec(), st.sampled_from(_DTYPES))


def _st_max_batch():
    from hypothesis import strategies as st

    return st.tuples(_st_spec(), st.integers(1, 200 * 2**30), st.integers(1, 32_768), st.sampled_from(_DTYPES))


def _expect_max_batch(spec, gpu_memory_bytes, seq_len, dtype):
    return kv_math.plan_capacity(spec, gpu_memory_bytes, seq_len, dtype).max_seqs


# 02: a contiguous allocator after a trace of reservations and frees


def _contiguous(num_slots, reserves, frees):
    """The real ContiguousAllocator after reserving ``reserves`` (tokens, size) in turn, then freeing
    the ones whose index is in ``frees``. Reservations that do not fit are skipped."""
    from paged_lab.memory.contiguous import ContiguousAllocator

    alloc = ContiguousAllocator(num_slots, num_slots)
    for i, (tokens, size) in enumerate(reserves):
        if size <= num_slots and alloc.can_allocate(tokens, reserve=size):
            alloc.allocate(i, [0] * tokens, reserve=size)
    for i in frees:
        if i in alloc:
            alloc.free(i)
    return alloc


def _st_trace():
    from hypothesis import strategies as st

    @st.composite
    def trace(draw):
        num_slots = draw(st.integers(1, 40))
        sizes = draw(st.lists(st.integers(1, 12), max_size=6))
        reserves = [(draw(st.integers(1, s)), s) for s in sizes]
        frees = draw(st.sets(st.integers(0, max(len(sizes) - 1, 0)), max_size=3))
        return _contiguous(num_slots, reserves, sorted(frees))
    return trace()


def _reservations(alloc):
    return [(start, alloc.reservation(sid)) for sid, start, _ in alloc.regions()]


def _st_first_fit():
    from hypothesis import strategies as st

    return st.builds(lambda a, size: (_reservations(a), a.num_slots, size), _st_trace(), st.integers(1, 12))


def _expect_first_fit(reservations, num_slots, size):
    from paged_lab.memory.contiguous import ContiguousAllocator

    # the same state, built the way the allocator builds it: in address order, a filler reservation for
    # each gap and then the reservation itself (first fit puts each right after the last), then the
    # fillers freed
    alloc, pos, fillers = ContiguousAllocator(num_slots, num_slots), 0, []
    for i, (start, reserved) in enumerate(sorted(reservations)):
        if start > pos:
            fillers.append(("gap", i))
            alloc.allocate(fillers[-1], [0], reserve=start - pos)
        alloc.allocate(i, [0], reserve=reserved)
        pos = start + reserved
    for filler in fillers:
        alloc.free(filler)
    assert _reservations(alloc) == sorted(reservations)
    return alloc.first_fit(size)


def _st_utilization():
    from hypothesis import strategies as st

    return st.builds(lambda a: ([(a.num_tokens(sid), a.reservation(sid)) for sid in a.seq_ids],), _st_trace())


def _expect_utilization(regions):
    alloc = _contiguous(sum(size for _, size in regions) or 1, regions, [])
    return alloc.utilization


# 03: block tables


def _st_blocks_needed():
    from hypothesis import strategies as st

    return st.tuples(st.integers(0, 200), st.integers(1, 32))


def _expect_blocks_needed(n_tokens, block_size):
    return _bm.BlockManager(1, block_size).blocks_for(n_tokens)


def _st_slot_for():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size = draw(st.integers(1, 8))
        table = draw(st.lists(st.integers(0, 20), min_size=1, max_size=5, unique=True))
        return draw(st.integers(0, len(table) * block_size - 1)), table, block_size
    return args()


def _pool_after(num_blocks, block_size, n_tokens, churn):
    """A real BlockManager holding sequence "s" of ``n_tokens``, after ``churn`` other sequences came
    and went (so the free queue is not in id order)."""
    bm = _bm.BlockManager(num_blocks, block_size)
    for i, n in enumerate(churn):
        if bm.can_allocate(n):
            bm.allocate(("churn", i), [0] * n)
    for i in [*range(0, len(churn), 2), *range(1, len(churn), 2)]:  # evens first: a shuffled free queue
        if ("churn", i) in bm:
            bm.free(("churn", i))
    bm.allocate("s", [0] * n_tokens)
    return bm


def _st_append():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size = draw(st.integers(1, 4))
        num_blocks = draw(st.integers(2, 8))
        n = draw(st.integers(1, (num_blocks - 1) * block_size))
        churn = draw(st.lists(st.integers(1, 2 * block_size), max_size=3))
        bm = _pool_after(num_blocks, block_size, n, churn)
        return bm.block_table("s"), n, list(bm.pool.free_queue), block_size
    return args()


def _expect_append(block_table, num_tokens, free_blocks, block_size):
    bm = _bm.BlockManager(len(block_table) + len(free_blocks), block_size)
    bm.allocate("s", [0] * num_tokens)  # a fresh pool: rename its blocks to the ones given
    rename = dict(zip(bm.block_table("s") + list(bm.pool.free_queue), list(block_table) + list(free_blocks)))
    bm.append_token("s", 0)
    return [rename[b] for b in bm.block_table("s")]


# 04: prefix caching and copy-on-write


def _st_tokens(max_size=14):
    from hypothesis import strategies as st

    return st.lists(st.integers(0, 3), min_size=1, max_size=max_size)


def _st_block_hashes():
    from hypothesis import strategies as st

    return st.tuples(_st_tokens(), st.integers(1, 5))


def _st_cached_prefix():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        tokens, block_size = draw(_st_tokens()), draw(st.integers(1, 4))
        hashes = prefix_cache.block_hashes(tokens, block_size)
        kept = draw(st.lists(st.booleans(), min_size=len(hashes), max_size=len(hashes)))
        cached = {h: 10 + i for i, (h, keep) in enumerate(zip(hashes, kept)) if keep}
        return cached, tokens, block_size
    return args()


def _expect_cached_prefix(cached, token_ids, block_size):
    return prefix_cache.find_cached_prefix(cached, token_ids, block_size)[0]


def _st_append_action():
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 20), st.integers(1, 4), st.integers(1, 3))


def _expect_append_action(num_tokens, block_size, refcount):
    """Ask a real BlockManager: a sequence of ``num_tokens`` whose last block ``refcount`` tables hold."""
    bm = _bm.BlockManager(2 * (num_tokens + 1), block_size)
    bm.allocate(0, [0] * num_tokens)
    for child in range(1, refcount):
        bm.fork(0, child)
    before = bm.block_table(0)
    cow = bm.append_token(0, 0)
    if cow is not None:
        return "copy"
    return "new block" if len(bm.block_table(0)) > len(before) else "write in place"


# 05: continuous batching


def _st_admit():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size, num_blocks = draw(st.integers(1, 4)), draw(st.integers(1, 8))
        lens = draw(st.lists(st.integers(1, num_blocks * block_size), min_size=1, max_size=5))
        return lens, num_blocks, draw(st.integers(1, 4)), block_size
    return args()


def _expect_admit(prompt_lens, num_free_blocks, max_num_seqs, block_size):
    from paged_lab.sched import Scheduler, Sequence

    sched = Scheduler(_bm.BlockManager(num_free_blocks, block_size), max_num_seqs)
    for i, n in enumerate(prompt_lens):
        sched.add_request(Sequence(i, [0] * n, max_tokens=1))
    return [s.seq.seq_id for s in sched.schedule().scheduled]


def _st_preempt():
    from hypothesis import strategies as st

    return st.tuples(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(0, 2), st.integers(1, 4))


def _expect_preempt(running, free_blocks, block_size):
    """A real Scheduler whose running sequences hold ``running`` tokens each and just sampled one more."""
    from paged_lab.sched import Scheduler, Sequence, SequenceStatus

    used = sum(cdiv(n, block_size) for n in running)
    sched = Scheduler(_bm.BlockManager(used + free_blocks, block_size), max_num_seqs=len(running))
    for i, n in enumerate(running):
        seq = Sequence(i, [0] * n, max_tokens=10**6)
        sched.allocator.allocate(i, seq.token_ids)
        seq.num_computed_tokens = seq.num_prefill_tokens = n
        seq.status = SequenceStatus.RUNNING
        seq.append_token(0)  # the token sampled last step: it needs a slot now
        sched.running.append(seq)
    return [s.seq_id for s in sched.schedule().preempted]


# 06: attention through a block table


def _tensor_case(seed, block_size, num_kv_heads, group, head_dim, ctx_blocks, context_len):
    import torch

    g = torch.Generator().manual_seed(seed)
    num_blocks = ctx_blocks + 3
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=g)
    table = torch.randperm(num_blocks, generator=g)[:ctx_blocks].to(torch.int32)
    q = torch.randn(num_kv_heads * group, head_dim, generator=g)
    return q, k_cache, v_cache, table, context_len, head_dim ** -0.5


def _st_decode():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size, ctx_blocks = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        context_len = draw(st.integers(1, block_size * ctx_blocks))
        return _tensor_case(draw(st.integers(0, 2**16)), block_size, draw(st.integers(1, 2)),
                            draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), ctx_blocks, context_len)
    return args()


def _expect_decode(q, k_cache, v_cache, block_table, context_len, scale):
    import torch

    from paged_lab.kernels import reference

    return reference.paged_attention_decode(q[None], k_cache, v_cache, block_table[None],
                                            torch.tensor([context_len]), scale)[0]


def _st_scores():
    from hypothesis import strategies as st

    @st.composite
    def args(draw):
        block_size, ctx_blocks = draw(st.sampled_from([2, 4])), draw(st.integers(1, 3))
        q, k_cache, _, table, ctx, _ = _tensor_case(
            draw(st.integers(0, 2**16)), block_size, 1, 1, draw(st.sampled_from([2, 4])), ctx_blocks,
            draw(st.integers(1, block_size * ctx_blocks)))
        return q[0], k_cache[:, :, 0], table, ctx
    return args()


def _expect_scores(q, k_cache, block_table, context_len):
    from paged_lab.kernels import reference

    k, _ = reference.gather_kv(k_cache[:, :, None], k_cache[:, :, None], block_table, context_len)
    return k[:, 0] @ q


# 07: the engine's batch


def _scheduled(chunks):
    """Real ScheduledSeq entries (and a BlockManager holding their tables) for ``chunks``:
    (num_tokens, start, end) per sequence, in schedule order."""
    from paged_lab.sched import ScheduledSeq, Sequence

    bm = _bm.BlockManager(64, 2)
    out = []
    for i, (n, start, end) in enumerate(chunks):
        bm.allocate(("filler", i), [0])  # leaves a gap: tables are not consecutive
        bm.allocate(i, [0] * n)
        out.append(ScheduledSeq(Sequence(i, [0] * n, max_tokens=1), start, end, end - start > 1))
    return bm, out


def _st_chunks():
    from hypothesis import strategies as st

    @st.composite
    def chunk(draw):
        n = draw(st.integers(1, 9))
        start = draw(st.integers(0, n - 1))
        end = n if draw(st.booleans()) else draw(st.integers(start + 1, n))
        return n, start, end

    @st.composite
    def args(draw):
        bm, scheduled = _scheduled(draw(st.lists(chunk(), min_size=1, max_size=4)))
        return [(bm.block_table(s.seq.seq_id), s.start, s.end) for s in scheduled], 2
    return args()


def _as_scheduled(chunks, block_size):
    """Rebuild real ScheduledSeq entries and a BlockManager whose tables are ``chunks``' tables."""
    from paged_lab.sched import ScheduledSeq, Sequence

    bm = _bm.BlockManager(1 + max(max(t) for t, _, _ in chunks), block_size)
    out = []
    for i, (table, start, end) in enumerate(chunks):
        # the given table, as the engine sees it
        bm._seqs[i] = _bm.SequenceBlocks(list(table), [0] * end, [], None, 0)
        out.append(ScheduledSeq(Sequence(i, [0] * end, max_tokens=1), start, end, end - start > 1))
    return bm, out


def _expect_slots(chunks, block_size):
    from paged_lab.engine.engine import decodes_first

    bm, scheduled = _as_scheduled(chunks, block_size)
    return [slot for s in decodes_first(scheduled) for slot in bm.slot_mapping(s.seq.seq_id, s.start, s.end)]


def _expect_qsl(chunks, block_size):
    from itertools import accumulate

    from paged_lab.engine.engine import decodes_first

    _, scheduled = _as_scheduled(chunks, block_size)
    return [0, *accumulate(s.num_tokens for s in decodes_first(scheduled))]


def _cases_06():
    return (_tensor_case(0, 2, 1, 1, 2, 2, 3), _tensor_case(1, 4, 2, 2, 4, 3, 9))


def _cases_scores():
    q, k_cache, _, table, ctx, _ = _tensor_case(0, 2, 1, 1, 4, 2, 3)
    return ((q[0], k_cache[:, :, 0], table, ctx),)


def _first_spec():
    return kv_math.get_spec(kv_math.list_specs()[0])


def _exercises() -> dict[str, Exercise]:
    spec = _first_spec()
    ex = [
        Exercise("kv_bytes_per_token", ("spec", "dtype"), kv_math.kv_bytes_per_token,
                 ((spec, "bfloat16"), (spec, "float32")), _st_kv_bytes,
                 "every layer stores a K and a V vector per KV head (not per query head), each head_dim "
                 "numbers of BYTES[dtype] bytes.", "paged_lab.kv_math:ModelSpec.kv_bytes_per_token", fmt=_fmt),
        Exercise("max_batch", ("spec", "gpu_memory_bytes", "seq_len", "dtype"), _expect_max_batch,
                 ((spec, 24 * 10**9, 2048, "bfloat16"), (spec, 10**6, 100, "float32")), _st_max_batch,
                 "the weights (num_params x bytes) come off first; when they do not fit the answer is 0. "
                 "Round down twice: whole tokens, then whole sequences.", "paged_lab.kv_math:plan_capacity", fmt=_fmt),
        Exercise("first_fit", ("reservations", "num_slots", "size"), _expect_first_fit,
                 (([], 10, 4), ([(0, 4), (6, 4)], 10, 2), ([(0, 4), (6, 4)], 10, 3)), _st_first_fit,
                 "walk the reservations in address order; the gap before each one, and the gap after the "
                 "last, are the holes. Return the start of the first hole of at least `size` slots, else None.",
                 "paged_lab.memory.contiguous:ContiguousAllocator.first_fit"),
        Exercise("utilization", ("regions",), _expect_utilization,
                 (([(3, 8), (8, 8)],), ([],)), _st_utilization,
                 "slots holding a token over slots reserved, summed over all reservations (not averaged); "
                 "nothing reserved counts as 0.0.", "paged_lab.memory.contiguous:ContiguousAllocator.utilization", same=_close, fmt=_fmt),
        Exercise("blocks_needed", ("n_tokens", "block_size"), _expect_blocks_needed,
                 ((0, 4), (4, 4), (5, 4)), _st_blocks_needed,
                 "round up: a block that holds one token is still a whole block. 0 tokens need 0 blocks.",
                 "paged_lab.memory.block_manager:BlockManager.blocks_for"),
        Exercise("slot_for", ("pos", "block_table", "block_size"), _bm.slot_for,
                 ((0, [7], 4), (5, [7, 2], 4)), _st_slot_for,
                 "which entry of the table holds position pos (pos // block_size), and which row inside "
                 "that block (pos % block_size)? The table gives the physical block.", "paged_lab.memory.block_manager:slot_for"),
        Exercise("append_token", ("block_table", "num_tokens", "free_blocks", "block_size"), _expect_append,
                 (([3], 2, [0, 1], 4), ([3], 4, [0, 1], 4)), _st_append,
                 "only a token that finds the last block full takes a new block: the first one of "
                 "free_blocks (the oldest free). Otherwise the table does not change.",
                 "paged_lab.memory.block_manager:BlockManager.append_token"),
        Exercise("block_hashes", ("token_ids", "block_size"), prefix_cache.block_hashes,
                 (([1, 2, 3, 4, 5], 2), ([1], 2)), _st_block_hashes,
                 "hash only full blocks, and pass each block's hash as the parent of the next "
                 "(None for the first): hash_block(parent, tokens_of_this_block).", "paged_lab.memory.prefix_cache:block_hashes"),
        Exercise("cached_prefix", ("cached", "token_ids", "block_size"), _expect_cached_prefix,
                 (({}, [1, 2], 2),), _st_cached_prefix,
                 "stop at the first block whose hash is not cached, and never reuse the block that holds "
                 "the last prompt token: at most (len(token_ids) - 1) // block_size blocks.",
                 "paged_lab.memory.prefix_cache:find_cached_prefix"),
        Exercise("append_action", ("num_tokens", "block_size", "refcount"), _expect_append_action,
                 ((4, 4, 1), (3, 4, 1), (3, 4, 2)), _st_append_action,
                 "a full last block means a new block, shared or not; a partly filled block that another "
                 "table also holds (refcount > 1) must be copied before it is written.",
                 "paged_lab.memory.block_manager:BlockManager.append_token"),
        Exercise("admit", ("prompt_lens", "num_free_blocks", "max_num_seqs", "block_size"), _expect_admit,
                 (([4, 4], 2, 4, 4), ([4, 8, 1], 2, 4, 4)), _st_admit,
                 "first come, first served: when the head of the queue does not fit, nobody behind it "
                 "overtakes; stop also when max_num_seqs windows are taken.", "paged_lab.sched.scheduler:Scheduler._admit"),
        Exercise("preempt", ("running", "free_blocks", "block_size"), _expect_preempt,
                 (([4, 4], 0, 4), ([3, 4], 0, 4)), _st_preempt,
                 "go oldest first; a sequence whose last block is full needs one block. While none is free, "
                 "preempt the NEWEST running sequence (its blocks come back), possibly the one asking.",
                 "paged_lab.sched.scheduler:Scheduler._reserve_slots"),
        Exercise("decode_attention", ("q", "k_cache", "v_cache", "block_table", "context_len", "scale"),
                 _expect_decode, _cases_06(), _st_decode,
                 "gather the first context_len rows through the table (k_cache[block_table[:n]]), repeat "
                 "each KV head for its group of query heads, then softmax(q k^T x scale) v.",
                 "paged_lab.kernels.reference:paged_attention_decode", same=_close, fmt=_fmt),
        Exercise("decode_scores", ("q", "k_cache", "block_table", "context_len"), _expect_scores,
                 _cases_scores(), _st_scores,
                 "one loop iteration per block of the table: load the block id, then a [BLOCK_SIZE, HEAD_DIM] "
                 "tile; mask rows at or past context_len when you load AND when you store.",
                 "paged_lab.kernels.triton_paged:_load_kv_tile", same=_close, fmt=_fmt),
        Exercise("batch_slots", ("chunks", "block_size"), _expect_slots,
                 (([([5, 9], 0, 3), ([4], 1, 2)], 2),), _st_chunks,
                 "the same decodes-first order as query_start_loc; a chunk's slots are those of positions "
                 "start..end-1, each through that chunk's own block table (slot_for of notebook 03).", "paged_lab.engine.engine:LLM.prepare_batch"),
        Exercise("query_start_loc", ("chunks", "block_size"), _expect_qsl,
                 (([([5, 9], 0, 3), ([4], 1, 2)], 2),), _st_chunks,
                 "decodes (one-token chunks) first, then the rest, each group in the given order (sorted() "
                 "with a key keeps it); start at 0 and add each chunk's end - start.",
                 "paged_lab.engine.engine:LLM.prepare_batch"),
    ]
    return {e.name: e for e in ex}


EXERCISES = _exercises()
