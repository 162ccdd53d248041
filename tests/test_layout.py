"""The package's layout is part of the lesson (docs/architecture.md): these tests keep it so.

* ``paged_lab/`` lists at most 10 public entries, the concept rooms in the order the notebooks teach
  them, plus the figures, the instruments and one room for what only the notebooks use;
* no concept room imports the classroom (quizzes, exercises, glossary) or the tools, the figures do not
  import the classroom, and the translation (``viz.i18n``) imports nothing of the package;
* no two modules of the package import each other, directly or through others (an import circle).

The import graph is read from the source with ``ast`` (every ``import``/``from ... import``,
function-level ones included), not by importing, so it sees lazy imports too; imports under
``if TYPE_CHECKING:`` only name types for the checker and never run, so they are not edges.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "paged_lab"
CONCEPT_ROOMS = ["kv_math", "memory", "sched", "sim", "kernels", "engine", "models"]
OTHER_ROOMS = ["viz", "tools", "classroom"]
FURNITURE = ["classroom", "tools"]  # what the concept rooms never import


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str] | None = None) -> set[str]:
    """The paged_lab modules that ``path`` imports. ``from pkg import name`` imports the module
    ``pkg.name`` when there is one (a sibling, reached through its package), else ``pkg`` itself (a name
    its ``__init__`` defines): the second can close a circle, the first cannot."""
    modules = set(_modules()) if modules is None else modules
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path)
    type_only = {id(n) for block in ast.walk(tree) if _is_type_checking_block(block)
                 for stmt in block.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:  # ``if TYPE_CHECKING:`` imports name types; nothing runs them
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import
                pkg = here.split(".")[: len(here.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(pkg + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {m for m in found if m == "paged_lab" or m.startswith("paged_lab.")}


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def graph() -> dict[str, set[str]]:
    modules = _modules()
    names = set(modules)
    return {name: {m for m in imports_of(p, names) if m in modules and m != name}
            for name, p in modules.items()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_top_level_lists_the_rooms_in_teaching_order():
    public = sorted(p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()
                    if not p.name.startswith(("_",
                                              ".")) and (p.suffix == ".py" or (p / "__init__.py").is_file()))
    assert len(public) <= 10, public
    assert sorted(CONCEPT_ROOMS + OTHER_ROOMS) == public


@pytest.mark.parametrize("concept", CONCEPT_ROOMS)
def test_concept_rooms_import_no_furniture(concept):
    g = graph()
    bad = sorted(f"{mod} -> {dep}" for mod, deps in g.items() if room(mod) == concept
                 for dep in deps if room(dep) in FURNITURE)
    assert not bad, bad


def test_figures_do_not_import_the_classroom():
    """The classroom draws with the figures and speaks through their translation (``viz.i18n``), not
    the other way round."""
    g = graph()
    bad = sorted(f"{m} -> {d}" for m,
                 deps in g.items() if room(m) == "viz" for d in deps if room(d) == "classroom")
    assert not bad, bad


def test_translation_knows_none_of_its_users():
    """``viz.i18n`` looks words up; the figures, quizzes and glossary call it, never the reverse."""
    assert graph()["paged_lab.viz.i18n"] == set()


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``g`` as [a, b, ..., a], or None (depth-first search, three colours)."""
    colour, stack = {}, []

    def visit(node):
        colour[node] = "grey"
        stack.append(node)
        for dep in sorted(g[node]):
            if colour.get(dep) == "grey":
                return stack[stack.index(dep):] + [dep]
            if dep not in colour and (cycle := visit(dep)):
                return cycle
        colour[node] = "black"
        stack.pop()
        return None

    for node in sorted(g):
        if node not in colour and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_circle():
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()))


def test_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_type_checking_imports_are_not_edges(tmp_path, monkeypatch):
    src = tmp_path / "paged_lab" / "m.py"
    src.parent.mkdir()
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from paged_lab import a\n"
                   "def f():\n    from paged_lab import b\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "paged_lab")
    # the function-level import counts; paged_lab.b is no module here, so it is a name of paged_lab
    assert imports_of(src, {"paged_lab", "paged_lab.m"}) == {"paged_lab"}
    assert imports_of(src, {"paged_lab", "paged_lab.m", "paged_lab.b"}) == {"paged_lab.b"}


# ------------------------------------------------------------------ the map in docs/architecture.md
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAPPED_SUFFIXES = {".py", ".c", ".h", ".json"}
_FILE = r"[\w.-]+(?:/[\w.-]+)*\.(?:py|c|h|json)\b"
_RANGE = r"^(?P<head>.*?)(?P<first>\d+)-(?P<last>\d+)(?P<tail>\.\w+)$"  # nb01-08.py: nb01.py .. nb08.py


def layout_block(text: str) -> list[str]:
    """The fenced block of the architecture page that starts with ``paged_lab/``, as lines."""
    lines = text.splitlines()
    start = lines.index("paged_lab/") if "paged_lab/" in lines else next(
        i for i, line in enumerate(lines) if line.startswith("paged_lab/ "))
    end = lines.index("```", start)
    return lines[start:end]


def mapped_files(block: list[str]) -> list[str]:
    """The package files the map names, as paths under ``paged_lab/``. A line indented two spaces starts
    an entry: a folder (``memory/``) is where the file names on its lines live, until the next entry; a
    file there (``kv_math.py``) is at the top, with the other names on its line. ``nb01-08.py`` stands for
    nb01.py .. nb08.py; a name with a slash (``csrc/layer_ops.c``) is relative to the entry's folder."""
    import re

    folder, found = "", []
    for line in block[1:]:
        if not line.startswith("  "):
            continue
        if not line.startswith("   "):  # an entry
            first = line.split()[0]
            folder = first if first.endswith("/") else ""
        for name in re.findall(_FILE, line):
            found += [folder + n for n in _expand(name, re)]
    return found


def _expand(name: str, re) -> list[str]:
    m = re.match(_RANGE, name)
    if m is None:
        return [name]
    width = len(m["first"])
    return [f"{m['head']}{i:0{width}d}{m['tail']}" for i in range(int(m["first"]), int(m["last"]) + 1)]


def package_files(package: Path) -> set[str]:
    """Every file of the package that the map must name: sources, C sources and headers, the shown
    strings; not the ``__init__.py`` every folder has, nor caches."""
    return {p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix in MAPPED_SUFFIXES and p.name != "__init__.py"
            and "__pycache__" not in p.parts}


def map_differences(block: list[str], package: Path) -> str:
    """'' when the map names every file of the package once and nothing else; otherwise what to change."""
    named = mapped_files(block)
    missing = sorted(package_files(package) - set(named))
    extra = sorted(set(named) - package_files(package))
    twice = sorted({n for n in named if named.count(n) > 1})
    problems = [f"{what}: {', '.join(names)}" for what, names in (
        ("files with no line in docs/architecture.md's layout (add them)", missing),
        ("names in the layout that are no file of paged_lab/ (remove or rename them)", extra),
        ("names the layout gives twice", twice)) if names]
    return "\n".join(problems)


def test_the_architecture_map_names_every_file_of_the_package_on_one_screen():
    block = layout_block(ARCHITECTURE.read_text(encoding="utf-8"))
    assert not map_differences(block, PACKAGE), map_differences(block, PACKAGE)
    assert len(block) <= 50 and max(map(len, block)) <= 110, (len(block), max(map(len, block)))


def test_the_map_check_names_what_is_missing_and_what_is_extra(tmp_path):
    (tmp_path / "memory" / "csrc").mkdir(parents=True)
    for name in ("kv_math.py", "memory/__init__.py", "memory/a.py", "memory/new.py", "memory/csrc/k.c",
                 "nb01.py", "nb02.py"):
        (tmp_path / name).write_text("")
    block = ["paged_lab/  (__init__.py: not a file of the map)", "  kv_math.py  01  cdiv; nb01-02.py",
             "  memory/     02  a.py (the first),", "              csrc/k.c, gone.py"]
    assert mapped_files(block) == ["kv_math.py", "nb01.py", "nb02.py", "memory/a.py", "memory/csrc/k.c",
                                   "memory/gone.py"]
    assert map_differences(block, tmp_path) == (
        "files with no line in docs/architecture.md's layout (add them): memory/new.py\n"
        "names in the layout that are no file of paged_lab/ (remove or rename them): memory/gone.py")
