"""Write the learner copies of the series: every reference solution replaced by a stub.

    python scripts/make_exercises.py                 # notebooks/NN_*.ipynb -> notebooks/exercises/
    python scripts/make_exercises.py --out DIR

The committed notebooks carry the solutions of their "Do it yourself" exercises in code cells tagged
``solution``, so CI runs them and the cells that call ``check`` (tagged ``grade``) assert that they pass.
In the learner copy each function of a solution cell keeps its decorators, signature and docstring; its
body becomes ``...`` and a short ``raise NotImplementedError("write f() here")`` (the check cell gives
the hint). Check cells lose their ``assert`` line, so a wrong answer shows the check's feedback instead
of a traceback. Outputs are cleared.
``notebooks/exercises/`` is not committed (.gitignore) and pytest does not collect it (notebooks/conftest.py);
a translation folder such as ``notebooks/zh-TW/`` gets its own ``exercises/`` the same way.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OUT = NOTEBOOKS / "exercises"
sys.path.insert(0, str(ROOT))
from paged_lab.classroom.exercises import stub_message  # noqa: E402

SOLUTION, CHECK, EXERCISE = "solution", "grade", "exercise"
# The exercise section's last paragraph ("Here the solutions are filled in ...") becomes the learner
# note, in the section's language: by its heading, English or a translation's (notebooks/zh-TW/).
LEARNER_NOTES = {
    "## Do it yourself": (
        "This is the **learner copy**: write each function where you see `...` (delete the "
        "`raise NotImplementedError` line), run the check cell under it, and repeat until it says ✓. "
        "The complete notebook, with the solutions, is [`../{name}`](../{name})."),
    "## 動手做": (
        "這是**學習用的副本**：在看到 `...` 的地方寫出每個函式（刪掉 `raise NotImplementedError` 那一行），"
        "執行它下面的檢查儲存格，重複到它顯示 ✓ 為止。附解答的完整筆記本是 [`../{name}`](../{name})。"),
}


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def hint_for(name: str, exercise: str | None) -> str:
    """The stub's message: where to write. The hint is the check's to give, once, under its verdict."""
    return stub_message(name)


def stub_source(source: str, exercise: str | None = None) -> str:
    """``source`` with every top-level function body replaced by ``...`` and a NotImplementedError."""
    lines = source.split("\n")
    funcs = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for node in reversed(funcs):  # bottom up, so earlier line numbers stay valid
        body = node.body
        has_doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                   and isinstance(body[0].value.value, str))
        keep_until = body[0].end_lineno if has_doc else body[0].lineno - 1  # 1-based, inclusive
        indent = " " * body[0].col_offset
        stub = [f"{indent}...", f"{indent}raise NotImplementedError({hint_for(node.name, exercise)!r})"]
        lines[keep_until:node.end_lineno] = stub
    return "\n".join(lines)


def without_asserts(source: str) -> str:
    return "\n".join(line for line in source.split("\n") if not line.startswith("assert "))


def one_level_down(markdown: str) -> str:
    """Relative links of a notebook in notebooks/, as seen from notebooks/exercises/."""
    markdown = markdown.replace("](../", "](../../")
    return re.sub(r"\]\((?![a-zA-Z][a-zA-Z+.-]*:|#|\.\./|/)([^)]+)\)", r"](../\1)", markdown)


def graded_by(cells, i: int) -> str | None:
    """The exercise that the first check cell after cell ``i`` grades: ``check(<name>)``."""
    for cell in cells[i + 1:]:
        found = re.search(r"\bcheck\((\w+)", cell.source) if CHECK in tags(cell) else None
        if found:
            return found.group(1)
    return None


def learner_copy(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(nb)  # a deep copy
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if SOLUTION in tags(cell):
                cell.source = stub_source(cell.source, graded_by(nb.cells, i))
            elif CHECK in tags(cell):
                cell.source = without_asserts(cell.source)
        elif cell.cell_type == "markdown":
            cell.source = one_level_down(cell.source)
            if EXERCISE in tags(cell) and cell.source.startswith("## "):
                cell.source = with_learner_note(cell.source, name)
    return nb


def with_learner_note(section: str, name: str) -> str:
    """The exercise section's head with its last paragraph (the full notebook's "the solutions are filled
    in") replaced by the learner note in the section's language; a heading it does not know is an error,
    so a new translation cannot keep the full notebook's paragraph above the stubs."""
    heading = section.split("\n", 1)[0].strip()
    if heading not in LEARNER_NOTES:
        raise ValueError(f"{name}: the exercise section's heading {heading!r} is none of "
                         f"{list(LEARNER_NOTES)}; add its learner note to LEARNER_NOTES here")
    paragraphs = section.split("\n\n")
    return "\n\n".join(paragraphs[:-1] + [LEARNER_NOTES[heading].format(name=name)])


def has_exercises(nb: nbformat.NotebookNode) -> bool:
    return any(SOLUTION in tags(c) for c in nb.cells)


def folders() -> list[Path]:
    """notebooks/ and every translation beside the series (e.g. notebooks/zh-TW/) that holds notebooks."""
    subs = [d for d in sorted(NOTEBOOKS.iterdir())
            if d.is_dir() and d.name != OUT.name and any(d.glob("[0-9][0-9]_*.ipynb"))]
    return [NOTEBOOKS, *subs]


def write_copies(folder: Path, out: Path) -> list[Path]:
    written = []
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if has_exercises(nb):
            out.mkdir(parents=True, exist_ok=True)
            nbformat.write(learner_copy(nb, path.name), out / path.name)
            written.append(out / path.name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="where the copies of notebooks/ go (default: notebooks/exercises/, and "
                             "<translation>/exercises/ for each translation folder)")
    args = parser.parse_args(argv)
    plan = [(NOTEBOOKS, args.out)] if args.out else [(f, f / OUT.name) for f in folders()]
    for folder, out in plan:
        for path in write_copies(folder, out):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
