"""Series conventions every notebook keeps (docs/architecture.md), and the index that lists them all.

Notebooks are found by glob, so a new notebook is checked the moment it lands in ``notebooks/``.
"""

import re
from pathlib import Path

import nbformat
import pytest
from scriptkit import load_script

from paged_lab import _project

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    return load_script(f"scripts/{name}.py")


sync = _load("sync_badges")
kit = _load("notebook_kit")  # what sync_badges.py and build_zh.py read from a notebook
NOTEBOOKS = sync.series()
SERIES = [p for p in NOTEBOOKS if p != sync.INDEX]


def read(path):
    return nbformat.read(path, as_version=4)


def test_series_exists():
    assert sync.INDEX in NOTEBOOKS and SERIES, ("expected 00_index.ipynb and at least one notebook in "
                                                f"{sync.NOTEBOOKS}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
class TestNotebook:
    def test_first_cell_ends_with_the_badge_line(self, path):
        first = read(path).cells[0]
        assert first.cell_type == "markdown"
        lines = first.source.strip().split("\n")
        assert lines[0].startswith("# "), f"{path.name}: the first cell starts with its title"
        assert _project.badges_markdown(path.name) in lines, (
            f"{path.name}: the first cell needs the line badges_markdown({path.name!r}); "
            "run python scripts/sync_badges.py"
        )

    def test_second_cell_is_the_standard_setup_cell(self, path):
        second = read(path).cells[1]
        assert second.cell_type == "code"
        assert _project.REPO_URL in second.source
        assert second.source.strip() == sync.setup_cell(), (f"{path.name}: cell 2 differs from the "
                                                            "standard setup cell")

    def test_setup_cell_is_collapsed_with_a_visible_title(self, path):
        second = read(path).cells[1]
        assert second.metadata.get("jupyter", {}).get("source_hidden") is True, (f"{path.name}: setup "
            "cell not collapsed")
        assert second.metadata.get("cellView") == "form", f"{path.name}: Colab would show the setup code"
        assert second.source.startswith("#@title "), (f"{path.name}: a collapsed setup cell needs "
                                                      "its one-line title")

    def test_committed_clean(self, path):
        nb = read(path)
        assert "widgets" not in nb.metadata, (f"{path.name}: metadata.widgets (saved widget state) must "
                                              "not be committed")
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{path.name}: cell {i} has outputs"
                assert cell.execution_count is None, f"{path.name}: cell {i} has an execution count"

    def test_checks_sit_in_check_cells_out_of_the_reading_path(self, path):
        """Issue 20: a teaching cell reads without assert lines. Every fact is asserted in a cell tagged
        ``check`` (collapsed: its output shows, its source folds away) or ``grade`` (an exercise's
        check). The one exception: an assert inside a branch that runs only with a GPU or vLLM
        (``if torch.cuda.is_available():``, ``find_spec("vllm")``), next to what it measures there."""
        for i, cell in enumerate(read(path).cells):
            if cell.cell_type != "code":
                continue
            tags = cell.metadata.get("tags", [])
            if "check" in tags:
                assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, (
                    f"{path.name}: check cell {i} ({cell.id}) is not collapsed")
            if "check" in tags or "grade" in tags:
                continue
            assert not _unguarded_asserts(cell.source), (
                f"{path.name}: cell {i} ({cell.id}) asserts in the reading path: "
                f"{_unguarded_asserts(cell.source)}; move them to a check cell after it")

    def test_no_class_definitions(self, path):
        for i, cell in enumerate(read(path).cells):
            if cell.cell_type == "code":
                assert not re.search(r"^\s*class\s+\w+", cell.source, flags=re.M), (
                    f"{path.name}: cell {i} defines a class; helpers belong in the paged_lab package"
                )


def _unguarded_asserts(source: str) -> list[int]:
    """Line numbers of the asserts in ``source`` that are not inside an ``if`` about a GPU or vLLM."""
    import ast

    tree = ast.parse(source)
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and re.search(r"cuda|find_spec", ast.unparse(node.test)):
            guarded |= {n.lineno for n in ast.walk(node) if isinstance(n, ast.Assert)}
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.lineno not in guarded)


def test_the_assert_rule_sees_nested_asserts_and_spares_gpu_branches():
    assert _unguarded_asserts("x = 1\nfor i in range(2):\n    assert i < 2\n") == [3]
    assert _unguarded_asserts("if torch.cuda.is_available():\n    assert True\nelse:\n    print(1)\n") == []
    assert _unguarded_asserts("assert 1\n") == [1]


def test_index_and_readme_are_in_sync():
    stale = sync.out_of_date()
    assert not stale, (f"out of date: {[str(p.relative_to(ROOT)) for p in stale]}; run python "
                       "scripts/sync_badges.py")


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_index_and_readme_list_the_notebook(path):
    entry = sync.describe(path)
    assert len(entry.goals) >= 3, f"{path.name}: the first cell needs 'You will learn' with 3 bullets"
    readme = (ROOT / "README.md").read_text().split(sync.TABLE_START)[1].split(sync.TABLE_END)[0]
    index = read(sync.INDEX).cells[2].source
    for text, link in ((readme, f"notebooks/{path.name}"), (index, f"({path.name})")):
        assert link in text
        assert _project.binder_url(path.name) in text and _project.colab_url(path.name) in text
        assert entry.goals[0].replace("|", "/") in text


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_notebook_ends_with_next_and_back_to_the_index(path):
    last = read(path).cells[-1]
    names = [p.name for p in NOTEBOOKS]
    later = names[names.index(path.name) + 1:]
    assert last.cell_type == "markdown" and last.id == sync.nav_cell_id(path.name)
    assert f"[{sync.NAV_MARK}](00_index.ipynb)" in last.source
    if later:
        assert "**Next →**" in last.source and f"]({later[0]})" in last.source
    else:
        assert "Next" not in last.source


def test_index_gives_time_prerequisites_and_paths():
    paths = next(c for c in read(sync.INDEX).cells if c.get("id") == "index-paths").source
    assert "what attention is" in paths and "KV cache" in paths
    for p in SERIES:
        assert f"({p.name})" in paths and f"~{sync.describe(p).read_min} min" in paths
    assert paths.count("- **") == len(sync.PATHS) >= 2


def test_reading_time_counts_markdown_words():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("word " * 2100), nbformat.v4.new_code_cell("x = 1 " * 5000)]
    assert kit.reading_minutes(nb) == 15  # 2,100 words at 200 a minute: 11 min, rounded up to 15
    nb.cells = nb.cells[1:]
    assert kit.reading_minutes(nb) == 5


def test_the_badge_line_is_text_links_that_read_offline():
    """No badge images: offline they drew as broken images; two text links read and work anywhere."""
    line = _project.badges_markdown("03_block_tables.ipynb")
    assert "![" not in line and ".svg" not in line
    assert f"[Binder]({_project.binder_url('03_block_tables.ipynb')})" in line
    assert f"[Colab]({_project.colab_url('03_block_tables.ipynb')})" in line
    for path in NOTEBOOKS:
        first = "".join(nbformat.read(path, as_version=4).cells[0].source)
        assert "![" not in first, f"{path.name}: an image in the first cell shows broken offline"


def test_badge_rewrite_replaces_a_stale_url():
    stale = "# 09 · X\n\ntext\n\n[![Binder](https://mybinder.org/badge_logo.svg)](https://example.org/old)"
    fixed = kit.with_badges(stale, "09_x.ipynb")
    assert fixed.split("\n")[-1] == _project.badges_markdown("09_x.ipynb")
    assert fixed.split("\n")[:3] == stale.split("\n")[:3]
    assert kit.with_badges("# 09 · X", "09_x.ipynb").endswith("\n\n" + _project.badges_markdown("09_x.ipynb"))


def test_where_it_runs_comes_from_the_notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 09 · GPU things\n\n**You will learn**\n- a;\n- b;\n- c.\n\nmore"),
        nbformat.v4.new_code_cell("if torch.cuda.is_available():\n    run()\nelse:\n    "
                                  "print('skipped on CPU')"),
    ]
    entry = kit.describe_nb(nb, "09_gpu.ipynb")
    assert (entry.title, entry.goals) == ("GPU things", ["a", "b", "c"])
    assert "1 GPU cell" in entry.cpu and entry.gpu != "not needed"
    nb.metadata["paged_lab"] = {"cpu": "Triton interpreter", "gpu": "compiled kernel, timings"}
    entry = kit.describe_nb(nb, "09_gpu.ipynb")
    assert (entry.cpu, entry.gpu) == ("Triton interpreter", "compiled kernel, timings")
