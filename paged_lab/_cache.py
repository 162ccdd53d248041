"""Where paged_lab keeps what it builds once: the dequantized default model, the compiled C kernels.

A cached model folder is built in a temporary folder beside it and renamed into place when complete,
so an interrupted build leaves no half-written copy under the real name; :func:`cached_model_dir`
checks a copy before using it and rebuilds one that is damaged (a file missing, a file cut short).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")


class DamagedCacheError(RuntimeError):
    """A cached folder is damaged and could not be rebuilt: the message names the folder to delete."""


def cache_root() -> Path:
    """``$PAGED_LAB_CACHE``, else ``~/.cache/paged_lab``."""
    return Path(os.environ.get("PAGED_LAB_CACHE", Path.home() / ".cache" / "paged_lab"))


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file, or None: its 8-byte header length, its JSON header,
    and the end of its last tensor must match the file's size (a file cut short fails here)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{path.name} is {size} bytes, shorter than a safetensors header"
        (header_len,) = struct.unpack("<Q", head)
        if 8 + header_len > size:
            return f"{path.name}: header of {header_len:,} bytes, file of {size:,}"
        try:
            header = json.loads(f.read(header_len))
        except ValueError:
            return f"{path.name}: its header is not JSON"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_len + max(ends, default=0)
    if expected != size:
        return f"{path.name} is {size:,} bytes, its header describes {expected:,}"
    return None


def model_dir_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a whole cached model, or None: every file of :data:`MODEL_FILES` is there,
    the JSON ones parse and the weights' header agrees with their size."""
    for name in MODEL_FILES:
        if not (folder / name).is_file():
            return f"{name} is missing"
    for name in MODEL_FILES:
        if name.endswith(".json") and not _whole_json(folder / name):
            return f"{name} is not valid JSON (cut short?)"
    return safetensors_problem(folder / "model.safetensors")


def _whole_json(path: Path) -> bool:
    """A small JSON file parses; a large one (tokenizer.json, 3.5 MB: parsing it would cost a warm load
    0.2-0.5 s, and the tokenizer parses it anyway) at least ends with its closing brace."""
    if path.stat().st_size > 100_000:
        with open(path, "rb") as f:
            f.seek(-64, os.SEEK_END)
            return f.read().rstrip().endswith(b"}")
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return False
    return True


def _remove(folder: Path) -> None:
    """Move ``folder`` aside under a hidden name (one atomic rename), then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=f".{folder.name}-damaged-", dir=folder.parent))
    folder.rename(trash / folder.name)
    shutil.rmtree(trash, ignore_errors=True)


def _build(target: Path, build: Callable[[Path], Any]) -> Any:
    """Run ``build(tmp)`` in a temporary folder beside ``target``, check the result, rename it into place
    and return what ``build`` returned; None when a concurrent process got there first with a whole
    copy (it wins, ours is dropped)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-building-", dir=target.parent))
    try:
        built = build(tmp)
        problem = model_dir_problem(tmp)
        if problem:
            raise DamagedCacheError(f"building {target} wrote an incomplete folder: {problem}")
        tmp.chmod(0o755)
        if target.exists() and model_dir_problem(target) is None:
            return None  # a concurrent build finished first
        if target.exists():
            _remove(target)
        tmp.rename(target)
        return built
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cached_model_dir(name: str, build: Callable[[Path], Any], on_rebuild=None) -> tuple[Path, Any]:
    """``(cache_root() / name, built)``: the folder, built by ``build(folder)`` when it is missing and
    rebuilt when it is damaged (``on_rebuild(reason)`` is told why), and what ``build`` returned when it
    ran (else None). A copy that cannot be rebuilt raises :class:`DamagedCacheError` naming the folder
    to delete."""
    target = cache_root() / name
    problem = model_dir_problem(target) if target.exists() else "not built yet"
    if problem is None:
        return target, None
    if on_rebuild is not None:
        on_rebuild(problem)
    try:
        built = _build(target, build)
    except OSError as e:
        raise DamagedCacheError(f"the cached model at {target} is damaged ({problem}) and rebuilding it "
                                f"failed ({e}); delete the folder {target} and load again") from e
    problem = model_dir_problem(target)
    if problem:
        raise DamagedCacheError(f"the cached model at {target} is damaged ({problem}); delete the folder "
                                f"{target} and load again")
    return target, built
