"""The series' quizzes (``paged_lab/classroom/quizzes/nbNN.py``), held to the rules that
keep them honest (issue 27):

- whichever choice a learner picks, they are told why: every choice carries its own explanation, and no
  two choices of a question share one; a wrong choice's explanation never states the right answer;
- the order of the choices does not give the answer away: across the series no position holds more
  than 40% of the right answers, and the right choice is the strictly longest in at most 35% of the
  questions (and the strictly shortest in at most 35%: the opposite tell), in English and in zh-TW;
- every series notebook asks for at least one number the learner computes, whose answer the package
  computes when the quiz is built (``source``: paged_lab code, not the quiz's own);
- the quiz lives out of the reading path: no uncollapsed cell of a notebook holds a question, a choice
  or an answer; the quiz cell only calls ``paged_lab.classroom.quizzes.nbNN.quiz(...)``, and the check cell
  that
  compares its answers with the notebook's numbers is collapsed (in Colab too: ``cellView: form``).

The quizzes are built here from the facts of each notebook's own run (``FACTS``: the values the
notebook passes in; nbval runs the real ones, and each notebook's check cell ties them to its numbers).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from paged_lab.classroom.quiz import LETTERS, NumberQuestion, Question, Quiz
from paged_lab.viz import i18n

ROOT = Path(__file__).resolve().parents[1]
SERIES = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                if not p.name.startswith("00_"))
MAX_POSITION_SHARE = 0.40  # no position (a, b, c, ...) holds more of the right answers
MAX_LONGEST_SHARE = 0.35  # the right choice is the strictly longest (or shortest) in at most this share
QUIZ_DATA = re.compile(r"\b(Question|NumberQuestion|Choice)\(|\b(answer|explanation|why|mistakes)\s*=")


def _walkthrough_pool():
    """Notebook 03's section-4 pool: eight one-token requests finish in a chosen order, then A (9 tokens)."""
    from paged_lab.memory import BlockManager

    demo = BlockManager(num_blocks=8, block_size=4)
    for i in range(8):
        demo.allocate(i, [42])
    for i in [7, 1, 3, 0, 2, 4, 5, 6]:
        demo.free(i)
    demo.allocate("A", list(range(9)))
    return demo


def _kernel_costs():
    from paged_lab.kernels.tradeoff import block_size_cost
    from paged_lab.viz.kernels import sample_context_lens

    lens = sample_context_lens(64, 512, seed=0)
    return {b: block_size_cost(lens, b) for b in (1, 16, 256)}


# What each notebook passes to its quiz, from the notebook's own run (a callable where it is an object).
FACTS = {
    "01": lambda: dict(gpu_gb=80, context=4096),
    "02": lambda: dict(old_in=5, new_in=6, lockers=60, reserve=12, held=24, empty=36, handed_out=60, bags_f=7,
                       total_luggage=53, seed_bags=(8, 1), waste={16: 0.0157, 128: 0.1185},
                       peak={"contiguous": 16, "paged": 204}, chat_slots=32768, chat_reserve=2048),
    "03": lambda: dict(block_size=4, prompt_len=7, walkthrough_table=[7, 1], fresh_table=[0, 1],
                       demo=_walkthrough_pool()),
    "04": lambda: dict(block_size=4, forked_at=8, copies_at_boundary=0, n=3, prompt_len=10, v1_blocks=5,
                       v1_hits=16,
                       unshared_blocks=9, shifted_prompts=([7, *range(12)], [8, *range(12)]), twice_len=12,
                       twice_block_size=4),
    "05": lambda: dict(rounds=[6, 2, 2, 2, 2, 2], windows=3, static_makespan=8, continuous_makespan=6,
                       one_window=16, even_rounds=2, even_makespan=4,
                       extra_prefill={"recompute": 481, "recompute, prefix caching on": 257, "swap": 0},
                       budget=32, long_prompt=100, mem_slots=4096, mem_reserve=512, mem_windows=32,
                       reserved_peak=8, paged_peak=32),
    "06": lambda: dict(context_lens=[37, 16, 5], block_size=8, num_heads=9, num_kv_heads=3,
                       bytes_per_head_program=170496, bytes_per_group_program=56832, costs=_kernel_costs()),
    "07": lambda: dict(common=37, prompt_lens=[50, 48, 49, 49], cache_block_size=16, preemptions=2, n=3,
                       robot_len=8,
                       block_size=16, copies=4, work_tokens=[12, 16, 9, 6, 16, 16, 40, 5, 11, 10, 14, 40],
                       batch=4, static_slots=384, useful=195),
    "08": lambda: dict(model="deepseek-v3", tokens=1000, block_size=16, sliding_window=128, prompts=8,
                       parted=2),
    "09": lambda: dict(model="llama-3.1-70b", tp=16, handoff_model="llama-3.1-8b", prompt_len=1000,
                       block_size=16),
    "10": lambda: dict(block_size=16, num_tokens=61, num_drafts=5, num_blocks_held=4, drafts=[11, 42, 7, 42],
                       target=[11, 42, 9, 42, 5], predicted_ratio=1.02),
}


def module(number: str):
    return importlib.import_module(f"paged_lab.classroom.quizzes.nb{number}")


@pytest.fixture(scope="module")
def quizzes() -> dict[str, Quiz]:
    return {n: module(n).quiz(**make()) for n, make in FACTS.items()}


def choice_questions(quizzes) -> list[tuple[str, int, Question]]:
    return [(n, i, q) for n, quiz in quizzes.items() for i, q in enumerate(quiz) if isinstance(q, Question)]


def _zh(quiz: Quiz) -> Quiz:
    return quiz.translated(lambda text: i18n.t(text, "zh-TW", record=False))


def _states(text: str, answer: str) -> bool:
    """Whether ``text`` states ``answer``: as a word of its own for a number ("12", not "120")."""
    if re.fullmatch(r"[\d,.]+", answer):
        return re.search(rf"(?<![\d.,]){re.escape(answer)}(?![\d,]|\.\d)", text) is not None
    return answer in text


def test_every_series_notebook_has_a_quiz_module_and_facts():
    numbers = [p.name[:2] for p in SERIES]
    assert numbers and sorted(FACTS) == numbers
    for n in numbers:
        params = set(inspect.signature(module(n).quiz).parameters)
        assert params >= set(FACTS[n]()), f"nb{n}.quiz does not take {set(FACTS[n]()) - params}"


@pytest.mark.parametrize("number", sorted(FACTS))
def test_every_choice_explains_itself_and_no_wrong_one_gives_the_answer_away(quizzes, number):
    for i, q in enumerate(quizzes[number]):
        where = f"nb{number} question {i + 1}"
        if isinstance(q, NumberQuestion):
            for hint in (q.too_low, q.too_high, *(why for _, why in q.mistakes)):
                assert not _states(hint, q.answer_text), (f"{where}: a hint states the answer "
                                                          f"{q.answer_text}: {hint!r}")
            continue
        whys = [c.why for c in q.choices]
        assert all(len(w) >= 40 for w in whys), f"{where}: an explanation too short to say why: {whys}"
        assert len(set(whys)) == len(whys), f"{where}: two choices share one explanation"
        for k, c in enumerate(q.choices):
            assert not c.text.rstrip().endswith("."), f"{where}: choice {c.text!r} ends with a period"
            if k != q.answer:
                assert not _states(c.why, q.answer_text), (
                    f"{where}: the why of ({LETTERS[k]}) states the answer {q.answer_text!r}: {c.why!r}")
                fb = q.pick(k)
                assert not fb.correct and c.why in fb.text and f"({LETTERS[k]})" in fb.text
        right = q.pick(q.answer)
        assert right.correct and q.answer_text in right.text and q.explanation in right.text


@pytest.mark.parametrize("number", sorted(FACTS))
def test_every_notebook_asks_for_a_number_the_package_computes(quizzes, number):
    numbers = [q for q in quizzes[number] if isinstance(q, NumberQuestion)]
    assert numbers, f"nb{number}: no NumberQuestion"
    for q in numbers:
        assert q.source.startswith("paged_lab.") and not q.source.startswith(
            ("paged_lab.classroom.quiz.", "paged_lab.classroom.quizzes")), (
            f"nb{number}: the answer of {q.prompt[:40]!r}... must come from the package's "
            f"code, not {q.source}")
        assert q.check(q.answer_text).correct and not q.check(str(q.answer + 1)).correct
        assert q.check(str(q.answer + 1)).text.startswith("✗ Too high")
        assert q.check("a few").text.startswith("✗ Not a number")
    # the answer is computed, never typed: no NumberQuestion(answer=<a literal>) in the module
    tree = ast.parse(inspect.getsource(module(number)))
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "NumberQuestion":
            answer = next(k.value for k in call.keywords if k.arg == "answer")
            assert not isinstance(answer, ast.Constant), f"nb{number}: a NumberQuestion's answer is a literal"


def test_right_answers_are_spread_over_the_positions(quizzes):
    questions = choice_questions(quizzes)
    at = Counter(q.answer for _, _, q in questions)
    most, count = at.most_common(1)[0]
    assert count <= MAX_POSITION_SHARE * len(questions), (
        f"({LETTERS[most]}) holds {count} of the {len(questions)} right answers: "
        f"{ {LETTERS[k]: v for k, v in sorted(at.items())} }")


@pytest.mark.parametrize("language", ["en", "zh-TW"])
def test_the_right_choice_is_seldom_the_longest_or_the_shortest(quizzes, language):
    shown = quizzes if language == "en" else {n: _zh(q) for n, q in quizzes.items()}
    questions = choice_questions(shown)
    for name, beats in (("longest", lambda a, b: a > b), ("shortest", lambda a, b: a < b)):
        found = [f"nb{n} q{i + 1}" for n, i, q in questions
                 if all(beats(len(q.answer_text), len(c.text)) for k,
                        c in enumerate(q.choices) if k != q.answer)]
        assert len(found) <= MAX_LONGEST_SHARE * len(questions), (
            f"{language}: the right choice is the {name} in {len(found)} of {len(questions)} "
            f"questions: {found}")


def _cells(path: Path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _collapsed(cell) -> bool:
    return cell.metadata.get("jupyter", {}).get("source_hidden") is True


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_the_quiz_lives_out_of_the_reading_path(path):
    number = path.name[:2]
    visible = [c for c in _cells(path) if not _collapsed(c)]
    for cell in visible:
        found = QUIZ_DATA.search(cell.source)
        assert not found, (f"{path.name} cell {cell.id} shows quiz data ({found.group(0)!r}): it belongs in "
                           "paged_lab/quizzes")
    quiz_cell = next((c for c in visible if f"nb{number}.quiz(" in c.source), None)
    assert quiz_cell is not None and f"from paged_lab.classroom.quizzes import nb{number}" in quiz_cell.source
    assert quiz_cell.source.rstrip().endswith("\nquiz"), (f"{path.name}: the quiz cell should end "
                                                          "by showing `quiz`")
    cells = _cells(path)
    check = cells[cells.index(quiz_cell) + 1]
    assert "check" in check.metadata.get("tags", []) and _collapsed(check) and "quiz[" in check.source
    assert check.metadata.get("cellView") == "form" and check.source.startswith("#@title "), (
        f"{path.name}: the quiz's check cell names its answers: hide it in Colab too "
        "(cellView form, #@title)")
