"""Where paged_lab keeps what it builds once: the dequantized default model, the compiled C kernels."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$PAGED_LAB_CACHE``, else ``~/.cache/paged_lab``."""
    return Path(os.environ.get("PAGED_LAB_CACHE", Path.home() / ".cache" / "paged_lab"))
