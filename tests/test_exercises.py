"""paged_lab.classroom.exercises (the check) and scripts/make_exercises.py (the learner copies, via
`make exercises`)."""

import ast
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from scriptkit import load_script

from paged_lab.classroom import exercises
from paged_lab.classroom.exercises import EXERCISES, check, grader, nb04, solution

ROOT = Path(__file__).resolve().parents[1]
SERIES = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00"))


def tags(cell):
    return cell.get("metadata", {}).get("tags", [])


# ---------------------------------------------------------------- check()


def test_a_right_function_passes():
    def blocks_needed(n_tokens, block_size):
        return -(-n_tokens // block_size)

    result = check(blocks_needed)
    assert result.passed and bool(result) and result.text.startswith("✓ blocks_needed")
    assert "def " not in str(result)  # no solution unless asked


def test_a_wrong_function_gets_the_smallest_counterexample():
    def blocks_needed(n_tokens, block_size):  # right on the fixed cases, wrong from 101 tokens on
        right = -(-n_tokens // block_size)
        return right + 1 if n_tokens > 100 else right

    result = check(blocks_needed)
    assert not result.passed
    assert "On the smallest input it gets wrong" in result.text
    assert "blocks_needed(n_tokens=101, block_size=1)" in result.text  # shrunk to the boundary
    assert "expected: 101" in result.text and "yours:    102" in result.text
    assert "Hint: round up" in result.text


def test_the_smallest_failing_input_is_shown_fixed_or_generated():
    """The first failing fixed case was shown (n_tokens=5) where a smaller generated one fails too."""
    def blocks_needed(n_tokens, block_size):  # rounds down: wrong on the fixed case (5, 4), and on (1, 2)
        return n_tokens // block_size

    text = check(blocks_needed).text
    assert "blocks_needed(n_tokens=1, block_size=2)" in text
    assert "expected: 1" in text and "yours:    0" in text

    def slot_for(pos, block_table, block_size):
        return block_table[pos // block_size] + pos % block_size  # forgot x block_size

    text = check(slot_for).text  # the fixed case (0, [7], 4) fails, and so does a smaller generated one
    assert "slot_for(pos=0, block_table=[7], block_size=4)" not in text and "slot_for(" in text


def test_a_fixed_case_is_shown_when_nothing_smaller_fails():
    def utilization(regions):  # wrong only when nothing is reserved: the fixed case ([],)
        return sum(t for t, _ in regions) / sum(r for _, r in regions) if regions else 1.0

    text = check(utilization).text
    assert "utilization(regions=[])" in text and "expected: 0" in text


def test_feedback_has_one_hint_plurals_and_wraps_at_word_boundaries():
    def blocks_needed(n_tokens, block_size):
        raise NotImplementedError(exercises.stub_message("blocks_needed"))

    text = check(blocks_needed).text
    # one hint, and the stub's own words not repeated
    assert text.count("Hint:") == 1 and "write blocks_needed() here" not in text
    ok = check(lambda n_tokens, block_size: -(-n_tokens // block_size), exercise="blocks_needed",
               max_examples=1)
    assert "right on 3 fixed cases and 1 generated one;" in ok.text
    one = exercises.EXERCISES["cached_prefix"]
    assert len(one.cases) == 1
    right = check(lambda cached, token_ids, block_size:
                  nb04._expect_cached_prefix(cached, token_ids, block_size), exercise="cached_prefix")
    assert "right on 1 fixed case and 25 generated ones;" in right.text
    printed = str(check(blocks_needed))
    assert all(len(line) <= grader.WRAP for line in printed.split("\n"))
    words = set(grader._plain(text).split())  # printed without the markdown backticks
    assert all(word in words for line in printed.split("\n") for word in line.split())  # no word cut in two
    assert "word-break:normal" in check(blocks_needed)._repr_html_()


def test_errors_are_feedback_not_tracebacks():
    def admit(prompt_lens, num_free_blocks, max_num_seqs, block_size):
        return 1 / 0

    text = check(admit).text
    assert "raised ZeroDivisionError: division by zero" in text and "Traceback" not in text

    def preempt(running, free_blocks, block_size):
        raise NotImplementedError("write it")

    text = check(preempt).text
    assert text.startswith("✗ preempt: not written yet") and "write it" in text and "Hint:" in text


def test_the_solution_only_when_asked():
    def slot_for(pos, block_table, block_size):
        return 0

    assert check(slot_for).solution is None and "block_table[pos // block_size]" not in str(check(slot_for))
    asked = check(slot_for, show_solution=True)
    assert "block_table[pos // block_size] * block_size" in str(asked) and not asked.passed
    assert "paged_lab.memory.block_tables.slot_for" in solution("slot_for")


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_solution_can_be_shown(name):
    assert solution(name).startswith("Solution: the package's own code")


def test_the_tile_loop_solution_walks_the_table_as_its_hint_says():
    """decode_scores' hint asks for one loop iteration per block of the table: the solution shown has
    such a loop, whose body looks its block up in the table by the loop variable."""
    tree = ast.parse(solution("decode_scores").split("\n\n", 1)[1])
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)]
    assert "one loop iteration per block of the table" in EXERCISES["decode_scores"].hint
    assert any(isinstance(sub, ast.Subscript) and getattr(sub.value, "id", "") == "block_table"
               and getattr(sub.slice, "id", None) == loop.target.id
               for loop in loops for sub in ast.walk(loop)), "no loop reads block_table[its variable]"


def test_a_function_that_mutates_its_input_cannot_fool_the_grader():
    def append_token(block_table, num_tokens, free_blocks, block_size):
        block_table.append(free_blocks.pop(0))  # wrong when the last block is not full
        return block_table

    assert not check(append_token).passed


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="exercise must be one of"):
        check(lambda x: x)
    assert "pass the function itself" in check(3, exercise="slot_for").text
    with pytest.raises(ValueError, match="name must be one of"):
        solution("nope")
    with pytest.raises(ValueError, match="time_limit must be a number of seconds above 0, or None"):
        check(lambda pos, block_table, block_size: 0, exercise="slot_for", time_limit=0)


def test_html_and_text_renderings():
    def blocks_needed(n_tokens, block_size):
        return "<b>"

    result = check(blocks_needed)
    html = result._repr_html_()
    assert grader.CHECK_CLASS in html and 'data-passed="false"' in html and "&lt;b&gt;" in html
    assert repr(result) == "Result('blocks_needed', passed=False)"


# ---------------------------------------------------------------- what the grader does not let through

needs_setitimer = pytest.mark.skipif(not hasattr(signal, "setitimer"),
                                     reason="the time limit needs SIGALRM (POSIX)")


@needs_setitimer
def test_a_function_that_never_returns_is_stopped_on_the_case_it_is_stuck_on():
    def slot_for(pos, block_table, block_size):
        deadline = time.monotonic() + 20  # forever beside the limit, yet bounded: without a working
        while time.monotonic() < deadline:  # limit this test fails (the answer 0 is wrong) instead of hanging
            pass
        return 0

    result = check(slot_for, time_limit=0.2)
    assert not result.passed
    assert result.text.startswith("✗ slot_for: still running after 0.2 s, so the check stopped it. "
                                  "On a fixed case:")
    assert "  slot_for(pos=0, block_table=[7], block_size=4)\n" in result.text  # the case it was stuck on
    assert "give it more time: check(slot_for, time_limit=0.8)." in result.text and "Hint: " in result.text


@needs_setitimer
def test_a_generated_input_that_never_returns_is_named_without_shrinking():
    stuck = []

    def blocks_needed(n_tokens, block_size):  # right on the fixed cases; loops from 101 tokens on
        if n_tokens > 100:
            stuck.append(n_tokens)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                pass
        return -(-n_tokens // block_size)

    text = check(blocks_needed, time_limit=0.2).text
    assert "so the check stopped it. On a generated input:" in text
    assert f"blocks_needed(n_tokens={stuck[0]}, " in text
    assert len(stuck) == 1  # hypothesis did not shrink it: one wait of 0.2 s, not one per smaller try


@needs_setitimer
def test_the_time_limit_leaves_no_timer_or_handler_behind():
    def slot_for(pos, block_table, block_size):
        while True:
            pass

    before = signal.getsignal(signal.SIGALRM)
    assert not check(slot_for, time_limit=0.1).passed
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@needs_setitimer
def test_the_time_limit_stops_an_endless_loop_inside_a_jupyter_kernel(tmp_path):
    """Where a learner meets it: a cell of a kernel, `while True: pass`, then the kernel still answers."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from paged_lab.classroom.exercises import check\n\n"
        "def slot_for(pos, block_table, block_size):\n    while True:\n        pass\n\n"
        "print(check(slot_for, time_limit=0.5).text)"), nbformat.v4.new_code_cell("print(6 * 7)")]
    resources = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(nb, timeout=60, kernel_name="python3", resources=resources).execute()
    first, second = ("".join(o.get("text", "") for o in c.outputs) for c in nb.cells)
    assert first.startswith("✗ slot_for: still running after 0.5 s") and second == "42\n"


class _EqualsEverything:
    """An answer that claims to be right: equal to anything."""

    def __eq__(self, other):
        return True

    __hash__ = None


def test_an_answer_that_equals_everything_does_not_pass():
    def blocks_needed(n_tokens, block_size):
        return _EqualsEverything()

    result = check(blocks_needed)
    assert not result.passed
    assert "(type _EqualsEverything, but the answer is of type int)" in result.text


def test_a_subclass_that_redefines_equality_does_not_pass_either():
    """A subclass's __eq__ runs first (Python's rule), so isinstance() would not do: the types must match."""

    class SlyInt(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class SlyList(list):
        def __eq__(self, other):
            return True

    # as many items as the answer, all wrong
    def admit(prompt_lens, num_free_blocks, max_num_seqs, block_size):
        right = EXERCISES["admit"].expected(prompt_lens, num_free_blocks, max_num_seqs, block_size)
        return [SlyInt(-1) for _ in right]

    result = check(admit)
    assert not result.passed
    assert "(yours[0] is of type SlyInt, but the answer's is of type int)" in result.text

    # noqa below: the name is the exercise's
    def admit(prompt_lens, num_free_blocks, max_num_seqs, block_size):  # noqa: F811
        return SlyList()

    result = check(admit)
    assert not result.passed and "(type SlyList, but the answer is of type list)" in result.text


# ---------------------------------------------------------------- the notebooks and their learner copies


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_each_notebook_has_graded_exercises(path):
    nb = nbformat.read(path, as_version=4)
    solutions = [c for c in nb.cells if "solution" in tags(c)]
    checks = [c for c in nb.cells if "grade" in tags(c)]
    assert len(solutions) >= 2 and len(checks) == len(solutions), path.name
    for c in checks:
        name = re.search(r"\bcheck\((\w+)\)", c.source).group(1)
        assert name in EXERCISES and "assert result, result.text" in c.source
    summary = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## Summary"))
    section = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## Do it yourself"))
    assert section < nb.cells.index(solutions[0]) < nb.cells.index(checks[-1]) < summary


@pytest.fixture(scope="module")
def learner_copies(tmp_path_factory):
    """`make exercises` into a temporary folder (the venv stamp is skipped: this interpreter runs it)."""
    out = tmp_path_factory.mktemp("exercises")
    if shutil.which("make"):
        cmd = ["make", "-s", "-C", str(ROOT), "exercises", f"PY={sys.executable}", "STAMP=",
               f"EXERCISES_OUT={out}"]
    else:
        cmd = [sys.executable, str(ROOT / "scripts" / "make_exercises.py"), "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _body_lines(source):
    """The lines a learner must not see: every function body of a solution cell, docstring excepted."""
    lines = source.split("\n")
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
            out += [ln.strip() for ln in lines[body[0].lineno - 1:node.end_lineno] if ln.strip()]
    return out


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_no_solution_leaks_into_the_learner_copy(path, learner_copies):
    original = nbformat.read(path, as_version=4)
    copy = nbformat.read(learner_copies / path.name, as_version=4)
    assert [c.id for c in copy.cells] == [c.id for c in original.cells]
    text = "\n".join(c.source for c in copy.cells)
    for cell in original.cells:
        if "solution" in tags(cell):
            for line in _body_lines(cell.source):
                assert line not in text, f"{path.name}: the solution line {line!r} is in the learner copy"
    stubs = [c.source for c in copy.cells if "solution" in tags(c)]
    assert all("...\n" in s and "raise NotImplementedError(" in s for s in stubs)
    assert not any("assert result" in c.source for c in copy.cells if "grade" in tags(c))
    assert all(c.get("outputs", []) == [] for c in copy.cells)


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_every_check_fails_on_the_stub_with_a_helpful_message(path, learner_copies, tmp_path):
    """The learner copy's exercise cells, run as a script: each check reports, nothing crashes."""
    copy = nbformat.read(learner_copies / path.name, as_version=4)
    kinds = {"exercise", "solution", "grade"}
    cells = [c for c in copy.cells if c.cell_type == "code" and kinds & set(tags(c))]
    parts = ["RESULTS = []"]
    for c in cells:
        parts.append(c.source)
        if "grade" in tags(c):
            parts.append("RESULTS.append(result)")
    script = tmp_path / f"{path.stem}_exercises.py"  # a file: @triton.jit reads its kernel's source
    script.write_text("\n\n".join(parts) + "\n")
    results = runpy.run_path(str(script))["RESULTS"]
    assert len(results) == len([c for c in cells if "grade" in tags(c)]) >= 2
    for r in results:
        assert not r.passed and r.text.startswith(f"✗ {r.exercise}: not written yet"), r.text
        assert "Hint: " in r.text and "Traceback" not in r.text


def test_copies_are_not_collected_by_pytest(learner_copies):
    conftest = runpy.run_path(str(ROOT / "notebooks" / "conftest.py"))
    assert {"exercises/*", "*/exercises/*"} <= set(conftest["collect_ignore_glob"])
    assert "notebooks/exercises/" in (ROOT / ".gitignore").read_text().split("\n")


def _make_exercises():
    return load_script("scripts/make_exercises.py")


def test_a_translation_folder_gets_its_own_copies(tmp_path, monkeypatch, capsys):
    mod = _make_exercises()
    series = tmp_path / "notebooks"
    (series / "zh-TW").mkdir(parents=True)
    for folder in (series, series / "zh-TW"):
        shutil.copy(SERIES[2], folder / SERIES[2].name)
    monkeypatch.setattr(mod, "NOTEBOOKS", series)
    assert mod.main([]) == 0
    assert (series / "exercises" / SERIES[2].name).exists()
    assert (series / "zh-TW" / "exercises" / SERIES[2].name).exists()
    assert not (series / "exercises" / "exercises").exists()


def test_stub_keeps_signature_and_docstring():
    mod = _make_exercises()
    src = ('X = 1\n\n\n@deco\ndef f(a,\n      b):\n    """Doc."""\n    return a + b\n\n\n'
           'def g():\n    return 2')
    stub = mod.stub_source(src, "slot_for")
    assert stub.startswith('X = 1\n\n\n@deco\ndef f(a,\n      b):\n    """Doc."""\n    ...\n'
                           '    raise NotImplementedError(')
    assert "return" not in stub and "raise NotImplementedError('write g() here')" in stub
    assert EXERCISES["slot_for"].hint[:20] not in stub  # the hint is the check's to give
    assert mod.one_level_down("[a](02_x.ipynb) [b](../docs/x.md) [c](https://x.org) [d](#top)") == (
        "[a](../02_x.ipynb) [b](../../docs/x.md) [c](https://x.org) [d](#top)")


def test_readme_and_index_say_where_the_exercises_are():
    sync = load_script("scripts/sync_badges.py", name="sync_badges_for_exercises")
    table = (ROOT / "README.md").read_text().split(sync.TABLE_START)[1].split(sync.TABLE_END)[0]
    assert "| Do it yourself |" in table.split("\n")[1]
    for path in SERIES:
        row = next(line for line in table.split("\n") if f"(notebooks/{path.name})" in line)
        names = sync.describe(path).exercises
        assert len(names) >= 2 and row.endswith(" | " + "<br>".join(f"`{n}`" for n in names) + " |")
    index = nbformat.read(ROOT / "notebooks" / "00_index.ipynb", as_version=4)
    assert any("`exercises/`" in c.source and "make exercises" in c.source for c in index.cells)
