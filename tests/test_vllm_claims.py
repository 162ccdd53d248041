"""Every statement about vLLM is tied to vLLM's code: docs/vllm_claims.md, the table of record, against the
notebooks and against tests/data/vllm_source_index.json (the names each cited file of vllm 0.32.0 defines).

No vLLM needed: the index is recorded by scripts/index_vllm_source.py under the vLLM venv (make vllm-index)
and committed, as the scheduler traces are (docs/vllm_parity.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
from scriptkit import ROOT, load_script

from paged_lab.classroom import glossary

CLAIMS = ROOT / "docs" / "vllm_claims.md"
INDEX = ROOT / "tests" / "data" / "vllm_source_index.json"
TRACES = ROOT / "tests" / "data" / "vllm_v1_traces.json"
HYBRID_TRACES = ROOT / "tests" / "data" / "vllm_v1_hybrid_traces.json"
OFFLOAD_TRACES = ROOT / "tests" / "data" / "vllm_offload_traces.json"
SPEC_TRACES = ROOT / "tests" / "data" / "vllm_v1_spec_traces.json"
NOTEBOOKS = ROOT / "notebooks"
REINDEX = ("re-index the cited vLLM files: make vllm-index (it runs scripts/index_vllm_source.py under the "
           "vLLM venv, make vllm-venv; VLLM_VENV=/path reuses one) and commit "
           "tests/data/vllm_source_index.json")
MENTIONS_VLLM = re.compile(r"\bvLLM\b")

# English cells that say "vLLM" but state nothing about its code, with the reason (reviewed; keep it short).
ALLOWED = {
    ("02_contiguous_vs_paged", "57d2343b"): "Read further: links to vLLM's documentation pages only",
    ("03_block_tables", "03-17"): "quotes the vLLM paper's measured kernel overhead, not vLLM's code",
    ("05_continuous_batching", "b0bce778"): "points at the vLLM and Orca papers' measurements",
    ("04_copy_on_write_and_prefix_sharing",
     "04-quiz-title"): "only says V0/V1 questions are labelled; the questions are rows",
    ("05_continuous_batching", "05-quiz-title"): "only says V0/V1 questions are labelled; the "
                                                 "questions are rows",
    ("07_paged_engine_real_model", "07-quiz-title"): "only says V0/V1 questions are labelled; the "
                                                     "questions are rows",
    ("08_kv_memory_today", "08-quiz-title"): "only says V1 questions are labelled; the questions are rows",
    ("09_kv_beyond_one_gpu", "09-quiz-title"): "only says V1 questions are labelled; the questions are rows",
    ("10_speculative_decoding", "10-quiz-title"): "only says V1 questions are labelled; the questions are "
                                                  "rows",
}


# ------------------------------------------------------------------------------------------ the table
@dataclass
class Row:
    id: str
    statement: str
    taught: str
    source: str
    checked: str
    cells: list[tuple[str, str]] = field(default_factory=list)  # (notebook stem, cell id)
    terms: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    sources: list[tuple[str, list[str]]] = field(default_factory=list)  # (vLLM file, names)


def notebook_stem(number: str) -> str | None:
    found = sorted(NOTEBOOKS.glob(f"{number}_*.ipynb"))
    return found[0].stem if len(found) == 1 else None


def parse_row(line: str) -> Row:
    """One table line: | id | statement | taught in | vLLM 0.32.0 source | checked by |."""
    parts = [p.strip() for p in line.strip().strip("|").split(" | ")]
    if len(parts) != 5:
        raise ValueError(f"expected 5 columns, got {len(parts)}: {line[:80]}")
    row = Row(*parts)
    for seg in filter(None, (s.strip() for s in row.taught.split(";"))):
        if m := re.fullmatch(r"nb(\d\d) (.+)", seg):
            stem = notebook_stem(m[1]) or f"nb{m[1]} (no such notebook)"
            row.cells += [(stem, c.strip()) for c in m[2].split(",")]
        elif seg.startswith("glossary:"):
            row.terms += [t.strip() for t in seg.removeprefix("glossary:").split(",")]
        else:
            row.files.append(seg.strip("`"))
    for ticks in source_segments(row.source):
        if not ticks or not ticks[0].startswith("vllm/"):
            raise ValueError(f"{row.id}: each ';' part of the source column must start with "
                             "a `vllm/...` file")
        row.sources.append((ticks[0], ticks[1:]))
    return row


def source_segments(text: str) -> list[list[str]]:
    """The source column's parts (split at ';' outside parentheses), each as its backticked words outside
    parentheses: the file, then the names defined there. Backticks inside "(...)" quote code or lines."""
    parts, ticks, depth, in_tick, word = [], [], 0, False, ""
    for ch in text + ";":
        if in_tick:
            if ch == "`":
                in_tick = False
                if depth == 0:
                    ticks.append(word)
            else:
                word += ch
        elif ch == "`":
            in_tick, word = True, ""
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == ";" and depth == 0:
            if ticks or parts == []:
                parts.append(ticks)
            ticks = []
    return [p for p in parts if p]


def parse_table(text: str) -> list[Row]:
    return [parse_row(line) for line in text.splitlines() if re.match(r"\| C\d+ \|", line)]


def english_cells() -> dict[tuple[str, str], str]:
    cells = {}
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for c in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            cells[(path.stem, c["id"])] = "".join(c["source"])
    return cells


def load_traces() -> dict:
    """The scheduler traces; a row's "trace:" may also name a scenario of the hybrid (two-group), the CPU
    offloading (tests/test_vllm_offload_parity.py) or the speculative (n-gram drafts) traces."""
    traces = json.loads(TRACES.read_text(encoding="utf-8"))
    for more in (HYBRID_TRACES, OFFLOAD_TRACES, SPEC_TRACES):
        traces["scenarios"] += json.loads(more.read_text(encoding="utf-8"))["scenarios"]
    return traces


def row_problems(row: Row, index: dict, cells: dict, terms: set[str], traces: dict) -> list[str]:
    """What is wrong with one row: unknown cells, terms or files; vLLM files or names not in the index;
    no check, or a trace scenario or setting that was not recorded."""
    bad = []
    if not (row.cells or row.terms or row.files):
        bad.append(f"{row.id}: taught nowhere")
    bad += [f"{row.id}: no cell {cid!r} in notebooks/{nb}.ipynb" for nb,
            cid in row.cells if (nb, cid) not in cells]
    bad += [f"{row.id}: no glossary term {t!r}" for t in row.terms if t not in terms]
    bad += [f"{row.id}: no file {f}" for f in row.files if not (ROOT / f).is_file()]
    if not row.sources:
        bad.append(f"{row.id}: names no vLLM file")
    for path, names in row.sources:
        if path not in index["files"]:
            bad.append(f"{row.id}: {path} is not in tests/data/vllm_source_index.json ({REINDEX})")
            continue
        if not names:
            bad.append(f"{row.id}: {path}: name the function, class or field it describes")
        defined = set(index["files"][path])
        bad += [f"{row.id}: {path} defines no {n!r} in vllm {index['vllm_version']}" for n in names
                if n not in defined]
    scenarios = {s["name"] for s in traces["scenarios"]}
    # "trace: a, b; source: ... ; ..." -- a ';' starts a new check only before one of the three keywords
    checks = [s.strip() for s in re.split(r";\s*(?=trace:|trace config:|source:)", row.checked) if s.strip()]
    if not checks:
        bad.append(f"{row.id}: says nothing about how it is checked")
    for check in checks:
        if check.startswith("trace config:"):
            keys = [k.strip() for k in check.removeprefix("trace config:").split(",")]
            bad += [f"{row.id}: the traces record no setting {k!r}" for k in keys
                    if k not in traces["vllm_config"]]
        elif check.startswith("trace:"):
            names = [n.strip().split(" ")[0] for n in check.removeprefix("trace:").split(",")]
            bad += [f"{row.id}: no recorded scenario {n!r}" for n in names if n not in scenarios]
        elif not check.startswith("source:"):
            bad.append(f"{row.id}: a check is 'trace: ...', 'trace config: ...' or 'source: ...', "
                       f"not {check[:40]!r}")
    return bad


@pytest.fixture(scope="module")
def index() -> dict:
    return json.loads(INDEX.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return parse_table(CLAIMS.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ the tests
def test_the_index_is_of_the_pinned_vllm(index):
    assert index["vllm_version"] == load_traces()["vllm_version"] == "0.32.0"
    assert index["generator"] == "scripts/index_vllm_source.py"
    assert all(names == sorted(set(names)) for names in index["files"].values())


def test_the_table_has_unique_ids_and_rows(rows):
    ids = [r.id for r in rows]
    assert len(rows) >= 30 and len(ids) == len(set(ids)), ids


def test_every_row_names_files_and_names_present_in_vllm(rows, index):
    """(a), (d): each row's vLLM files and names exist in vllm 0.32.0; its cells, terms
    and files exist here."""
    cells, terms, traces = english_cells(), {t.name for t in glossary.TERMS}, load_traces()
    problems = [p for r in rows for p in row_problems(r, index, cells, terms, traces)]
    assert not problems, "docs/vllm_claims.md:\n" + "\n".join(problems)


def test_every_cited_vllm_file_is_indexed_and_exists(index):
    """(b): a new citation of a vLLM file fails until the index is rewritten; a file 0.32.0 lacks fails."""
    indexer = load_script("scripts/index_vllm_source.py")
    cited = indexer.cited_files(ROOT)
    unindexed = {f: where for f,
                 where in cited.items() if f not in index["files"] and f not in index["missing"]}
    assert not unindexed, f"cited but not indexed: {unindexed}; {REINDEX}"
    assert not index["missing"], (f"cited files that vllm {index['vllm_version']} does not have: "
                                  f"{index['missing']} (cited in "
                                  f"{[cited.get(f) for f in index['missing']]}): fix the citation")
    stale = sorted(set(index["files"]) - set(cited))
    assert not stale, f"indexed but cited nowhere any more: {stale}; delete their entries, or {REINDEX}"


def coverage(cells: dict, rows: list[Row], allowed: dict) -> tuple[list, list]:
    """(cells that mention vLLM in no row and not allow-listed, allow-list entries that are stale)."""
    covered = {c for r in rows for c in r.cells}
    mentioning = {k for k, src in cells.items() if MENTIONS_VLLM.search(src)}
    return (sorted(mentioning - covered - set(allowed)),
            sorted(k for k in allowed if k not in mentioning or k in covered))


def test_every_english_cell_that_mentions_vllm_is_in_the_table(rows):
    """(c): a cell that says "vLLM" is taught in a row, or allow-listed above with the reason."""
    missing, stale = coverage(english_cells(), rows, ALLOWED)
    assert not missing, ("cells that state something about vLLM and are in no row of docs/vllm_claims.md "
                         "(add the claim with its vLLM file and function, or allow-list the cell "
                         f"with why): {missing}")
    assert not stale, f"allow-listed cells that no longer mention vLLM, or that a row covers: {stale}"


def test_the_coverage_check_can_fail():
    cells = {("03_x", "a"): "vLLM V1 does it", ("03_x", "b"): "no mention", ("03_x", "c"): "vLLM's docs"}
    rows = [_fake_row("`vllm/v1/core/block_pool.py` `BlockPool`")]
    rows[0].cells = [("03_x", "a")]
    assert coverage(cells, rows, {}) == ([("03_x", "c")], [])
    assert coverage(cells, rows, {("03_x", "c"): "links", ("03_x", "b"): "stale"}) == ([], [("03_x", "b")])


def test_the_claims_doc_is_linked_from_the_series():
    assert "docs/vllm_claims.md" in (NOTEBOOKS / "07_paged_engine_real_model.ipynb").read_text(
        encoding="utf-8")


# --------------------------------------------------------------------------------------- the checker can fail
def _fake_index() -> dict:
    return {"vllm_version": "0.32.0", "files": {"vllm/v1/core/block_pool.py": ["BlockPool",
                                                                               "BlockPool.free_blocks"]},
            "missing": []}


def _fake_row(source: str, checked: str = "trace: reuse_lifo_caching_off", taught: str = "nb03 03-02") -> Row:
    return parse_row(f"| C99 | a planted claim | {taught} | {source} | {checked} |")


def _problems(row: Row) -> list[str]:
    return row_problems(row, _fake_index(), english_cells(), {t.name for t in glossary.TERMS}, load_traces())


def test_the_checker_accepts_a_correct_row():
    assert _problems(_fake_row("`vllm/v1/core/block_pool.py` `BlockPool.free_blocks` (774)")) == []


@pytest.mark.parametrize("source, checked, taught, expected", [
    ("`vllm/v1/core/block_pool.py` `BlockPool.free_block`", "source: x", "nb03 03-02",
     "defines no 'BlockPool.free_block'"),
    ("`vllm/v1/core/block_manager.py` `BlockAllocator.allocate`", "source: x", "nb03 03-02",
     "is not in tests/data"),
    ("`vllm/v1/core/block_pool.py` (774)", "source: x", "nb03 03-02", "name the function"),
    ("`vllm/v1/core/block_pool.py` `BlockPool`", "trace: reuse_fifo", "nb03 03-02",
     "no recorded scenario 'reuse_fifo'"),
    ("`vllm/v1/core/block_pool.py` `BlockPool`", "trace config: swap_space", "nb03 03-02",
     "no setting 'swap_space'"),
    ("`vllm/v1/core/block_pool.py` `BlockPool`", "it is true", "nb03 03-02", "a check is"),
    ("`vllm/v1/core/block_pool.py` `BlockPool`", "source: x", "nb03 03-99", "no cell '03-99'"),
    ("`vllm/v1/core/block_pool.py` `BlockPool`", "source: x", "glossary: free list",
     "no glossary term 'free list'"),
])
def test_the_checker_catches_a_planted_mistake(source, checked, taught, expected):
    problems = _problems(_fake_row(source, checked, taught))
    assert any(expected in p for p in problems), problems


def test_the_citation_finder_skips_other_projects_and_urls():
    indexer = load_script("scripts/index_vllm_source.py")
    text = ("`BlockPool.free_blocks` in `vllm/v1/core/block_pool.py`; nano-vllm's "
            "`nanovllm/engine/block_manager.py`; "
            "[link](https://github.com/vllm-project/vllm/blob/main/vllm/v1/engine/parallel_sampling.py); "
            "`vllm/v1/core/` is a folder")
    assert indexer.citations_in(text) == {"vllm/v1/core/block_pool.py"}
    assert indexer.citations_in("(`v1/core/block_pool.py:774`)", relative=True) == {
        "vllm/v1/core/block_pool.py"}


def test_the_indexer_names_classes_methods_fields_and_module_assignments():
    indexer = load_script("scripts/index_vllm_source.py")
    src = ("X = 1\nif True:\n    Y: int = 2\nclass A:\n    f: int = 0\n    g = 1\n    def m(self):\n        "
           "z = 3\n    class B:\n        def n(self): ...\ndef h(): ...\ntry:\n    W = 0\nexcept "
           "ImportError:\n    V = 1\n")
    assert indexer.defined_names(src) == ["A", "A.B", "A.B.n", "A.f", "A.g", "A.m", "V", "W", "X", "Y", "h"]
