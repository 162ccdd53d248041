"""paged_lab.classroom.quiz: every pick is told why, a number box checks what was typed, the text
rendering keeps it all."""

import ipywidgets as W
import pytest

from paged_lab.classroom.quiz import (
    CHOICE_CLASS,
    FEEDBACK_CLASS,
    NOT_A_NUMBER,
    NUMBER_CLASS,
    QUIZ_CLASS,
    RIGHT,
    STATIC_CLASS,
    TOO_HIGH,
    TOO_LOW,
    WRONG,
    Choice,
    NumberQuestion,
    Question,
    Quiz,
    distinct_mistakes,
    parse_number,
)
from paged_lab.kv_math import plan_capacity


def lockers(empty=36, reserved=60):
    return Question(
        f"Why must F wait while {empty} lockers are empty?",
        [Choice("The lockers are broken",
                "Nothing is broken: every locker works, and every one is promised away."),
         Choice(f"All {reserved} lockers are reserved",
                f"5 x 12 = {reserved}: every locker belongs to someone already."),
         (f"F brought {empty + 1} bags",
          f"F's luggage would fit in the {empty} empty lockers if they were free.")],
        answer=1,
        design="V0",
    )


def seqs(answer=238):
    return NumberQuestion(
        "How many 4,096-token requests fit with an fp8 cache?", answer=answer, source=plan_capacity,
        explanation="65,536 bytes per token: twice as many as with bf16.",
        too_low="Halve the bytes per token, then divide the budget.",
        too_high="Each request needs 4,096 tokens of K and V.",
        mistakes={119: "That is the bf16 count: fp8 keeps each number in 1 byte, not 2."},
        design="V1",
    )


def test_a_right_pick_says_so_and_explains():
    fb = lockers().pick(1)
    assert fb.correct and fb.text.startswith(RIGHT)
    assert "All 60 lockers are reserved" in fb.text and "every locker belongs" in fb.text


def test_a_wrong_pick_says_why_it_is_wrong_and_invites_another():
    fb = lockers().pick(2)
    assert not fb.correct and fb.text.startswith(WRONG) and "(c)" in fb.text
    assert "would fit in the 36 empty lockers" in fb.text and fb.text.endswith("Try another choice.")
    assert "reserved" not in fb.text and "belongs" not in fb.text  # the right choice's why stays hidden
    assert lockers().pick(0).text != fb.text  # each wrong choice has its own why


def test_answer_text_and_explanation_are_what_a_check_cell_compares():
    q = lockers(empty=36)
    assert q.answer_text == "All 60 lockers are reserved" and q.explanation.startswith("5 x 12 = 60")
    assert lockers(reserved=48).answer_text != "All 60 lockers are reserved"
    assert q.texts == tuple(c.text for c in q.choices) and all(isinstance(c, Choice) for c in q.choices)


def test_a_number_is_checked_against_the_computed_answer():
    q = seqs()
    assert q.source == "paged_lab.kv_math.plan_capacity" and q.answer_text == "238"
    right = q.check(" 238 ")
    assert right.correct
    assert right.text == f"{RIGHT}: 238. 65,536 bytes per token: twice as many as with bf16."
    low, high = q.check("200"), q.check("1,000")
    assert low.text == (f"{TOO_LOW}: 200 is less than the answer. Halve the bytes per token, "
                        "then divide the budget. Try again.")
    assert high.text.startswith(f"{TOO_HIGH}: 1,000 is more than the answer. Each request needs 4,096")
    mistake = q.check("119")  # a known misconception: its own why, still told too low
    assert mistake.text.startswith(f"{TOO_LOW}: 119 is less") and "That is the bf16 count" in mistake.text
    for typed in ("abc", "2,38", "", "nan"):
        fb = q.check(typed)
        assert not fb.correct and fb.text.startswith(NOT_A_NUMBER), typed
    assert "“abc” is not a number" in q.check("abc").text and "Type a number" in q.check("  ").text
    assert not any(q.check(t).correct for t in ("237", "239", "238.5"))
    assert NumberQuestion("p?", answer=0.5, source=plan_capacity, explanation="e.", too_low="l.",
                          too_high="h.", tolerance=0.01).check("0.505").correct


@pytest.mark.parametrize(("typed", "value"), [("1,024", 1024), ("１２３", 123), ("1 024", 1024),
                                              ("12,345.5", 12345.5), ("-3", -3), ("4.0", 4), ("2,38", None),
                                              ("1,0245", None), ("inf", None), ("", None), ("twelve", None)])
def test_parse_number(typed, value):
    assert parse_number(typed) == value


def test_distinct_mistakes_drop_the_answer_and_repeats():
    assert distinct_mistakes(4, [(3, "a"), (4, "the answer"), (3, "again"), (5, "b")]) == {3: "a", 5: "b"}


def _parts(box):
    """(prompt, buttons, feedback) of a choice question's VBox."""
    return box.children[0], [row.children[0] for row in box.children[1:-1]], box.children[-1]


def test_buttons_give_feedback_in_the_widget():
    quiz = Quiz([lockers(), Question("2 + 2?", [("3", "3 is 2 + 1, one short."), ("4", "2 + 2 is 4.")], 1)])
    box = quiz.widget()
    assert QUIZ_CLASS in box._dom_classes and quiz.widget() is box  # built once
    first = box.children[1]  # children[0] is the title
    assert CHOICE_CLASS in first._dom_classes
    _, buttons, feedback = _parts(first)
    assert FEEDBACK_CLASS in feedback._dom_classes and feedback.value == ""
    buttons[0].click()
    assert WRONG in feedback.value and "Nothing is broken" in feedback.value
    assert buttons[0].button_style == "danger"
    buttons[1].click()
    assert RIGHT in feedback.value and "every locker belongs" in feedback.value
    assert buttons[1].button_style == "success"
    buttons[2].click()  # after the right one, another pick still says why
    assert "would fit in the 36 empty" in feedback.value
    assert box.children[2].children[-1].value == ""  # questions answer independently


def test_a_number_box_checks_on_enter_and_on_the_button():
    box = Quiz([seqs()]).widget().children[1]
    assert NUMBER_CLASS in box._dom_classes
    entry, button = box.children[1].children
    feedback = box.children[-1]
    assert isinstance(entry, W.Text) and not entry.continuous_update
    assert FEEDBACK_CLASS in feedback._dom_classes
    entry.value = "120"  # what Enter sends
    assert "Too low" in feedback.value and "120 is less" in feedback.value
    button.click()  # the same value, checked again
    assert "120 is less" in feedback.value
    entry.value = "238"
    assert RIGHT in feedback.value and "twice as many" in feedback.value and button.button_style == "success"


def test_static_rendering_holds_every_question_choice_and_why():
    quiz = Quiz([lockers(), seqs()], title="Quiz")
    page = quiz.to_html()
    assert STATIC_CLASS in page and "Why must F wait while 36 lockers are empty?" in page
    assert "The lockers are broken" in page and "How many 4,096-token requests" in page
    lock, number = page.split("<details>")[1:]
    assert "All 60 lockers are reserved" in lock and "every locker belongs" in lock
    assert "Nothing is broken" in lock and "would fit in the 36 empty" in lock  # the wrong ones' whys, folded
    assert "<b>238.</b> 65,536 bytes" in number and "Answer with a number." in page.split("<details>")[1]
    assert "PagedAttention paper" in page and "what vLLM does today" in page  # the V0 and V1 labels
    md = quiz.to_markdown()
    assert "36 lockers" in md and "(b) All 60 lockers are reserved" in md.split("<details>")[1]
    assert "(a) Nothing is broken" in md and "**238.**" in md


def test_mimebundle_has_the_widget_and_the_text():
    data = Quiz([lockers(), seqs()])._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert STATIC_CLASS in data["text/html"] and "36 lockers" in data["text/plain"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prompt": ""}, "prompt"),
        ({"choices": [("only one", "one is no choice at all")]}, "2 to 8"),
        ({"choices": "ab"}, "list of Choice"),
        ({"choices": [("a", "why a"), ("a", "why again")]}, "distinct"),
        ({"choices": [("a", "why a"), ("", "why b")]}, "text"),
        ({"choices": [("a", "why a"), ("b", " ")]}, "why of choice 'b'"),
        ({"choices": ["a", "b"]}, r"choices\[0\]"),
        ({"answer": 3}, "0 to 2"),
        ({"answer": True}, "index"),
        ({"design": "V2"}, "design"),
    ],
)
def test_bad_questions_are_refused(kwargs, match):
    choices = [("a", "why a"), ("b", "why b"), ("c", "why c")]
    args = {"prompt": "p?", "choices": choices, "answer": 0, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        Question(**args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"answer": "238"}, "finite number"),
        ({"answer": float("nan")}, "finite number"),
        ({"source": "plan_capacity"}, "function or class"),
        ({"too_low": ""}, "too_low"),
        ({"mistakes": {238: "the answer"}}, "is the answer"),
        ({"mistakes": {"x": "why"}}, "not a number"),
        ({"tolerance": -1}, "tolerance"),
    ],
)
def test_bad_number_questions_are_refused(kwargs, match):
    args = {"prompt": "p?", "answer": 238, "source": plan_capacity, "explanation": "e.", "too_low": "l.",
            "too_high": "h.", **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        NumberQuestion(**args)


def test_bad_picks_and_quizzes_are_refused():
    with pytest.raises(ValueError, match="0 to 2"):
        lockers().pick(3)
    with pytest.raises(ValueError, match="at least one"):
        Quiz([])
    with pytest.raises(TypeError, match=r"questions\[1\]"):
        Quiz([lockers(), "a question"])
