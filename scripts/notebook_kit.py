"""What the scripts that write the series' links read from a notebook: its badge line and its entry.

``scripts/sync_badges.py`` (the English notebooks, README.md, the index) and ``scripts/build_zh.py``
(the zh-TW twins) both import it; neither imports the other's helpers.

- ``series()``: the notebooks of a folder, in order (``NN_*.ipynb``);
- ``with_badges()``: a first cell with its Binder/Colab badge line set (the badge-line rule);
- ``describe()``: a notebook's ``Entry``: number, title, "You will learn" bullets, where it runs,
  reading time and graded exercises, read from the notebook itself;
- ``badges_for()``: the badges of an entry's row in a series table.

Where a notebook runs: "everything" on CPU unless some code cell checks ``torch.cuda.is_available()``;
a notebook can say it in words with ``metadata["paged_lab"] = {"cpu": "...", "gpu": "..."}``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from paged_lab import _project  # noqa: E402
from paged_lab.kv_math import cdiv  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
# the Binder/Colab line: text links today, badge images (an older line, rewritten) before
BADGE_HINTS = ("mybinder.org/", "colab.research.google.com/")
READING_WPM = 200  # words per minute for technical prose


def series(folder: Path = NOTEBOOKS) -> list[Path]:
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb") if p.is_file())


def with_badges(markdown: str, name: str, want: str | None = None) -> str:
    """``markdown`` (a first cell) with its badge line set to ``want`` (default ``badges_markdown(name)``;
    the zh-TW twins pass their own): the last line holding a badge, appended when there is none."""
    want = _project.badges_markdown(name) if want is None else want
    lines = markdown.split("\n")
    hits = [i for i, line in enumerate(lines) if any(h in line for h in BADGE_HINTS)]
    if hits:
        lines[hits[-1]] = want
        return "\n".join(lines)
    return markdown.rstrip("\n") + "\n\n" + want


@dataclass
class Entry:
    name: str  # file name
    number: str  # "01"
    title: str
    goals: list[str]
    cpu: str
    gpu: str
    read_min: int = 0  # minutes to read its prose at READING_WPM (playgrounds and code not counted)
    exercises: list[str] = field(default_factory=list)  # functions its "Do it yourself" checks grade


def reading_minutes(nb: nbformat.NotebookNode) -> int:
    """Minutes to read a notebook's markdown at READING_WPM, rounded up to 5 (at least 5)."""
    words = sum(len(re.findall(r"\w+", c.source)) for c in nb.cells if c.cell_type == "markdown")
    minutes = cdiv(words, READING_WPM)  # ceil
    return max(5, cdiv(minutes, 5) * 5)


def describe(path: Path) -> Entry:
    """Title, learning goals and hardware needs of one notebook, read from the notebook itself."""
    return describe_nb(nbformat.read(path, as_version=4), path.name)


def _goals(first: str) -> list[str]:
    """The bullets under "You will learn" in a notebook's first cell."""
    goals, in_goals = [], False
    for line in first.split("\n"):
        if "you will learn" in line.lower():
            in_goals = True
        elif in_goals and line.lstrip().startswith(("- ", "* ")):
            goals.append(line.lstrip()[2:].strip().rstrip(";.,"))
        elif in_goals and goals and line.strip():
            break
    return goals


def describe_nb(nb: nbformat.NotebookNode, name: str) -> Entry:
    first = nb.cells[0].source if nb.cells else ""
    title_match = re.search(r"^#\s+(?:\d\d\s*·\s*)?(.+)$", first, flags=re.M)
    title = title_match.group(1).strip() if title_match else Path(name).stem
    gpu_cells = sum("torch.cuda.is_available()" in c.source for c in nb.cells if c.cell_type == "code")
    said = nb.metadata.get("paged_lab", {})
    cpu = said.get("cpu") or ("everything" if not gpu_cells
                              else f"everything but {gpu_cells} GPU cell(s), which skip")
    gpu = said.get("gpu") or ("not needed" if not gpu_cells else f"{gpu_cells} optional cell(s)")
    checks = [c.source for c in nb.cells if "grade" in c.get("metadata", {}).get("tags", [])]
    exercises = [m.group(1) for src in checks for m in [re.search(r"\bcheck\((\w+)", src)] if m]
    return Entry(name, name[:2], title, _goals(first), cpu, gpu, reading_minutes(nb), exercises)


def badges_for(entry: Entry) -> str:
    binder, colab = _project.binder_url(entry.name), _project.colab_url(entry.name)
    return f"[Binder]({binder}) · [Colab]({colab})"  # text links: they read offline too
