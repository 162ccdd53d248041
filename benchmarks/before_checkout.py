"""Load another checkout's ``paged_lab`` beside this one, for the before/after benchmarks.

Its package is copied into a temporary folder as ``paged_lab_before`` (every ``paged_lab`` in its source
renamed), so both can be imported in one process and timed alternately, under the same machine load.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

NAME = "paged_lab_before"


def import_before(checkout: Path, needs: str, copy_c: bool = True) -> ModuleType:
    """``checkout``'s ``paged_lab`` as the package ``paged_lab_before``. ``needs``: a folder of the package
    that must exist (``"engine"``, ``"memory"``), so a wrong path fails with a clear message;
    ``copy_c=False`` leaves the C sources out (a benchmark that never builds them)."""
    src = Path(checkout) / "paged_lab"
    if not (src / needs).is_dir():
        raise SystemExit(f"checkout: {checkout} has no paged_lab/{needs} (give the root of a paged-lab "
                         "checkout)")
    tmp = Path(tempfile.mkdtemp(prefix=f"{NAME}_"))
    dst = tmp / NAME
    ignore = ("__pycache__",) if copy_c else ("__pycache__", "csrc")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*ignore))
    for py in dst.rglob("*.py"):
        py.write_text(re.sub(r"\bpaged_lab\b", NAME, py.read_text()))
    sys.path.insert(0, str(tmp))
    return importlib.import_module(NAME)
