"""Quizzes a learner answers in the notebook, with answers the notebook computes.

A quiz cell formats numbers the notebook computed into the text, never types them in:

    q = Question(f"{old_running} travellers got in. Why does F wait while {empty} lockers are empty?",
                 choices=[f"All {handed_out} lockers are reserved", f"The luggage needs more than {slots}"],
                 answer=0, explanation=f"{old_running} x {reserve} = {handed_out}: ...")
    Quiz([q, ...])                                   # the last line of the cell shows it

and a check cell below asserts that the marked answer is the computed one, so nbval fails when
the workload changes and the text does not:

    assert quiz[0].answer_text == f"All {handed_out} lockers are reserved" and handed_out == slots

In Jupyter the quiz is a row of buttons per question: a pick says at once whether it is right and,
when it is, shows the explanation (a wrong pick can be followed by another). Where widgets do not run
(the static HTML site, a notebook viewer) the same object renders as text: every question, its
choices, and the answer with its explanation inside a ``<details>`` block.

Mechanisms where the PagedAttention paper (vLLM V0) and today's vLLM (V1) differ are labelled with
``design="V0"`` or ``design="V1"`` (``"V0+V1"``: the same in both), shown above the question.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from paged_lab import i18n

# The design a question is about, and how it is labelled (docs/architecture.md: say which).
DESIGNS = {
    "V0": "vLLM V0 — the PagedAttention paper's design",
    "V1": "vLLM V1 — what vLLM does today",
    "V0+V1": "vLLM V0 and V1 alike",
}
LETTERS = "abcdefgh"
MAX_CHOICES = len(LETTERS)

QUIZ_CLASS = "paged-lab-quiz"  # the widget box (the browser test finds quizzes by it)
FEEDBACK_CLASS = "paged-lab-quiz-feedback"  # one per question: the answer to the last pick
STATIC_CLASS = "paged-lab-quiz-static"  # the text rendering (the static site shows it)
RIGHT, WRONG = "✓ Right", "✗ Not quite"


@dataclass(frozen=True)
class Feedback:
    correct: bool
    text: str  # plain text: what the learner reads under the question


@dataclass(frozen=True, init=False)
class Question:
    """One question: ``choices`` (2–8 distinct texts), the index of the right one, and why."""

    prompt: str
    choices: tuple[str, ...]
    answer: int
    explanation: str
    design: str | None = None

    def __init__(self, prompt: str, choices: Sequence[str], answer: int, explanation: str, design: str | None = None):
        for name, text in (("prompt", prompt), ("explanation", explanation)):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{name} must be a non-empty string, got {text!r}")
        if isinstance(choices, str) or not isinstance(choices, Sequence):
            raise TypeError(f"choices must be a list of strings, got {type(choices).__name__}")
        choices = tuple(choices)
        if not 2 <= len(choices) <= MAX_CHOICES:
            raise ValueError(f"choices must hold 2 to {MAX_CHOICES} answers, got {len(choices)}")
        for i, c in enumerate(choices):
            if not isinstance(c, str) or not c.strip():
                raise ValueError(f"choices[{i}] must be a non-empty string, got {c!r}")
        if len(set(choices)) != len(choices):
            raise ValueError(f"choices must be distinct (a learner could not tell them apart): {list(choices)}")
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
            raise ValueError(f"answer must be the index of the right choice, 0 to {len(choices) - 1}, got {answer!r}")
        if design is not None and design not in DESIGNS:
            raise ValueError(f"design must be one of {sorted(DESIGNS)} or None, got {design!r}")
        for name, value in (("prompt", prompt), ("choices", choices), ("answer", answer),
                            ("explanation", explanation), ("design", design)):
            object.__setattr__(self, name, value)

    @property
    def answer_text(self) -> str:
        """The right choice's text: what a check cell compares with the computation."""
        return self.choices[self.answer]

    def pick(self, choice: int) -> Feedback:
        """What the learner is told after picking ``choice`` (an index into ``choices``)."""
        if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < len(self.choices):
            raise ValueError(f"choice must be an index 0 to {len(self.choices) - 1}, got {choice!r}")
        if choice == self.answer:
            return Feedback(True, f"{RIGHT}: {self.answer_text}. {self.explanation}")
        return Feedback(False, f"{WRONG}: ({LETTERS[choice]}) is not it. Try another choice.")


class Quiz:
    """A few questions shown together: buttons in Jupyter, readable text everywhere else."""

    def __init__(self, questions: Iterable[Question], title: str = "Quiz"):
        questions = list(questions)
        if not questions:
            raise ValueError("a quiz needs at least one Question")
        for i, q in enumerate(questions):
            if not isinstance(q, Question):
                raise TypeError(f"questions[{i}] must be a Question, got {type(q).__name__}")
        self.questions, self.title = questions, title
        self._box = None

    def __len__(self) -> int:
        return len(self.questions)

    def __getitem__(self, i: int) -> Question:
        return self.questions[i]

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    # --- the static rendering: question, choices, answer in <details> ---------------------------
    def to_markdown(self) -> str:
        lines = []
        for n, q in enumerate(self.questions, 1):
            label = f"*[{i18n.t(DESIGNS[q.design])}]* " if q.design else ""
            lines.append(f"{n}. {label}{q.prompt}")
            lines += [f"   - ({LETTERS[i]}) {c}" for i, c in enumerate(q.choices)]
            lines.append(f"   <details><summary>{i18n.t('Answer')}</summary>\n\n   **({LETTERS[q.answer]}) {q.answer_text}.** "
                         f"{q.explanation}\n   </details>\n")
        return "\n".join(lines)

    def to_html(self) -> str:
        items = []
        for q in self.questions:
            label = f'<div style="font-size:85%;color:#7a5300">{html.escape(i18n.t(DESIGNS[q.design]))}</div>' if q.design else ""
            choices = "".join(f"<li>({LETTERS[i]}) {html.escape(c)}</li>" for i, c in enumerate(q.choices))
            items.append(
                f"<li>{label}<p>{html.escape(q.prompt)}</p><ul style='list-style:none'>{choices}</ul>"
                f"<details><summary>{i18n.t('Answer')}</summary><p><b>({LETTERS[q.answer]}) {html.escape(q.answer_text)}.</b> "
                f"{html.escape(q.explanation)}</p></details></li>"
            )
        return f'<div class="{STATIC_CLASS}"><h3>{html.escape(self.title)}</h3><ol>{"".join(items)}</ol></div>'

    def __str__(self) -> str:
        shown = i18n.quiz(self)  # the learner's language (paged_lab.i18n); the quiz itself in English
        return f"{shown.title}\n\n{shown.to_markdown()}"

    # --- the interactive rendering ---------------------------------------------------------------
    def widget(self):
        """A VBox of questions; each has one button per choice and a feedback line. Built once."""
        if self._box is None:
            import ipywidgets as W

            parts = [W.HTML(f"<h3>{html.escape(self.title)}</h3>")]
            for n, q in enumerate(self.questions, 1):
                parts.append(_question_widget(W, n, q))
            self._box = W.VBox(parts)
            self._box.add_class(QUIZ_CLASS)
        return self._box

    def _repr_mimebundle_(self, include=None, exclude=None):
        # The widget for Jupyter, and beside it the text for whatever cannot run widgets.
        shown = i18n.quiz(self)  # the learner's language (paged_lab.i18n); the quiz itself in English
        data = dict(shown.widget()._repr_mimebundle_())
        data.update({"text/plain": str(shown), "text/html": shown.to_html(), "text/markdown": shown.to_markdown()})
        return data


def _question_widget(W, n: int, q: Question):
    label = f'<div style="font-size:85%;color:#7a5300">{html.escape(i18n.t(DESIGNS[q.design]))}</div>' if q.design else ""
    prompt = W.HTML(f"{label}<b>{n}.</b> {html.escape(q.prompt)}")
    feedback = W.HTML("")
    feedback.add_class(FEEDBACK_CLASS)
    buttons = []

    def on_pick(button):
        choice = buttons.index(button)
        fb = q.pick(choice)
        button.button_style = "success" if fb.correct else "danger"
        color = "#2ca02c" if fb.correct else "#d62728"
        head, _, rest = fb.text.partition(": ")
        feedback.value = f'<span style="color:{color};font-weight:bold">{html.escape(head)}:</span> {html.escape(rest)}'

    rows = []
    for i, c in enumerate(q.choices):
        b = W.Button(description=LETTERS[i], layout=W.Layout(width="3em"), tooltip=c)
        b.on_click(on_pick)
        buttons.append(b)
        rows.append(W.HBox([b, W.HTML(html.escape(c))]))
    return W.VBox([prompt, *rows, feedback], layout=W.Layout(margin="0 0 12px 0"))
