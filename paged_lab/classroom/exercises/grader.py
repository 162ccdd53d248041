"""The grader: ``check(fn)`` runs a learner's function against the package's own answers.

It runs the exercise's fixed cases, then inputs that hypothesis generates, shrunk to the smallest one
that fails; each call is stopped after ``time_limit`` seconds; the answer's types are checked before
its values; the feedback (``Result``) is a sentence, never a traceback, shown in the learner's
language. The exercises themselves are the notebooks' modules' (``nb01.py`` ...), found by name in
``registry.EXERCISES``. See the package docstring for what a learner sees.
"""

from __future__ import annotations

import copy
import html
import importlib
import inspect
import re
import signal
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from paged_lab.classroom.exercises.exercise import Exercise
from paged_lab.classroom.exercises.registry import EXERCISES
from paged_lab.viz import i18n

CHECK_CLASS = "paged-lab-check"  # the result's HTML box (the browser test reads it)
WRAP = 88  # the plain-text feedback (print(result)) is wrapped at word boundaries to this width
PASS, FAIL = "✓", "✗"
MAX_EXAMPLES = 25  # generated inputs per check: enough to find the usual slips, fast on a laptop CPU
TIME_LIMIT_S = 10.0  # seconds per call of the learner's function; the package's answers take milliseconds


@dataclass(frozen=True)
class Result:
    """What ``check`` found: ``passed``, and a text for the learner (``str(result)``)."""

    exercise: str
    passed: bool
    text: str
    solution: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:  # print(result): the feedback in the learner's language, as plain text
        solution = f"\n\n{_shown_solution(self.solution)}" if self.solution else ""
        return _wrapped(_plain(_shown(self.text))) + solution

    def _repr_html_(self) -> str:
        color = "#2ca02c" if self.passed else "#d62728"
        head, _, rest = _shown(self.text).partition("\n")
        # pre-wrap keeps the lines; word-break:normal undoes JupyterLab's break-all (which cut words in two)
        body = (f"<pre style='white-space:pre-wrap;word-break:normal;overflow-wrap:break-word;margin:4px 0'>"
                f"{_code_html(rest)}</pre>" if rest else "")
        sol = ""
        if self.solution:
            sol = (f"<details open><summary>{i18n.t('Solution')}</summary>"
                   f"<pre>{html.escape(_shown_solution(self.solution))}</pre></details>")
        return (f'<div class="{CHECK_CLASS}" data-passed="{str(self.passed).lower()}" '
                f'style="border-left:4px solid {color};padding:4px 8px">'
                f'<b style="color:{color}">{_code_html(head)}</b>{body}{sol}</div>')

    def __repr__(self) -> str:
        return f"Result({self.exercise!r}, passed={self.passed})"

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text/plain: the feedback itself
        solution = f"\n\n{_shown_solution(self.solution)}" if self.solution else ""
        p.text(_wrapped(_plain(_shown(self.text))) + solution)


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
        deeper = indent + ("    " if indent else "  ")
        out.append(textwrap.fill(body, width, initial_indent=indent, subsequent_indent=deeper,
                                 break_long_words=False, break_on_hyphens=False) if body else line)
    return "\n".join(out)


def _shown(text: str) -> str:
    """The feedback in the learner's language (``paged_lab.viz.i18n``), line by line; the Result itself
    stays English, so a notebook's ``assert result, result.text`` reads the same in every edition."""
    return text if i18n.lang() == "en" else i18n.lines(text, record=False)


_CODE = re.compile(r"`([^`\n]+)`")  # the feedback marks code as markdown does: `raise NotImplementedError`


def _plain(text: str) -> str:
    """Plain text shows code without the markdown backticks."""
    return _CODE.sub(r"\1", text)


def _code_html(text: str) -> str:
    """HTML shows code in <code>, never the raw backticks."""
    return _CODE.sub(r"<code>\1</code>", html.escape(text))


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
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not seconds or not hasattr(signal, "setitimer") or not in_main_thread:
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
    when it has not returned after ``time_limit`` seconds. ``fn`` gets ``args`` as they are: the caller
    passes its own copy."""
    try:
        with _time_limit(time_limit):
            return True, fn(*args)
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
    """A deep copy of the arguments (lists inside lists, dicts, tensors): what the learner's function
    gets, so that nothing it does reaches the exercise's cases or the package's answer."""
    return copy.deepcopy(args)


def _same_input(before, after) -> bool:
    """Whether an argument is as it was: tensors by shape, dtype and values; containers element by
    element; anything else by ==."""
    if hasattr(before, "shape") and hasattr(before, "tolist"):
        return (type(after) is type(before) and before.shape == after.shape and before.dtype == after.dtype
                and before.tolist() == after.tolist())
    if isinstance(before, (list, tuple)):
        return (type(after) is type(before) and len(before) == len(after)
                and all(_same_input(b, a) for b, a in zip(before, after)))
    if isinstance(before, dict):
        return (type(after) is type(before) and before.keys() == after.keys()
                and all(_same_input(before[k], after[k]) for k in before))
    try:
        return bool(before == after)
    except Exception:  # an object whose == fails: not one the exercises pass
        return False


_CHANGED = "changed its argument "  # how _mismatch says that the learner's function mutated an input


def _mismatch(ex: Exercise, fn: Callable, args: tuple, time_limit: float | None = None) -> str | None:
    """Why ``fn`` fails on ``args`` (a message), or None when its answer is right (_TimedOut: see _run).
    The package's answer is computed first, on a copy of its own; ``fn`` gets another copy, which is
    compared with ``args`` afterwards: a function that changes its inputs fails."""
    want = ex.expected(*_copy(args))
    theirs = _copy(args)
    ok, got = _run(fn, theirs, time_limit)
    if not ok:
        return f"raised {type(got).__name__}: {got}"
    for param, before, after in zip(ex.params, args, theirs):
        if not _same_input(before, after):
            return f"{_CHANGED}{param}: {ex.fmt(before)} became {ex.fmt(after)}"
    return _compare(ex, want, got)


def _compare(ex: Exercise, want, got) -> str | None:
    """Types first, then values: once ``got`` has the answer's types all the way down, ``==`` runs the
    built-in types' own comparison, never a method the learner wrote."""
    different = _type_difference(want, got)
    if different is not None:
        where, got_type, want_type = different
        if not where:
            return f"returned {ex.fmt(got)} (type {got_type}, but the answer is of type {want_type})"
        return (f"returned {ex.fmt(got)} (yours{where} is of type {got_type}, "
                f"but the answer's is of type {want_type})")
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
    if why.startswith(_CHANGED):
        param, _, change = why.removeprefix(_CHANGED).partition(": ")
        return (f"{FAIL} {ex.name}: not yet. It changes its argument {param}, and a caller still needs "
                f"what it passed. On the smallest input where it does:\n"
                f"  {_call(ex, args)}\n"
                f"  {param}: {change}\n"
                f"Leave the arguments as they were: build a new value (a list: list(x) or x + [...]) and "
                f"return that.\n"
                f"Hint: {ex.hint}")
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
        values = (getattr(value, f.name) for f in fields(value))
        return sum(_size(v) for v in values if not isinstance(v, str))
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
        raise ValueError("time_limit must be a number of seconds above 0, or None for no limit; "
                         f"got {time_limit!r}")
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
    text = (f"{PASS} {name}: right on {_plural(len(ex.cases), 'fixed case')} and "
            f"{_plural(max_examples, 'generated one')}; it answers as the package does.")
    return Result(name, True, text, shown)


def solution(name: str) -> str:
    """The package code that does what exercise ``name`` asks: the reference solution, on request only."""
    if name not in EXERCISES:
        raise ValueError(f"name must be one of {sorted(EXERCISES)}, got {name!r}")
    where = EXERCISES[name].real
    module, _, qualname = where.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    obj = obj.fget if isinstance(obj, property) else getattr(obj, "fn", obj)  # a property, a @triton.jit
    return f"Solution: the package's own code ({module}.{qualname}):\n\n{inspect.getsource(obj)}"
