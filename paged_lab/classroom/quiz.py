"""Quizzes a learner answers in the notebook, with answers the package computes.

The questions of a series notebook live in the package, one module per notebook
(``paged_lab/classroom/quizzes/nb01.py`` ... ``nb07.py``), out of the reading path: the notebook's quiz cell
passes in what the notebook computed and shows the quiz, so a learner never sees an answer before
picking one:

    from paged_lab.classroom.quizzes import nb02
    quiz = nb02.quiz(old_in=old_in, empty=empty, ...)   # the notebook's own numbers
    quiz                                                 # the last line of the cell shows it

A ``Question`` is a multiple choice in which every ``Choice`` carries its own explanation, ``why``: for
the right choice why it is right, for a wrong one the misconception behind it. Whichever choice a
learner picks, the notebook tells them why; after a wrong pick they can try another:

    Question(f"Why must F wait while {empty} lockers are empty?",
             [Choice(f"F's {bags} pieces need more lockers than are empty", f"{empty} are empty: ..."),
              Choice(f"Every locker is reserved: {n} × {r} = {n * r}", "The old manager reserves ...")],
             answer=1)

The choices keep the order they are written in (fixed, so nbval and screenshots are deterministic);
``tests/test_quizzes.py`` holds the whole series to rules that keep that order from giving the answer
away (no position holds more than 40% of the right answers, the right choice is seldom the longest).

A ``NumberQuestion`` asks for a number the learner computes, typed into a small box. Its answer is the
package's own value, computed when the quiz is built, and ``source`` names the package code that
computed it; a wrong number is told whether it is too low or too high, with a hint (or, for a number
in ``mistakes``, the misconception that produces it):

    plan = plan_capacity(spec, 80 * GB, 4096, dtype="fp8")
    NumberQuestion("How many 4,096-token requests fit?", answer=plan.max_seqs, source=plan_capacity,
                   explanation="...", too_low="...", too_high="...", mistakes={bf16_seqs: "That is ..."})

A collapsed check cell under the quiz asserts that the quiz's answers are the notebook's own numbers,
so nbval fails when the workload changes and the text does not:

    assert quiz[0].answer == fp8.max_seqs and quiz[1].answer_text == f"{old_in} × {RESERVE} = ..."

In Jupyter a multiple choice is a row of buttons and a number question a box with a Check button; each
has a feedback line under it. Where widgets do not run (the static HTML site, a notebook viewer) the
same object renders as text: every question, its choices, and the answer with every explanation
folded inside a ``<details>`` block.

Mechanisms where the PagedAttention paper (vLLM V0) and today's vLLM (V1) differ are labelled with
``design="V0"`` or ``design="V1"`` (``"V0+V1"``: the same in both), shown above the question.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real

from paged_lab.viz import i18n

# The design a question is about, and how it is labelled (docs/architecture.md: say which).
DESIGNS = {
    "V0": "vLLM V0 — the PagedAttention paper's design",
    "V1": "vLLM V1 — what vLLM does today",
    "V0+V1": "vLLM V0 and V1 alike",
}
LETTERS = "abcdefgh"
MAX_CHOICES = len(LETTERS)

QUIZ_CLASS = "paged-lab-quiz"  # the widget box (the browser test finds quizzes by it)
CHOICE_CLASS = "paged-lab-quiz-choice"  # one multiple-choice question: its prompt, buttons and feedback
NUMBER_CLASS = "paged-lab-quiz-number"  # one number question: its prompt, box, Check button and feedback
FEEDBACK_CLASS = "paged-lab-quiz-feedback"  # one per question: the answer to the last pick
STATIC_CLASS = "paged-lab-quiz-static"  # the text rendering (the static site shows it)
RIGHT, WRONG = "✓ Right", "✗ Not quite"
COLON = ": "  # between the verdict and its sentence (zh-TW: a full-width "：")
TOO_LOW, TOO_HIGH, NOT_A_NUMBER = "✗ Too low", "✗ Too high", "✗ Not a number"
# The feedback sentences around a question's own texts (templates: paged_lab.viz.i18n translates them).
TRY_ANOTHER = "({}) {} Try another choice."
LESS_THAN = "{} is less than the answer. {} Try again."
MORE_THAN = "{} is more than the answer. {} Try again."
NOT_NUMBER = "“{}” is not a number. Type digits, such as 42 or 1,024."
EMPTY_BOX = "Type a number in the box first."


def _identity(text: str) -> str:
    return text


def _text(name: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Feedback:
    correct: bool
    text: str  # plain text: what the learner reads under the question


@dataclass(frozen=True)
class Choice:
    """One choice of a Question: its ``text`` and ``why`` a learner who picks it is right or wrong."""

    text: str
    why: str

    def __post_init__(self):
        _text("a choice's text", self.text)
        _text(f"the why of choice {self.text!r}", self.why)


def _as_choice(i: int, c) -> Choice:
    if isinstance(c, Choice):
        return c
    if isinstance(c, tuple) and len(c) == 2:
        try:
            return Choice(*c)
        except ValueError as e:
            raise ValueError(f"choices[{i}]: {e}") from None
    raise TypeError(f"choices[{i}] must be a Choice(text, why) or a (text, why) pair, got {c!r}")


@dataclass(frozen=True, init=False)
class Question:
    """A multiple choice: ``choices`` (2–8 ``Choice``, each with its why), the index of the right one."""

    prompt: str
    choices: tuple[Choice, ...]
    answer: int
    design: str | None = None

    def __init__(self, prompt: str, choices: Sequence[Choice | tuple[str, str]], answer: int,
                 design: str | None = None):
        _text("prompt", prompt)
        if isinstance(choices, str) or not isinstance(choices, Sequence):
            raise TypeError(f"choices must be a list of Choice(text, why), got {type(choices).__name__}")
        choices = tuple(_as_choice(i, c) for i, c in enumerate(choices))
        if not 2 <= len(choices) <= MAX_CHOICES:
            raise ValueError(f"choices must hold 2 to {MAX_CHOICES} answers, got {len(choices)}")
        texts = [c.text for c in choices]
        if len(set(texts)) != len(texts):
            raise ValueError(f"choices must be distinct (a learner could not tell them apart): {texts}")
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
            raise ValueError(f"answer must be the index of the right choice, 0 to {len(choices) - 1}, "
                             f"got {answer!r}")
        if design is not None and design not in DESIGNS:
            raise ValueError(f"design must be one of {sorted(DESIGNS)} or None, got {design!r}")
        for name, value in (("prompt", prompt), ("choices", choices), ("answer", answer), ("design", design)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_t", _identity)

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(c.text for c in self.choices)

    @property
    def answer_text(self) -> str:
        """The right choice's text: what a check cell compares with the computation."""
        return self.choices[self.answer].text

    @property
    def explanation(self) -> str:
        """Why the right choice is right."""
        return self.choices[self.answer].why

    def pick(self, choice: int) -> Feedback:
        """What the learner is told after picking ``choice`` (an index into ``choices``)."""
        if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < len(self.choices):
            raise ValueError(f"choice must be an index 0 to {len(self.choices) - 1}, got {choice!r}")
        t, picked = self._t, self.choices[choice]
        if choice == self.answer:
            return Feedback(True, f"{t(RIGHT)}{t(COLON)}{picked.text}{t('. ')}{picked.why}")
        return Feedback(False, f"{t(WRONG)}{t(COLON)}{t(TRY_ANOTHER).format(LETTERS[choice], picked.why)}")

    def translated(self, t: Callable[[str], str]) -> Question:
        """A copy with every text, and the feedback around them, passed through ``t`` (paged_lab.viz.i18n)."""
        choices = [Choice(t(c.text), t(c.why)) for c in self.choices]
        q = Question(t(self.prompt), choices, self.answer, self.design)
        object.__setattr__(q, "_t", t)
        return q


def _number_text(value: Real) -> str:
    """42 -> "42", 1234 -> "1,234", 0.5 -> "0.5": how an answer is shown."""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.6g}"


_FULL_WIDTH = str.maketrans("０１２３４５６７８９，．－＋", "0123456789,.-+")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")  # 1,024 and 12,345.5 (not 2,38)


def parse_number(text: str) -> float | None:
    """The number a learner typed, or None. Digit groups may be separated by commas ("1,024"), spaces or
    underscores; full-width digits are fine."""
    if not isinstance(text, str):
        return None
    cleaned = re.sub(r"[\s_\u00a0\u2009\u202f]", "", text.translate(_FULL_WIDTH))
    if "," in cleaned:
        if not _GROUPED.match(cleaned):
            return None
        cleaned = cleaned.replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True, init=False)
class NumberQuestion:
    """A question whose answer is a number the learner computes and types in.

    ``answer`` is the package's own value, computed when the quiz is built, and ``source`` the paged_lab
    function or class that computed it. ``too_low``/``too_high``: the hint a wrong number below or above
    the answer gets; ``mistakes``: numbers a known misconception produces, each with its own why.
    ``tolerance``: how far from the answer a number may be and still count as right.
    """

    prompt: str
    answer: Real
    source: str
    explanation: str
    too_low: str
    too_high: str
    mistakes: tuple[tuple[Real, str], ...] = ()
    tolerance: float = 0
    design: str | None = None

    def __init__(self, prompt: str, answer: Real, source: Callable | type, explanation: str, too_low: str,
                 too_high: str, mistakes: Mapping[Real, str] | None = None, tolerance: float = 0,
                 design: str | None = None):
        for name, text in (("prompt", prompt), ("explanation", explanation), ("too_low", too_low),
                           ("too_high", too_high)):
            _text(name, text)
        if isinstance(answer, bool) or not isinstance(answer, Real) or not math.isfinite(answer):
            raise ValueError(f"answer must be a finite number, got {answer!r}")
        named = getattr(source, "__module__", None) and hasattr(source, "__qualname__")
        if not callable(source) or not named:
            raise TypeError(f"source must be the function or class that computed the answer, got {source!r}")
        if isinstance(tolerance, bool) or not isinstance(tolerance, Real) or not 0 <= tolerance < math.inf:
            raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
        pairs = []
        for value, why in (mistakes or {}).items():
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError(f"mistakes: {value!r} is not a number")
            _text(f"the why of mistake {value!r}", why)
            if abs(value - answer) <= tolerance:
                raise ValueError(f"mistakes: {value!r} is the answer ({answer!r}), not a mistake")
            pairs.append((value, why))
        if design is not None and design not in DESIGNS:
            raise ValueError(f"design must be one of {sorted(DESIGNS)} or None, got {design!r}")
        fields = {"prompt": prompt, "answer": answer, "source": f"{source.__module__}.{source.__qualname__}",
                  "explanation": explanation, "too_low": too_low, "too_high": too_high,
                  "mistakes": tuple(pairs), "tolerance": tolerance, "design": design}
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_t", _identity)

    @property
    def answer_text(self) -> str:
        """The answer as the learner reads it ("1,234")."""
        return _number_text(self.answer)

    def check(self, typed: str) -> Feedback:
        """What the learner is told after typing ``typed`` into the box."""
        t = self._t
        value = parse_number(typed)
        if value is None:
            shown = str(typed).strip()
            why = t(NOT_NUMBER).format(shown) if shown else t(EMPTY_BOX)
            return Feedback(False, f"{t(NOT_A_NUMBER)}{t(COLON)}{why}")
        if abs(value - self.answer) <= self.tolerance:
            return Feedback(True, f"{t(RIGHT)}{t(COLON)}{self.answer_text}{t('. ')}{self.explanation}")
        low = value < self.answer
        hint = next((why for v, why in self.mistakes if abs(v - value) <= max(self.tolerance, 1e-9)),
                    self.too_low if low else self.too_high)
        head, sentence = (TOO_LOW, LESS_THAN) if low else (TOO_HIGH, MORE_THAN)
        return Feedback(False, f"{t(head)}{t(COLON)}{t(sentence).format(_number_text(value), hint)}")

    def translated(self, t: Callable[[str], str]) -> NumberQuestion:
        """A copy with every text, and the feedback around them, passed through ``t`` (paged_lab.viz.i18n)."""
        q = NumberQuestion.__new__(NumberQuestion)
        for name in ("answer", "source", "tolerance", "design"):
            object.__setattr__(q, name, getattr(self, name))
        for name in ("prompt", "explanation", "too_low", "too_high"):
            object.__setattr__(q, name, t(getattr(self, name)))
        object.__setattr__(q, "mistakes", tuple((v, t(why)) for v, why in self.mistakes))
        object.__setattr__(q, "_t", t)
        return q


def distinct_mistakes(answer: Real, pairs: Iterable[tuple[Real, str]]) -> dict[Real, str]:
    """``mistakes`` for a NumberQuestion from computed (number, why) pairs: the first why of each number,
    and none for a number that happens to be the answer (the workload decides which numbers coincide)."""
    out: dict[Real, str] = {}
    for value, why in pairs:
        if value != answer and value not in out:
            out[value] = why
    return out


AnyQuestion = Question | NumberQuestion


class Quiz:
    """A few questions shown together: buttons and boxes in Jupyter, readable text everywhere else."""

    def __init__(self, questions: Iterable[AnyQuestion], title: str = "Quiz"):
        questions = list(questions)
        if not questions:
            raise ValueError("a quiz needs at least one Question")
        for i, q in enumerate(questions):
            if not isinstance(q, (Question, NumberQuestion)):
                raise TypeError(f"questions[{i}] must be a Question or a NumberQuestion, "
                                f"got {type(q).__name__}")
        self.questions, self.title = questions, title
        self._box = None

    def __len__(self) -> int:
        return len(self.questions)

    def __getitem__(self, i: int) -> AnyQuestion:
        return self.questions[i]

    def __iter__(self) -> Iterator[AnyQuestion]:
        return iter(self.questions)

    def translated(self, t: Callable[[str], str]) -> Quiz:
        """A copy in another language: every text through ``t``."""
        return Quiz([q.translated(t) for q in self.questions], title=t(self.title))

    def shown(self) -> Quiz:
        """The quiz as the learner reads it: a copy in their language (``paged_lab.viz.i18n``), or the quiz
        itself in English. Rendering goes through it; the quiz's own texts stay English."""
        return self if i18n.lang() == "en" else self.translated(i18n.t)

    # --- the static rendering: question, choices, answer and every why in <details> -------------
    def to_markdown(self) -> str:
        lines = []
        for n, q in enumerate(self.questions, 1):
            label = f"*[{i18n.t(DESIGNS[q.design])}]* " if q.design else ""
            lines.append(f"{n}. {label}{q.prompt}")
            summary = f"   <details><summary>{i18n.t('Answer')}</summary>\n\n   "
            if isinstance(q, NumberQuestion):
                lines.append(f"   - {q._t('Answer with a number.')}")
                lines.append(f"{summary}**{q.answer_text}{_stop(q)}** {q.explanation}\n   </details>\n")
                continue
            lines += [f"   - ({LETTERS[i]}) {c.text}" for i, c in enumerate(q.choices)]
            others = "".join(f"\n   - ({LETTERS[i]}) {c.why}" for i, c in _others(q))
            lines.append(f"{summary}**({LETTERS[q.answer]}) {q.answer_text}{_stop(q)}** {q.explanation}\n\n"
                         f"   {q._t('The other choices:')}\n{others}\n   </details>\n")
        return "\n".join(lines)

    def to_html(self) -> str:
        esc = html.escape
        items = []
        for q in self.questions:
            answer = f"<details><summary>{esc(i18n.t('Answer'))}</summary>"
            if isinstance(q, NumberQuestion):
                body = f"<p><i>{esc(q._t('Answer with a number.'))}</i></p>"
                answer += f"<p><b>{esc(q.answer_text + _stop(q))}</b> {esc(q.explanation)}</p></details>"
            else:
                body = "<ul style='list-style:none'>" + "".join(
                    f"<li>({LETTERS[i]}) {esc(c.text)}</li>" for i, c in enumerate(q.choices)) + "</ul>"
                others = "".join(f"<li>({LETTERS[i]}) {esc(c.why)}</li>" for i, c in _others(q))
                right = f"({LETTERS[q.answer]}) {q.answer_text}{_stop(q)}"
                answer += (f"<p><b>{esc(right)}</b> {esc(q.explanation)}</p>"
                           f"<p>{esc(q._t('The other choices:'))}</p>"
                           f"<ul style='list-style:none'>{others}</ul></details>")
            items.append(f"<li>{_design_label(q)}<p>{esc(q.prompt)}</p>{body}{answer}</li>")
        return f'<div class="{STATIC_CLASS}"><h3>{esc(self.title)}</h3><ol>{"".join(items)}</ol></div>'

    def __str__(self) -> str:
        shown = self.shown()
        return f"{shown.title}\n\n{shown.to_markdown()}"

    # --- the interactive rendering ---------------------------------------------------------------
    def widget(self):
        """A VBox of questions, each with its feedback line. Built once."""
        if self._box is None:
            import ipywidgets as W

            parts = [W.HTML(f"<h3>{html.escape(self.title)}</h3>")]
            for n, q in enumerate(self.questions, 1):
                make = _number_widget if isinstance(q, NumberQuestion) else _question_widget
                parts.append(make(W, n, q))
            self._box = W.VBox(parts)
            self._box.add_class(QUIZ_CLASS)
        return self._box

    def _repr_mimebundle_(self, include=None, exclude=None):
        # The widget for Jupyter, and beside it the text for whatever cannot run widgets.
        shown = self.shown()
        data = dict(shown.widget()._repr_mimebundle_())
        data.update({"text/plain": str(shown), "text/html": shown.to_html(),
                     "text/markdown": shown.to_markdown()})
        return data


def _stop(q: AnyQuestion) -> str:
    """The full stop after an answer, in the question's language ("." or "。")."""
    return q._t(". ").strip() or "."


def _others(q: Question) -> list[tuple[int, Choice]]:
    """The wrong choices of ``q``, with their indices: the static rendering lists why each is wrong."""
    return [(i, c) for i, c in enumerate(q.choices) if i != q.answer]


def _design_label(q: AnyQuestion) -> str:
    """The line above a question that says which vLLM design it is about (empty when none)."""
    if not q.design:
        return ""
    return f'<div style="font-size:85%;color:#7a5300">{html.escape(i18n.t(DESIGNS[q.design]))}</div>'


def _prompt(W, n: int, q: AnyQuestion):
    return W.HTML(f"{_design_label(q)}<b>{n}.</b> {html.escape(q.prompt)}")


def _show(feedback, fb: Feedback) -> None:
    color = "#2ca02c" if fb.correct else "#d62728"
    colon = i18n.t(COLON)  # the verdict in bold, up to its colon (zh-TW: "✓ 答對了：", full width, no space)
    head, found, rest = fb.text.partition(colon)
    head = f'<span style="color:{color};font-weight:bold">{html.escape(head + found.rstrip())}</span>'
    feedback.value = head + (" " if found.endswith(" ") else "") + html.escape(rest)


def _question_widget(W, n: int, q: Question):
    feedback = W.HTML("")
    feedback.add_class(FEEDBACK_CLASS)
    buttons = []

    def on_pick(button):
        fb = q.pick(buttons.index(button))
        button.button_style = "success" if fb.correct else "danger"
        _show(feedback, fb)

    rows = []
    for i, c in enumerate(q.choices):
        b = W.Button(description=LETTERS[i], layout=W.Layout(width="3em"), tooltip=c.text)
        b.on_click(on_pick)
        buttons.append(b)
        rows.append(W.HBox([b, W.HTML(html.escape(c.text))]))
    box = W.VBox([_prompt(W, n, q), *rows, feedback], layout=W.Layout(margin="0 0 12px 0"))
    box.add_class(CHOICE_CLASS)
    return box


def _number_widget(W, n: int, q: NumberQuestion):
    feedback = W.HTML("")
    feedback.add_class(FEEDBACK_CLASS)
    # continuous_update=False: the value arrives on Enter (or when the box loses focus), not per keystroke
    box_in = W.Text(value="", placeholder=q._t("a number"), continuous_update=False,
                    layout=W.Layout(width="12em"))
    button = W.Button(description=q._t("Check"), layout=W.Layout(width="auto"))

    def on_check(*_):
        fb = q.check(box_in.value)
        box_in.layout.border = f"2px solid {'#2ca02c' if fb.correct else '#d62728'}"
        button.button_style = "success" if fb.correct else ""
        _show(feedback, fb)

    box_in.observe(on_check, names="value")
    button.on_click(on_check)
    box = W.VBox([_prompt(W, n, q), W.HBox([box_in, button]), feedback], layout=W.Layout(margin="0 0 12px 0"))
    box.add_class(NUMBER_CLASS)
    return box
