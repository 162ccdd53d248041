"""Every number the prose states is checked: "Checked, not claimed" (README), enforced.

A number in an English markdown cell (and in the series tables of README.md and notebooks/00_index.ipynb,
whose rows are copies of each notebook's "You will learn" bullets) is *backed* when

(a) an ``assert`` that a code cell of the same notebook runs names it: a number in the assertion equal to it
    (``== 161``; a percentage also as a fraction, ``< 0.02`` backs "2%"), or a string in the assertion that
    contains it as written (``f"{gb:.0f} GB" == "16 GB"``); nbval runs those asserts, so the number is
    computed by package code and compared; or
(b) it is part of a statement about vLLM's code that docs/vllm_claims.md records for that cell (the claims
    table ties each such number to a line of vllm 0.32.0, and tests/test_vllm_claims.py checks the table); or
(c) it is not a quantity at all (NOT_QUANTITIES: notebook, section and exercise numbers, citations, version
    strings; names such as Llama-3.2-1B or sm_80 are never read as numbers), or it is on the reviewed
    ALLOWED list with its reason (quotations of a paper or of the story).

Numbers inside code spans and code blocks are code, not prose: they spell an argument value or a formula the
learner can run (``max_seq_len = 2048``, ``block_size − 1``), and the code cells check the code. Numbers
written in words ("eight chats") are not found. And a small integer (0-9) is nearly always backed by some
assert of its notebook, so the test bites on what a reader would check: counts, sizes, shares, times.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from scriptkit import ROOT
from test_vllm_claims import CLAIMS, parse_table

NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
SERIES = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_"))  # 01 .. 10

# ------------------------------------------------------------------------------------------ finding numbers
_HIDDEN = [  # what is not prose: code, link targets, HTML tags
    re.compile(r"```.*?```", re.S),
    re.compile(r"(?m)^(?: {4}|\t).*$"),           # an indented code block
    re.compile(r"`[^`\n]*`"),
    re.compile(r"\]\([^)]*\)"),
    re.compile(r"<[^>]+>"),
]
# Numbers that count nothing, with the reason (reviewed: keep it short).
NOT_QUANTITIES = {
    r"^#+ (?:\d\d ·|(?:Step |Exercise )?\d+(?:\.\d+)?[a-z]?\b)":
        "a title's notebook, section, step or exercise number",
    r"(?i:\bnotebooks?(?:\sfrom)?\s\d\d(?:\s?[–-]\s?\d\d)?)": "a notebook of the series, by its number",
    r"\d\d ·|\b\d\d(?= →)|(?<=→ )\d\d\b": "the series' numbering in the navigation and the reading paths",
    r"(?i:\bsections? \d+(?:\.\d+)?[a-z]?(?:(?:\s?[–-]\s?|,? and |, )\d+(?:\.\d+)?[a-z]?)*)":
        "a section number",
    r"(?<=; )\d\.\d(?=:)": "a section of the cited paper, in a Read further list",
    r"\b(?:SOSP|OSDI) \d{4}\b|arXiv:\d+\.\d+": "a citation: venue and year, arXiv number",
    r"\((?:(?:January|February|March|April|May|June|July|August|September|October|November|December) )?"
    r"(?:19|20)\d\d\)": "a citation's date: (June 2023), (2023)",
    r"(?i:\bvllm \d+\.\d+\.\d+)": "the pinned vLLM version",
}
_NOT_QUANTITY = re.compile("|".join(f"(?:{p})" for p in NOT_QUANTITIES), re.M)
# A number: digits with thousands separators and decimals, a range (20–30), a % after it; 1.5x, 16 GB, 2k.
# Never the digits of a name: not after a letter, _ - . / (Llama-3.2-1B, sm_80, fp8, V1), nor before a
# letter unless it is a unit (8B is 8 billion; 135M in SmolLM2-135M follows a '-').
_NUMBER = re.compile(r"(?<![\w.\-/])~?(\d[\d,]*(?:\.\d+)?)(?:\s?[–-]\s?(\d[\d,]*(?:\.\d+)?))?(\s?%)?"
                     r"(?![\w.]*[A-Za-z_])"
                     r"|(?<![\w.\-/])(\d+(?:\.\d+)?)(?=(?:x|×|k|K|M|B|GB|GiB|KiB|MB|MiB|ms)\b)")

NB02, NB03, NB07 = "02_contiguous_vs_paged", "03_block_tables", "07_paged_engine_real_model"
PAPER = "the PagedAttention paper's measurement, quoted as the paper's"
# Numbers that stand as quotations, with the reason (reviewed: keep it short): (notebook, cell id, number)
ALLOWED = {
    (NB02, "7b47b5b0", "40"): PAPER + " (~20–40% of KV memory used)",
    (NB02, "7b47b5b0", "4"): PAPER + " (under 4% wasted)",
    (NB02, "62791a73", "40"): PAPER + " (~20–40% of KV memory used)",
    (NB02, "599cddbd", "161"): PAPER + " (the ShareGPT trace's mean prompt)",
    (NB02, "599cddbd", "338"): PAPER + " (the ShareGPT trace's mean output)",
    (NB03, "03-17", "20"): PAPER + " (its kernel's 20–26% overhead)",
    (NB03, "03-17", "26"): PAPER + " (its kernel's 20–26% overhead)",
    (NB03, "40121d99", "256"): "nano-vllm's block size, another project's (cell 03-21 says why)",
    ("00_index", "index-3", "2"): "Binder's memory limit, a property of mybinder.org",
}
# Measurements a notebook quotes from the record, since the reader's machine cannot reproduce them: each
# must appear, as written, in the file that records it. (notebook stem, cell id, number) -> (file, text)
RECORDED = {
    (NB07, "07-steptime-read", "31.8"): ("docs/benchmarks.md", "31.8 -> "),
    (NB07, "07-steptime-read", "37.3"): ("docs/benchmarks.md", "37.3 -> "),
    (NB07, "07-steptime-read", "15"): ("benchmarks/decode_step_bench.py", "default=15"),
    ("10_speculative_decoding", "10-s5", "1.03"): ("docs/benchmarks.md", "**1.03x**"),
    ("10_speculative_decoding", "10-s5", "1.9"): ("docs/benchmarks.md", "about **1.9x**"),
}


@dataclass(frozen=True)
class Number:
    text: str                 # as written: "~20–30%", "2,048", "1.5x"
    values: tuple[str, ...]   # its numbers as written: ("20", "30"), ("2,048",)
    percent: bool
    context: str


def prose(markdown: str) -> str:
    """The prose of a markdown cell: code, link targets and tags blanked out."""
    for pattern in _HIDDEN:
        markdown = pattern.sub(" ", markdown)
    return markdown


def numbers(markdown: str) -> list[Number]:
    """Every number the prose of ``markdown`` states as a quantity, in order."""
    text = _NOT_QUANTITY.sub(" ", prose(markdown))
    found = []
    for m in _NUMBER.finditer(text):
        values = tuple(g.rstrip(",") for g in (m[1], m[2], m[4]) if g)
        context = text[max(0, m.start() - 40): m.end() + 20].replace("\n", " ")
        found.append(Number(m[0].strip(), values, bool(m[3]), context))
    return found


# ------------------------------------------------------------------------------------------ what backs them
@dataclass
class Backing:
    values: set[float]   # every number in an assert of the notebook
    strings: list[str]   # every string in an assert of the notebook
    claims: dict[str, set[float]]  # cell id -> the numbers of the docs/vllm_claims.md statements taught there

    def backs(self, cell_id: str, value: str, percent: bool) -> bool:
        v = float(value.replace(",", ""))
        wanted = (v, v / 100) if percent else (v,)
        known = self.values | self.claims.get(cell_id, set())
        written = re.compile(rf"(?<![\d.]){re.escape(value)}(?!\d)")
        return (any(math.isclose(w, x, rel_tol=1e-9) for w in wanted for x in known)
                or any(written.search(s) for s in self.strings))


def asserted(code_cells: list[str]) -> tuple[set[float], list[str]]:
    """The numbers and strings inside the ``assert`` statements of these code cells."""
    values, strings = set(), []
    for source in code_cells:
        python = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(python)):
            if not isinstance(node, ast.Assert):
                continue
            for part in ast.walk(node):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    strings.append(part.value)
                elif isinstance(part, ast.Constant) and isinstance(part.value, (int, float)):
                    values.add(float(part.value))
    return values, strings


def claims_by_cell(stem: str) -> dict[str, set[float]]:
    """The numbers each cell of this notebook states about vLLM, as docs/vllm_claims.md records them."""
    out: dict[str, set[float]] = {}
    for row in parse_table(CLAIMS.read_text(encoding="utf-8")):
        stated = {float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", row.statement)}
        for nb, cell_id in row.cells:
            if nb == stem:
                out.setdefault(cell_id, set()).update(stated)
    return out


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def backing(nb: dict, stem: str) -> Backing:
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return Backing(*asserted(code), claims_by_cell(stem))


def unbacked(stem: str, cells: list[tuple[str, str]], backed: Backing) -> list[str]:
    """'stem cell: number in ...context...' for every number of these (cell id, markdown) cells that
    nothing backs."""
    bad = []
    for cell_id, markdown in cells:
        for n in numbers(markdown):
            missing = [v for v in n.values if not backed.backs(cell_id, v, n.percent)
                       and (stem, cell_id, v) not in ALLOWED and (stem, cell_id, v) not in RECORDED]
            if missing:
                bad.append(f"{stem} {cell_id}: {', '.join(missing)} in ...{n.context}...")
    return bad


def markdown_cells(nb: dict) -> list[tuple[str, str]]:
    return [(c["id"], "".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown"]


def table_rows(markdown: str) -> dict[str, str]:
    """The series table's rows ('| 02 | [title](...) | bullets | ...'), by notebook number."""
    return {m[1]: m[2] for m in re.finditer(r"(?m)^\| (\d\d) \| \[[^\]]*\]\([^)]*\) \|(.*)$", markdown)}


# ------------------------------------------------------------------------------------------ the tests
FIX = ("assert it in a check cell of the notebook (a number in the assert equal to it, or the string as the "
       "prose writes it), state it without digits, or, for a quotation, add it to ALLOWED with its reason")


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_every_number_in_a_notebooks_prose_is_asserted(path):
    nb = load(path)
    bad = unbacked(path.stem, markdown_cells(nb), backing(nb, path.stem))
    assert not bad, f"numbers no assert backs ({FIX}):\n" + "\n".join(bad)


def _rows_as_first_cells(markdown: str) -> list[tuple[Path, list[tuple[str, str]]]]:
    """Each row of a series table, as the first cell of its notebook (the row copies its learn bullets)."""
    out = []
    for number, row in table_rows(markdown).items():
        (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
        out.append((path, [(load(path)["cells"][0]["id"], row)]))
    return out


@pytest.mark.parametrize("where", ["README.md", "notebooks/00_index.ipynb"])
def test_every_number_in_the_series_tables_is_asserted_in_its_notebook(where):
    text = (README.read_text(encoding="utf-8") if where == "README.md"
            else dict(markdown_cells(load(NOTEBOOKS / "00_index.ipynb")))["index-2"])
    rows = _rows_as_first_cells(text)
    assert len(rows) == len(SERIES), f"{where}: expected one table row per notebook"
    bad = [b for path, cells in rows for b in unbacked(path.stem, cells, backing(load(path), path.stem))]
    assert not bad, f"{where}: numbers no assert of their notebook backs ({FIX}):\n" + "\n".join(bad)


def test_the_index_states_no_number_outside_its_tables_unless_asserted():
    """00's prose besides the series table; its reading-paths cell is written by scripts/sync_badges.py from
    measured run times and word counts (tests/test_notebook_conventions.py checks it), so it is skipped."""
    nb = load(NOTEBOOKS / "00_index.ipynb")
    cells = [(cid, src) for cid, src in markdown_cells(nb) if cid not in ("index-2", "index-paths")]
    bad = unbacked("00_index", cells, backing(nb, "00_index"))
    assert not bad, f"numbers no assert backs ({FIX}):\n" + "\n".join(bad)


def test_the_allow_list_is_short_and_every_entry_is_still_used():
    assert len(ALLOWED) <= 12, "the allow-list is for quotations; assert the rest"
    stale = []
    for stem, cell_id, value in [*ALLOWED, *RECORDED]:
        cells = dict(markdown_cells(load(NOTEBOOKS / f"{stem}.ipynb")))
        if not any(value in n.values for n in numbers(cells.get(cell_id, ""))):
            stale.append((stem, cell_id, value))
    assert not stale, f"allow-list entries whose number the cell no longer states: {stale}"


def test_every_recorded_measurement_is_in_its_record():
    missing = [f"{key}: {text!r} not in {file}" for key, (file, text) in RECORDED.items()
               if text not in (ROOT / file).read_text(encoding="utf-8")]
    assert not missing, "a quoted measurement left its record; quote the new one:\n" + "\n".join(missing)


# ------------------------------------------------------------------------------------------ the test can fail
def test_a_new_unbacked_number_fails_and_an_assert_backs_it():
    nb = load(NOTEBOOKS / "02_contiguous_vs_paged.ipynb")
    claim = ("new-cell", "The wall now holds 4,321 lockers, and 37.5% of them sit idle.")
    before = unbacked("02_contiguous_vs_paged", [claim], backing(nb, "02_contiguous_vs_paged"))
    assert [b.split(" in ")[0] for b in before] == ["02_contiguous_vs_paged new-cell: 4,321",
                                                    "02_contiguous_vs_paged new-cell: 37.5"]
    nb["cells"].append({"cell_type": "code", "source": "assert wall == 4321 and f'{idle:.1%}' == '37.5%'"})
    assert unbacked("02_contiguous_vs_paged", [claim], backing(nb, "02_contiguous_vs_paged")) == []


def test_a_comment_or_a_print_backs_nothing():
    """Only what an assert compares counts: a number in a comment or a printed string is not checked."""
    values, strings = asserted(["x = 4321  # 4321 lockers\nprint('4321')\nassert x > 0"])
    assert values == {0.0} and strings == []


def test_numbers_finds_quantities_not_names_or_code():
    text = ("Llama-3.2-1B in bf16 on sm_80 (vLLM V1, vllm 0.32.0, notebook 04, SOSP 2023): `block_size − 1` "
            "and ~20–30% of 2,048 slots, 1.5x faster, 8.03 B parameters.\n\n## 3. Title\n\n"
            "    slot = 16 * 4\n")
    assert [n.values for n in numbers(text)] == [("20", "30"), ("2,048",), ("1.5",), ("8.03",)]
    assert numbers("~20–30% of it")[0].percent and not numbers("2,048 slots")[0].percent
