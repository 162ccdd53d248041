"""Generate the zh-TW edition (``notebooks/zh-TW/``) from the English notebooks and a catalogue.

    python scripts/build_zh.py            # write notebooks/zh-TW/NN_*.ipynb
    python scripts/build_zh.py --check    # change nothing; exit 1 if a translation is stale or missing,
                                          # breaks the term table (TERM), or a committed zh-TW notebook
                                          # differs from what this writes
    python scripts/build_zh.py --stale    # list stale and missing cells with their English text (translators)
    python scripts/build_zh.py --terms    # print the term table (translators; never shown to learners)

One source, two languages: the code cells of a zh-TW notebook are the English notebook's, copied. Only
the markdown cells are translated, in ``notebooks/i18n/zh-TW/<english stem>.json``:

    {"notebook": "03_block_tables.ipynb",
     "cells": {"<cell id>": {"en_sha": "<sha1 of the English cell's source, 12 hex>", "zh": "<markdown>"}}}

``en_sha`` is the English text the translation was made from: when the English cell changes, its sha
no longer matches and ``--check`` names the cell (STALE). The generator also
- adds the language switch to the setup cell (``paged_lab.viz.i18n.use("zh-TW")``: figures, quizzes and
  the glossary then show ``paged_lab/viz/locale/zh-TW.json``'s words) and, last, a cell that fails when
  something the notebook showed had no translation;
- points the Binder/Colab badges at the zh-TW notebook, links between notebooks at the zh-TW twins,
  other relative links (``../docs/...``) one folder up, and adds a link to the English original;
- fills ``{{series-table}}`` in the index's translation with the series table read from the zh-TW
  notebooks themselves (titles and "你會學到" bullets). The term table is the translators' (``--terms``):
  its 「不寫成」 column lists the words to avoid, which a learner should never read, so no notebook shows it.

One rendering per term: ``paged_lab/viz/locale/zh-TW.json``'s ``"terms"`` (English term → the one
Chinese rendering, its gloss, the variants it replaces) and ``"plurals"``; ``--check`` reports every
translation that breaks them (TERM), in each catalogue present here, the package's strings and the
glossary (``paged_lab.viz.i18n.term_problems``).

What it reads from an English notebook (its badge line, its entry in the series table) is
``scripts/notebook_kit.py``'s, shared with sync_badges.py; this script imports nothing of that one.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
import notebook_kit  # noqa: E402  (the badge-line rule and each English notebook's entry)

from paged_lab import _project  # noqa: E402
from paged_lab.viz import i18n  # noqa: E402

LANG = "zh-TW"
NOTEBOOKS = ROOT / "notebooks"
CATALOGUE = NOTEBOOKS / "i18n" / LANG
OUT = NOTEBOOKS / LANG
TABLE_PLACEHOLDER = "{{series-table}}"
GOALS_HEADING = "你會學到"
SWITCH = (
    "\n\nimport paged_lab.viz.i18n\n\n"
    f'paged_lab.viz.i18n.use("{LANG}")  # 繁體中文版：圖表、小測驗與詞彙表改用中文（程式碼與英文版相同）'
)
CHECK_CELL_ID = "zh-tw-check"
CHECK_CELL = (
    "# 翻譯檢查（由 scripts/build_zh.py 加上）：這本筆記本顯示過的英文字串（圖表、小測驗、詞彙表）\n"
    "# 在 paged_lab/viz/locale/zh-TW.json 都要有翻譯，缺的會在這裡列出來。\n"
    "paged_lab.viz.i18n.assert_translated()"
)


def en_sha(source: str | list[str]) -> str:
    """The first 12 hex digits of the sha1 of a cell's source (joined, UTF-8)."""
    text = "".join(source) if isinstance(source, list) else source
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


# Cells whose numbers sync_badges writes from data (run times measured by `make budget`, reading
# minutes): their translation is of the words. The words' sha ignores the numbers, and the twin takes
# the English cell's numbers, in order, each time it is generated.
NUMBERS_FROM_ENGLISH = {("00_index.ipynb", "index-paths")}
_NUMBER = re.compile(r"\d+")


def words_sha(notebook: str, cell_id: str, source: str) -> str:
    """``en_sha`` of a cell, with the numbers left out for the cells of NUMBERS_FROM_ENGLISH."""
    return en_sha(_NUMBER.sub("#", source) if (notebook, cell_id) in NUMBERS_FROM_ENGLISH else source)


def with_english_numbers(zh: str, english: str, where: str) -> str:
    """``zh`` with its numbers replaced, in order, by those of ``english`` (the same count)."""
    numbers = _NUMBER.findall(english)
    if len(_NUMBER.findall(zh)) != len(numbers):
        raise ValueError(f"{where}: the translation has {len(_NUMBER.findall(zh))} numbers, the English "
                         f"{len(numbers)}; they must match one to one")
    it = iter(numbers)
    return _NUMBER.sub(lambda _: next(it), zh)


def english_notebooks() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if p.is_file())


def catalogue_path(english: Path) -> Path:
    return CATALOGUE / f"{english.stem}.json"


def load_catalogue(english: Path) -> dict | None:
    path = catalogue_path(english)
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("notebook") != english.name or not isinstance(data.get("cells"), dict):
        raise ValueError(f"{path}: expected {{'notebook': {english.name!r}, 'cells': {{...}}}}")
    return data


def read_nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- what is out of date


@dataclass
class Problem:
    kind: str  # STALE, MISSING, NO CATALOGUE, ORPHAN, OUT OF DATE, TERM
    notebook: str
    cell: str = ""
    english: str = ""
    zh: str = ""
    sha: str = ""

    def line(self) -> str:
        where = f"{self.notebook}" + (f" cell {self.cell}" if self.cell else "")
        return f"{self.kind}: {where}" + (f": {self.english}" if self.kind == "TERM" else "")


def translation_problems(english: Path) -> list[Problem]:
    """Cells of ``english`` whose translation is stale or missing (and translations of no cell)."""
    nb, cat = read_nb(english), load_catalogue(english)
    if cat is None:
        create = f"create {catalogue_path(english).relative_to(ROOT)}"
        return [Problem("NO CATALOGUE", english.name, english=create)]
    out, ids = [], set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        ids.add(cell["id"])
        source, entry = "".join(cell["source"]), cat["cells"].get(cell["id"])
        sha = words_sha(english.name, cell["id"], source)
        if not entry or not entry.get("zh", "").strip():
            out.append(Problem("MISSING", english.name, cell["id"], source, sha=sha))
        elif entry.get("en_sha") != sha:
            out.append(Problem("STALE", english.name, cell["id"], source, entry["zh"], sha))
    for cell_id in sorted(set(cat["cells"]) - ids):
        out.append(Problem("ORPHAN", english.name, cell_id, zh=cat["cells"][cell_id].get("zh", "")))
    return out


# ---------------------------------------------------------------- generating


def zh_name(english_name: str) -> str:
    return f"{LANG}/{english_name}"


ONLINE_LEAD = "線上執行："  # _project.LEAD in zh-TW


def zh_badges(english_name: str) -> str:
    """The Binder/Colab badge line of the zh-TW twin of ``english_name``."""
    line = _project.badges_markdown(english_name, lead=ONLINE_LEAD)
    line = line.replace("notebooks%2F", f"notebooks%2F{LANG}%2F")  # Binder's labpath
    return line.replace("/notebooks/", f"/notebooks/{LANG}/")  # Colab's path


def _retarget(target: str, twins: set[str]) -> str:
    """A link written for notebooks/ (as in the English text), from notebooks/zh-TW/."""
    if re.match(r"^([a-z]+:|#|/)", target):
        return target
    path, _, anchor = target.partition("#")
    if path in twins:  # the zh-TW twin sits beside this notebook
        return target
    return "../" + target


def localize_markdown(text: str, twins: set[str]) -> str:
    def link(m: re.Match) -> str:
        return m.group(1) + _retarget(m.group(2), twins) + m.group(3)

    return re.sub(r"(\]\()([^)\s]+)(\))", link, text)


def with_zh_badges(text: str, english_name: str) -> str:
    want = f"{zh_badges(english_name)} · [English](../{english_name})"
    return notebook_kit.with_badges(text, english_name, want=want)


def describe_zh(nb: dict, name: str) -> tuple[str, list[str]]:
    """Title and "你會學到" bullets of a zh-TW notebook's first cell."""
    first = "".join(nb["cells"][0]["source"]) if nb["cells"] else ""
    m = re.search(r"^#\s+(?:\d\d\s*·\s*)?(.+)$", first, flags=re.M)
    goals, in_goals = [], False
    for line in first.split("\n"):
        if GOALS_HEADING in line:
            in_goals = True
        elif in_goals and line.lstrip().startswith(("- ", "* ")):
            goals.append(line.lstrip()[2:].strip().rstrip("；;。.，,"))
        elif in_goals and goals and line.strip():
            break
    return (m.group(1).strip() if m else Path(name).stem), goals


def series_table(rows: list[tuple[Path, dict | None]]) -> str:
    """The index's table: (English notebook, its zh-TW twin or None) per notebook."""
    out = ["| # | 筆記本 | 你會學到 | CPU | GPU | 開啟 |", "|---|--------|----------|-----|-----|------|"]
    for path, zh_nb in rows:
        name, entry = path.name, notebook_kit.describe(path)
        cpu, gpu = i18n.t(entry.cpu, LANG), i18n.t(entry.gpu, LANG)
        if zh_nb is None:  # not translated yet: the English notebook
            goals = "<br>".join(f"• {g.replace('|', '/')}" for g in entry.goals) or "—"
            out.append(f"| {entry.number} | [{entry.title}]({name})（英文） | {goals} | {cpu} | {gpu} | "
                       f"{notebook_kit.badges_for(entry)} |")
            continue
        title, goals = describe_zh(zh_nb, name)
        cell = "<br>".join(f"• {g.replace('|', '/')}" for g in goals) or "—"
        badges = zh_badges(name).removeprefix(ONLINE_LEAD).strip()
        out.append(f"| {entry.number} | [{title}]({name}) | {cell} | {cpu} | {gpu} | {badges} |")
    return "\n".join(out)


def generate(english: Path, twins: set[str], zh_series: dict[str, dict] | None = None) -> dict:
    """The zh-TW notebook for ``english`` (its catalogue must exist; missing cells stay English)."""
    nb, cat = copy.deepcopy(read_nb(english)), load_catalogue(english)
    switched = False
    for i, cell in enumerate(nb["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            entry = cat["cells"].get(cell["id"], {}) if cat else {}
            text = entry.get("zh") or source
            if entry.get("zh") and (english.name, cell["id"]) in NUMBERS_FROM_ENGLISH:
                text = with_english_numbers(text, source, f"{english.name} cell {cell['id']}")
            if TABLE_PLACEHOLDER in text:
                series = [p for p in english_notebooks() if not p.name.startswith("00_")]
                rows = [(p, (zh_series or {}).get(p.name)) for p in series]
                text = text.replace(TABLE_PLACEHOLDER, series_table(rows))
            text = localize_markdown(text, twins)
            if i == 0:
                text = with_zh_badges(text, english.name)
            cell["source"] = _lines(text)
        elif cell["cell_type"] == "code" and not switched and _is_setup(source):
            cell["source"] = _lines(source.rstrip("\n") + SWITCH)
            switched = True
    if not switched:
        raise ValueError(f"{english.name}: no setup cell (the code cell with `import paged_lab`) "
                         "to switch the language in")
    check = {"cell_type": "code", "execution_count": None, "id": CHECK_CELL_ID, "metadata": {}, "outputs": [],
             "source": _lines(CHECK_CELL)}
    nb["cells"].append(check)
    nb["metadata"]["language_info"] = nb["metadata"].get("language_info", {"name": "python"})
    return nb


def _is_setup(source: str) -> bool:
    return bool(re.search(r"^import paged_lab$", source, flags=re.M))


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# ---------------------------------------------------------------- one rendering per term


def term_table() -> str:
    """The catalogue's term table (``paged_lab/viz/locale/zh-TW.json``, ``"terms"``) as markdown."""
    out = ["| 英文 | 中文版的寫法 | 第一次出現時 | 不寫成 |", "|------|------------|------------|--------|"]
    for en, entry in i18n.catalogue(LANG).get("terms", {}).items():
        avoid = [f"「{a}」" for a in entry.get("avoid", [])]
        avoid += [entry["avoid_note"]] if entry.get("avoid_note") else []  # what an avoid_pattern catches
        avoid = "、".join(avoid) or "—"
        out.append(f"| {en} | {entry.get('zh', en)} | {entry.get('gloss', '—')} | {avoid} |")
    return "\n".join(out)


def term_problems() -> list[Problem]:
    """Every place a translation breaks the term table or keeps an English plural
    (``paged_lab.viz.i18n.term_problems``): each notebook catalogue present in ``notebooks/i18n/zh-TW/``,
    every string of the package's catalogue and every glossary meaning."""
    found = []
    for path in sorted(CATALOGUE.glob("*.json")):
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", {})
        for cell_id, entry in cells.items():
            found += [Problem("TERM", path.name, cell_id, english=p)
                      for p in i18n.term_problems(entry.get("zh", ""), LANG)]
        found += [Problem("TERM", path.name, "(glosses)", english=p)
                  for p in i18n.gloss_problems([e.get("zh", "") for e in cells.values()], LANG)]
    data = i18n.catalogue(LANG)
    for key, value in data["strings"].items():
        found += [Problem("TERM", "locale strings", key[:60], english=p)
                  for p in i18n.term_problems(value, LANG)]
    for name, entry in data.get("glossary", {}).items():
        found += [Problem("TERM", "locale glossary", name, english=p)
                  for p in i18n.term_problems(entry.get("meaning", ""), LANG)]
    return found


# ---------------------------------------------------------------- the package's strings


def _template(node: ast.AST) -> str | None:
    """The text a string expression shows, with ``{}`` for each computed part; None if not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    return None


# paged_lab.classroom.quiz: the calls that hold a quiz's texts
QUIZ_CALLS = ("Question", "NumberQuestion", "Choice", "Quiz")
QUIZ_MODULES = ROOT / "paged_lab" / "classroom" / "quizzes"  # one module per notebook's quiz (nb01.py ...)


_WORD = re.compile(r"[A-Za-z]{3,}")  # a quiz text with one English word in it is shown in Chinese too


def _texts_in(node: ast.AST, found: dict[str, None]) -> None:
    """Every string expression under ``node`` with a word in it, in source order, as a catalogue key."""
    text = _template(node)
    if text is not None:
        if _WORD.search(text.replace("{}", " ")):
            found[text] = None
        return
    if isinstance(node, ast.Subscript):  # facts["recompute"]: a key, not a text
        return _texts_in(node.value, found)
    for child in ast.iter_child_nodes(node):
        _texts_in(child, found)


def source_quiz_strings(source: str) -> list[str]:
    """Every text written in a quiz call of ``source`` (``Question``, ``NumberQuestion``, ``Choice``,
    ``Quiz``, and anything inside them: prompts, choices, every why, hints, mistakes, titles), as
    catalogue keys: f-string parts become ``{}``."""
    found: dict[str, None] = {}

    def visit(node: ast.AST) -> None:
        name = getattr(node.func, "id", getattr(node.func, "attr", "")) if isinstance(node, ast.Call) else ""
        if name in QUIZ_CALLS:
            for child in ast.iter_child_nodes(node):
                if child is not node.func:
                    _texts_in(child, found)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return list(found)


def quiz_strings(nb: dict) -> list[str]:
    """Every quiz text written in a notebook's code cells (see ``source_quiz_strings``)."""
    found: dict[str, None] = {}
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and any(f"{name}(" in source for name in QUIZ_CALLS):
            found.update(dict.fromkeys(source_quiz_strings(source)))
    return list(found)


def quiz_module_strings() -> dict[str, list[str]]:
    """The quiz texts of every module in ``paged_lab/classroom/quizzes/``, by module file."""
    modules = sorted(QUIZ_MODULES.glob("*.py"))
    return {p.name: source_quiz_strings(p.read_text(encoding="utf-8")) for p in modules}


def untranslated_strings() -> list[tuple[str, str]]:
    """(notebook or quiz module, quiz text) for every quiz text of the series that the catalogue lacks."""
    strings = i18n.catalogue(LANG)["strings"]
    found = [(p.name, s) for p in english_notebooks() for s in quiz_strings(read_nb(p))]
    where = QUIZ_MODULES.relative_to(ROOT).as_posix()
    found += [(f"{where}/{name}", s) for name, texts in quiz_module_strings().items() for s in texts]
    return [(where, s) for where, s in found if s not in strings]


def planned() -> dict[Path, str]:
    """Every zh-TW notebook as the generator writes it now (those with a catalogue)."""
    translated = [p for p in english_notebooks() if catalogue_path(p).exists()]
    twins = {p.name for p in translated}
    out, zh_series = {}, {}
    for p in translated:  # the index last: its table reads the other twins
        if not p.name.startswith("00_"):
            zh_series[p.name] = generate(p, twins)
            out[OUT / p.name] = dumps(zh_series[p.name])
    for p in translated:
        if p.name.startswith("00_"):
            out[OUT / p.name] = dumps(generate(p, twins, zh_series))
    return out


def problems() -> list[Problem]:
    found = [pr for p in english_notebooks() for pr in translation_problems(p)] + term_problems()
    plan = planned()
    for path, text in plan.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            found.append(Problem("OUT OF DATE", str(path.relative_to(ROOT)),
                                 english="run python scripts/build_zh.py"))
    for path in sorted(OUT.glob("*.ipynb")):
        if path not in plan:
            found.append(Problem("ORPHAN", str(path.relative_to(ROOT)),
                                 english="no English notebook or catalogue"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="change nothing; exit 1 if anything is stale, missing or out of date")
    mode.add_argument("--stale", action="store_true",
                      help="list stale and missing cells with their English text")
    mode.add_argument("--strings", action="store_true",
                      help="list quiz texts paged_lab/viz/locale/zh-TW.json lacks")
    mode.add_argument("--terms", action="store_true",
                      help="print the term table (for translators; no notebook shows it)")
    args = parser.parse_args(argv)
    if args.terms:
        print(term_table())
        return 0
    if args.strings:
        missing = untranslated_strings()
        for name, text in missing:
            print(f"{name}: {json.dumps(text, ensure_ascii=False)}")
        return 1 if missing else 0
    if args.check or args.stale:
        found = problems()
        for pr in found:
            print(pr.line() if args.check or pr.kind == "OUT OF DATE" else
                  f"{'=' * 78}\n{pr.line()}  (en_sha now {pr.sha or '-'})\n--- English ---\n{pr.english}"
                  + (f"\n--- zh-TW (from the old English) ---\n{pr.zh}" if pr.zh else ""))
        blocking = [pr for pr in found if pr.kind != "ORPHAN" or pr.cell == ""]
        print(f"{len(found)} problem(s)" if found else "zh-TW edition up to date", file=sys.stderr)
        return 1 if blocking else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path, text in planned().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
