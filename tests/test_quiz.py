"""paged_lab.quiz: a pick says right or wrong at once, the text rendering keeps question and answer."""

import ipywidgets as W
import pytest

from paged_lab.quiz import FEEDBACK_CLASS, QUIZ_CLASS, RIGHT, STATIC_CLASS, WRONG, Question, Quiz


def lockers(empty=36, reserved=60):
    return Question(
        f"Why must F wait while {empty} lockers are empty?",
        [f"All {reserved} lockers are reserved", "The lockers are broken", f"F brought {empty + 1} bags"],
        answer=0,
        explanation=f"5 x 12 = {reserved}: every locker belongs to someone already.",
        design="V0",
    )


def test_a_right_pick_says_so_and_explains():
    q = lockers()
    fb = q.pick(0)
    assert fb.correct and fb.text.startswith(RIGHT)
    assert "All 60 lockers are reserved" in fb.text and "every locker belongs" in fb.text


def test_a_wrong_pick_says_so_without_giving_the_answer_away():
    fb = lockers().pick(2)
    assert not fb.correct and fb.text.startswith(WRONG) and "(c)" in fb.text
    assert "reserved" not in fb.text and "belongs" not in fb.text


def test_answer_text_is_what_a_check_cell_compares():
    assert lockers(empty=36).answer_text == "All 60 lockers are reserved"
    assert lockers(reserved=48).answer_text != "All 60 lockers are reserved"


def test_buttons_give_feedback_in_the_widget():
    quiz = Quiz([lockers(), Question("2 + 2?", ["3", "4"], 1, "It is 4.")])
    box = quiz.widget()
    assert QUIZ_CLASS in box._dom_classes and quiz.widget() is box  # built once
    first = box.children[1]  # children[0] is the title
    buttons = [row.children[0] for row in first.children if isinstance(row, W.HBox)]
    feedback = first.children[-1]
    assert FEEDBACK_CLASS in feedback._dom_classes and feedback.value == ""
    buttons[1].click()
    assert WRONG in feedback.value and buttons[1].button_style == "danger"
    buttons[0].click()
    assert RIGHT in feedback.value and "every locker belongs" in feedback.value
    assert buttons[0].button_style == "success"
    second = box.children[2]
    assert second.children[-1].value == ""  # questions answer independently


def test_static_rendering_holds_question_choices_and_answer():
    quiz = Quiz([lockers()], title="Quiz")
    page = quiz.to_html()
    assert STATIC_CLASS in page and "Why must F wait while 36 lockers are empty?" in page
    assert "The lockers are broken" in page
    details = page.split("<details>")[1]
    assert "All 60 lockers are reserved" in details and "every locker belongs" in details
    assert "PagedAttention paper" in page  # the V0 label
    md = quiz.to_markdown()
    assert "36 lockers" in md and "<details>" in md and "(a) All 60 lockers are reserved" in md.split("<details>")[1]


def test_mimebundle_has_the_widget_and_the_text():
    data = Quiz([lockers()])._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert STATIC_CLASS in data["text/html"] and "36 lockers" in data["text/plain"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prompt": ""}, "prompt"),
        ({"choices": ["only one"]}, "2 to 8"),
        ({"choices": "ab"}, "list of strings"),
        ({"choices": ["a", "a"]}, "distinct"),
        ({"choices": ["a", ""]}, r"choices\[1\]"),
        ({"answer": 3}, "0 to 2"),
        ({"answer": True}, "index"),
        ({"explanation": " "}, "explanation"),
        ({"design": "V2"}, "design"),
    ],
)
def test_bad_questions_are_refused(kwargs, match):
    args = {"prompt": "p?", "choices": ["a", "b", "c"], "answer": 0, "explanation": "e.", **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        Question(**args)


def test_bad_picks_and_quizzes_are_refused():
    with pytest.raises(ValueError, match="0 to 2"):
        lockers().pick(3)
    with pytest.raises(ValueError, match="at least one"):
        Quiz([])
    with pytest.raises(TypeError, match=r"questions\[1\]"):
        Quiz([lockers(), "a question"])
