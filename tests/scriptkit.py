"""Load a file that is not in a package (``scripts/``, ``benchmarks/``) as a module, for the tests
that call its functions. tests/ and tests/browser/ both use it (labkit puts tests/ on the path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path | str, name: str | None = None):
    """The module in ``path`` (relative to the repository root, or absolute), imported afresh under
    ``name`` (default: the file's stem) and registered in ``sys.modules``, where dataclasses look
    their module up."""
    path = ROOT / path
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
