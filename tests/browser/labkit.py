"""Shared by the browser conftest and tests: where the notebooks are and what their budgets are."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_budget():
    # scripts/ is not a package; load the one module that defines the budgets so both places agree.
    spec = importlib.util.spec_from_file_location("measure_notebooks", ROOT / "scripts" / "measure_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


budget = _load_budget()


def notebooks_dir() -> Path:
    """The folder under test: ``notebooks/``, or ``$PAGED_LAB_NOTEBOOKS_DIR`` (to try a draft notebook)."""
    return Path(os.environ.get("PAGED_LAB_NOTEBOOKS_DIR", ROOT / "notebooks")).resolve()
