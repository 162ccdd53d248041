"""paged_lab.classroom.glossary: one source of the series' words, the docs page it writes, and the
notebooks' use of it.

What "a notebook's summary uses a term" means here, precisely:
- every name in the notebook's ``glossary.table([...])`` call (its code cells, parsed with ``ast``), and
- every **bold** phrase in its summary (the markdown cell that starts with ``## Summary``).
Each must be a term of ``paged_lab.classroom.glossary`` (its serving name or an alias); a bold summary
term must also be one of the rows the notebook's table shows, so the reader finds it explained right
there.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from scriptkit import load_script

from paged_lab.classroom import glossary
from paged_lab.classroom.glossary import TERMS, lookup, table
from paged_lab.viz import i18n

ROOT = Path(__file__).resolve().parents[1]
SERIES = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_"))
BOLD = re.compile(r"\*\*(.+?)\*\*")


def _script():
    return load_script("scripts/build_glossary.py")


def table_calls(nb) -> list[list[str]]:
    """The literal name lists of every ``glossary.table([...])`` call in the notebook's code cells."""
    calls = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "table"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "glossary"):
                calls.append([ast.literal_eval(e) for e in node.args[0].elts])
    return calls


def summary_terms(nb) -> list[str]:
    cells = [c for c in nb.cells if c.cell_type == "markdown" and c.source.lstrip().startswith("## Summary")]
    assert len(cells) == 1, "expected exactly one markdown cell starting with '## Summary'"
    return BOLD.findall(cells[0].source)


def test_every_term_is_complete_and_unique():
    names = [t.name for t in TERMS]
    assert len(names) == len(set(names))
    for t in TERMS:
        assert all(s.strip() for s in (t.name, t.story, t.story_zh, t.meaning)), t
        assert "\n" not in t.meaning and t.meaning.endswith((".", ")")), f"{t.name}: one line, a sentence"
        assert lookup(t.name) is t and all(lookup(a) is t for a in t.aliases)


def test_the_one_metaphor_mapping():
    """The story's own sentence: a locker is a page, a block
    (「一格「頁」（block）可以放固定數量的 token，例如 16 個」); a place inside a locker is a slot.
    No row of lockers is a block, and the story has no block_size 1."""
    assert (lookup("block").story, lookup("block").story_zh) == ("a locker: one page", "一格「頁」")
    assert lookup("slot").story == "a place in a locker" and lookup("slot").story_zh == "格裡的一個位置"
    assert "16" in lookup("block_size").story
    assert "block_size 1" not in glossary.__doc__ and "「一格等於一頁」" in glossary.__doc__
    assert (lookup("block table").story, lookup("block table").story_zh) == ("Ah-Ye's lookup table",
                                                                             "阿頁的對照表")


EVERY_NOTEBOOK = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", EVERY_NOTEBOOK, ids=[p.stem for p in EVERY_NOTEBOOK])
def test_notebook_keeps_the_one_metaphor(path):
    """A locker is one slot, a row of lockers (a page) is a block, Ah-Ye's lookup table is the block table:
    in every cell (prose, figure titles, comments) of every notebook."""
    nb = nbformat.read(path, as_version=4)
    problems = [f"cell {c.get('id')}: {p}" for c in nb.cells for p in glossary.metaphor_problems(c.source)]
    assert not problems, f"{path.name} breaks the metaphor: {problems}"


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md", "docs/glossary.md"])
def test_docs_keep_the_one_metaphor(doc):
    assert glossary.metaphor_problems((ROOT / doc).read_text()) == []


def test_metaphor_check_can_fail():
    text = "The lockers (KV slots) and their ledger; a ticket lists them; Ah-Ye's notebook; one page (slot)."
    found = glossary.metaphor_problems(text)
    assert len(found) == 5 and any("a locker is a page (a block), not a slot" in p for p in found)
    assert "'ledger': say Ah-Ye's lookup table" in found[0]
    for wrong in ("She hands out a row of lockers (a block) at a time.",
                  "The seed story draws one locker per page, i.e. block_size = 1.",
                  "a locker is a page of block_size 1",
                  "one locker at a time (block_size 1, as in the story)"):
        assert glossary.metaphor_problems(wrong), wrong
    kept = ("Ah-Ye's lookup table lists the lockers (blocks) in order. The simulator gives each locker room "
            "for one piece (`block_size = 1`): a way of drawing, not the story's numbers.")
    assert glossary.metaphor_problems(kept) == []


def test_lookup_and_table_refuse_unknown_names():
    with pytest.raises(KeyError, match="block tabel.*did you mean"):
        lookup("block tabel")
    with pytest.raises(TypeError, match="list of term names"):
        table("block")
    with pytest.raises(ValueError, match="repeats"):
        table(["block", "blocks"])
    with pytest.raises(ValueError, match="at least one"):
        table([])


def test_table_renders_the_story_word_name_and_meaning_in_the_learners_language():
    """Issue 38: an English reader sees the story's English words, no Chinese column, no ※ and no raw
    backticks; a Chinese reader sees the Chinese words (※ where they are the story's own), KV Cache as
    the series writes it, and no English story column."""
    t = table(["slot", "block table", "block", "KV cache"])
    html, md = t._repr_html_(), t._repr_markdown_()
    for text in ("a place in a locker", "slot", "Ah-Ye's lookup table", "a locker: one page"):
        assert text in html and text in md
    assert "故事" not in html and "※" not in html and "一格" not in md and "阿頁" not in md
    assert "<code>block_size</code>" in html and "`" not in html
    assert md.startswith("| Story | Serving name | What it is |")
    assert md.count("\n") == 5  # header, rule, four rows
    i18n.use("zh-TW")
    try:
        html, md = table(["block", "KV cache"])._repr_html_(), table(["block", "KV cache"])._repr_markdown_()
    finally:
        i18n.use("en")
    assert md.startswith("| 故事 | 正式名稱 | 說明 |") and "一格「頁」 ※" in md and "**KV Cache**" in md
    assert "a locker" not in md and "故事（英文）" not in html and "※ 故事裡原本的說法" in html


def test_docs_glossary_is_up_to_date():
    assert _script().main(["--check"]) == 0, "docs/glossary.md is stale: run python scripts/build_glossary.py"
    text = (ROOT / "docs" / "glossary.md").read_text()
    assert all(f"**{t.name}**" in text for t in TERMS)


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_notebook_summary_uses_only_glossary_terms(path):
    nb = nbformat.read(path, as_version=4)
    calls = table_calls(nb)
    assert len(calls) == 1, f"{path.name}: expected one glossary.table([...]) call, found {len(calls)}"
    unknown = [n for n in calls[0] if not glossary.knows(n)]
    assert not unknown, f"{path.name}: glossary.table names terms the glossary lacks: {unknown}"
    shown = {lookup(n).name for n in calls[0]}
    for term in summary_terms(nb):
        bolds = f"{path.name}: the summary bolds {term!r}"
        assert glossary.knows(term), f"{bolds}, which paged_lab.classroom.glossary lacks"
        assert lookup(term).name in shown, f"{bolds} but its glossary table omits it"


def test_the_check_can_fail():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("## Summary\n\nThe **flux capacitor** holds KV."),
                nbformat.v4.new_code_cell('glossary.table(["slot", "warp drive"])')]
    assert table_calls(nb) == [["slot", "warp drive"]]
    assert summary_terms(nb) == ["flux capacitor"] and not glossary.knows("flux capacitor")
    assert not glossary.knows("warp drive")


# A story's words, and the first notebook that no longer needs them: the lockers (02) have taught
# slot, block and block table by the end of 03; the three windows are notebook 05's own story. A
# "sliding window" (notebook 08: layers that attend to the last W tokens) is a serving term, not the story.
STORY_WORDS = {"the station's lockers": (r"\blockers?\b|Ah-Ye|阿頁", 4),
               "the service windows": (r"(?<!sliding\s)(?<!sliding-)\bwindows?\b", 6)}


def story_leftovers(path) -> list[str]:
    """Where a notebook past a story's own uses its words outside its opening cell (the hook may recall
    the story in a sentence) and outside the links to other notebooks (their titles name the stories)."""
    nb = nbformat.read(path, as_version=4)
    number = int(path.name[:2])
    found = []
    for i, cell in enumerate(nb.cells):
        if i == 0 or "**Next →**" in cell.source:
            continue
        for story, (words, from_notebook) in STORY_WORDS.items():
            if number >= from_notebook and re.search(words, cell.source, flags=re.I):
                line = next(x for x in cell.source.splitlines() if re.search(words, x, flags=re.I))
                found.append(f"cell {cell.get('id')} ({story}): {line.strip()[:80]}")
    return found


@pytest.mark.parametrize("path", EVERY_NOTEBOOK, ids=[p.stem for p in EVERY_NOTEBOOK])
def test_the_metaphor_is_dropped_once_the_real_term_is_learned(path):
    """Issue 20: after the notebook that teaches the real terms, prose, figure titles and comments say
    block, slot, block table and running sequence; the story is recalled in the opening cell only."""
    assert story_leftovers(path) == []


def test_the_story_leftover_check_can_fail(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 07 · X\n\nAh-Ye's lockers, recalled in the hook."),
                nbformat.v4.new_code_cell('fig(title="Six requests through three windows")'),
                nbformat.v4.new_markdown_cell("A sliding window of 128; sliding-window layers."),
                nbformat.v4.new_markdown_cell("**Next →** [05 · the three windows](05_x.ipynb)")]
    path = tmp_path / "07_x.ipynb"
    nbformat.write(nb, path)
    assert [p.split(" (")[1].split(")")[0] for p in story_leftovers(path)] == ["the service windows"]
