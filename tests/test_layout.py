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
