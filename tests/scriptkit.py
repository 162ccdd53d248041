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
    their module up. The file's folder goes on ``sys.path`` as ``python path/to/file.py`` would put it,
    so a script's ``import`` of a module beside it (benchmarks/before_checkout.py) works the same."""
    path = ROOT / path
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
