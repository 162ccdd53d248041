"""A zh-TW learner is not dropped into English (issue 38 §1): the grader's feedback and hints, the learner
copy's header, the quizzes' feedback punctuation and what a notebook cell prints, all under
``paged_lab.viz.i18n.use("zh-TW")``.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from scriptkit import load_script
from test_quizzes import FACTS, module

from paged_lab.classroom.exercises import EXERCISES, check
from paged_lab.classroom.quiz import NumberQuestion, Question
from paged_lab.viz import i18n

ROOT = Path(__file__).resolve().parents[1]
_WORD = re.compile(r"[A-Za-z]+[,.;:!?)]*")  # a word, perhaps with the punctuation after it


def english_sentences(text: str) -> list[str]:
    """Runs of three English words or more in ``text``: what reads as an English sentence. Code is not
    read: `inline code`, identifiers (a_b, f(x), x=1), numbers and anything touching a Chinese character."""
    text = re.sub(r"`[^`\n]*`|<[^>]+>", " ", html.unescape(text))
    runs, run = [], []
    for token in text.split() + [""]:
        if _WORD.fullmatch(token):
            run.append(token)
            continue
        if len(run) >= 3:
            runs.append(" ".join(run))
        run = []
    return runs


def test_the_detector_finds_english_and_lets_code_and_terms_through():
    assert english_sentences("✗ blocks_needed: not yet. On the smallest input") == [
        "not yet. On the smallest input"]
    assert english_sentences("提示：每個 KV head 存 K 和 V；blocks_needed(n_tokens=5, block_size=4)") == []
    assert english_sentences("把 `raise NotImplementedError` 那一行換掉") == []


@pytest.fixture
def zh():
    i18n.use("zh-TW")
    yield
    i18n.use("en")


def _every_rendering(result) -> list[str]:
    return [str(result), result._repr_html_()]


def blocks_needed_wrong(n_tokens, block_size):  # rounds down
    return n_tokens // block_size


def blocks_needed_right(n_tokens, block_size):
    return -(-n_tokens // block_size)


def test_one_exercise_wrong_then_right_has_no_english_sentence(zh):
    wrong = check(blocks_needed_wrong, exercise="blocks_needed")
    assert not wrong.passed
    for shown in _every_rendering(wrong):
        assert "還不對" in shown and "提示：" in shown and "無條件進位" in shown, shown
        assert english_sentences(shown) == [], shown
    right = check(blocks_needed_right, exercise="blocks_needed")
    assert right.passed
    for shown in _every_rendering(right):
        assert "全部答對" in shown and english_sentences(shown) == [], shown
    assert wrong.text.startswith("✗ blocks_needed: not yet")  # the Result itself stays English


def test_the_other_ways_to_fail_are_in_chinese_too(zh):
    def append_token(block_table, num_tokens, free_blocks, block_size):  # right, but changes its input
        if num_tokens % block_size == 0:
            block_table.append(free_blocks[0])
        return block_table

    def slot_for(pos, block_table, block_size):
        raise NotImplementedError("write slot_for() here")

    def kv_bytes_per_token(spec, dtype):
        return np.int64(spec.kv_bytes_per_token(dtype))

    for fn in (append_token, slot_for, kv_bytes_per_token):
        for shown in _every_rendering(check(fn)):
            assert english_sentences(shown) == [] and "`" not in shown, shown


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_hint_is_translated(name):
    hint = EXERCISES[name].hint
    zh_hint = i18n.t(hint, "zh-TW", record=False)
    assert zh_hint != hint and english_sentences(zh_hint) == [], zh_hint
    assert i18n.term_problems(zh_hint) == []


def test_no_raw_backticks_in_the_feedback():
    def slot_for(pos, block_table, block_size):
        raise NotImplementedError("write slot_for() here")

    result = check(slot_for)
    assert "`raise NotImplementedError`" in result.text  # markdown in the record,
    assert "`" not in str(result)  # plain text without it,
    shown = result._repr_html_()
    assert "<code>raise NotImplementedError</code>" in shown and "`" not in shown  # HTML as code


# ---------------------------------------------------------------- the learner copy's header


@pytest.mark.parametrize("folder, note, full_only", [
    ("notebooks", "This is the **learner copy**", "Here the solutions are filled in"),
    ("notebooks/zh-TW", "這是**學習用的副本**", "這裡的解答都已經填好"),
])
def test_the_learner_copy_says_it_is_one_in_both_editions(folder, note, full_only):
    make = load_script("scripts/make_exercises.py")
    path = ROOT / folder / "03_block_tables.ipynb"
    copy = make.learner_copy(nbformat.read(path, as_version=4), path.name)
    text = "\n".join(c.source for c in copy.cells)
    assert full_only not in text
    head = next(c.source for c in copy.cells if "exercise" in c.metadata.get("tags", []))
    assert head.split("\n\n")[-1].startswith(note) and "(../03_block_tables.ipynb)" in head


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "notebooks" / "zh-TW").glob("[0-9][0-9]_*.ipynb")
                                        if not p.name.startswith("00_")),
                         ids=lambda p: p.stem)
def test_the_zh_tw_edition_points_at_its_own_learner_copies(path):
    """`make exercises` writes the zh-TW copies to notebooks/zh-TW/exercises/, not the English ones'."""
    nb = nbformat.read(path, as_version=4)
    head = next(c.source for c in nb.cells if c.source.startswith("## 動手做"))
    assert "`notebooks/zh-TW/exercises/`" in head and "`notebooks/exercises/`" not in head


def test_an_unknown_exercise_heading_is_an_error():
    make = load_script("scripts/make_exercises.py")
    with pytest.raises(ValueError, match="heading '## Hazlo tú' is none of"):
        make.with_learner_note("## Hazlo tú\n\nUno.\n\nDos.", "03_x.ipynb")


# ---------------------------------------------------------------- the quizzes' punctuation

_ASCII_BY_CJK = re.compile(r"[\u3400-\u9fff\uff01-\uff5e][:;,!?]|[:;,!?] ?[\u3400-\u9fff]")


def _feedback(q) -> list[str]:
    if isinstance(q, Question):
        return [q.pick(i).text for i in range(len(q.choices))]
    assert isinstance(q, NumberQuestion)
    return [q.check(typed).text for typed in (q.answer_text, "-1", "1e30", "abc", "")]


@pytest.mark.parametrize("number", sorted(FACTS))
def test_zh_quiz_feedback_has_full_width_punctuation(number):
    quiz = module(number).quiz(**FACTS[number]()).translated(lambda s: i18n.t(s, "zh-TW", record=False))
    for q in quiz:
        for text in _feedback(q):
            head = text.split("\n")[0]
            assert re.match(r"[✓✗] [^:]+：", head), head  # 答對了：, not 答對了:
            assert not _ASCII_BY_CJK.search(text), text
            assert "。。" not in text, text


def test_the_quiz_widget_writes_the_full_width_colon(zh):
    """The widget shows the verdict in bold up to its colon: 「答對了：」, never 「答對了:」."""
    from types import SimpleNamespace

    from paged_lab.classroom.quiz import Feedback, _show

    box = SimpleNamespace(value="")
    _show(box, Feedback(True, "✓ 答對了：每個 token 都留著自己的 K 和 V。"))
    assert "✓ 答對了：</span>每個 token" in box.value and "答對了:" not in box.value
    i18n.use("en")
    _show(box, Feedback(False, "✗ Not quite: (b) no."))
    assert "✗ Not quite:</span> (b) no." in box.value


# ---------------------------------------------------------------- what a notebook prints


def test_say_prints_in_the_learners_language(zh, capsys):
    i18n.say("saturation (output tokens per step): static 4.2, contiguous 7.4, paged 12.6")
    i18n.say("  ", "not in the catalogue, printed as it is")
    out = capsys.readouterr().out
    assert "飽和點" in out and "   not in the catalogue, printed as it is\n" in out
    i18n.say("A:", "CowAction(src=2, dst=3)")  # a template's part that holds code: printed, not demanded
    assert capsys.readouterr().out == "A：CowAction(src=2, dst=3)\n" and i18n.missing() == []
    i18n.use("en")
    i18n.say("a", "b", sep="-")
    assert capsys.readouterr().out == "a-b\n"
