"""The CPU fast path's C files (``csrc/``), built on first use and loaded with ctypes.

Each C file is compiled on first use with the system C compiler (under a second) into
``~/.cache/paged_lab/kernels`` (``PAGED_LAB_CACHE``) and loaded with ctypes. Loading a library runs its
code, so a cached one is loaded only from a folder of this user's that nobody else can write (created
with mode 0700), and only while its bytes match the sha256 written beside it at build time; any other
file there is rebuilt, and a folder of another user's is refused. Nothing is built with no AVX-512, no C
compiler, or ``PAGED_LAB_CPU_KERNELS=0``: :class:`CLibrary` then says why, and the torch code runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import torch

CFLAGS = ("-O3", "-mavx512f", "-mfma", "-fopenmp", "-shared", "-fPIC")

# Loading a shared library runs its code (its constructors run at dlopen), so the cached .so is only
# loaded when it is known to be the one this process's user built from its source:
# - its folder belongs to this user and nobody else can write in it (created with mode 0700), so no
#   other user can drop or swap a file there between the checks below and the load;
# - the .so and its sidecar (the .so's sha256, written at build time) belong to this user, are regular
#   files (not links) and not group/world-writable, and the .so's bytes still hash to the sidecar.
# Anything else (a truncated build, a file dropped in while the folder was open to others) is rebuilt.
def _private_folder(folder: Path) -> str | None:
    """Create ``folder`` with mode 0700, or check the one there: None when it is this user's and closed
    to others, else why no library is loaded from it. A folder of ours that others may write in (an older
    cache, a umask of 002) is closed to mode 0700: what may have been dropped in meanwhile fails
    :func:`_is_our_build` and is rebuilt."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if st.st_uid != os.getuid():
        return (f"the kernel cache folder {folder} belongs to uid {st.st_uid}, not this user (uid "
                f"{os.getuid()}): no library is loaded from it (set PAGED_LAB_CACHE to a folder of your own)")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(folder, 0o700)
    return None


def _owned_and_closed(path: Path) -> bool:
    """A regular file (not a link), this user's, that no group or other user may write."""
    st = path.lstat()
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _is_our_build(lib_path: Path, digest_path: Path) -> bool:
    """Whether ``lib_path`` is a library this user built: see the rules above."""
    try:
        if not (_owned_and_closed(lib_path) and _owned_and_closed(digest_path)):
            return False
        return _sha256(lib_path) == digest_path.read_text().strip()
    except (OSError, UnicodeDecodeError):  # missing, unreadable, not text
        return False


def _compile(cc: str, lib_path: Path, digest_path: Path, source: Path) -> str | None:
    """Build ``source`` into ``lib_path`` and write its sha256 beside it; None, or why it failed. Both files
    are written under temporary names and renamed into place (atomic: another process sees the whole
    file or none; two processes that build at once each write a whole library and digest)."""
    tmp = lib_path.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run([cc, *CFLAGS, "-o", str(tmp), str(source)], capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return f"{cc} could not build {source.name}: {proc.stderr.strip()[:500]}"
    os.chmod(tmp, 0o700)  # the compiler's mode follows the umask, which may leave it group-writable
    tmp_digest = digest_path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp_digest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(_sha256(tmp) + "\n")
    os.replace(tmp, lib_path)
    os.replace(tmp_digest, digest_path)
    return None


def load_library(source: Path) -> tuple[ctypes.CDLL | None, str | None]:
    """(the compiled ``source``, None), or (None, why not): built once into this user's private cache
    folder by the rules above and loaded (every C file of ``csrc/`` through :class:`CLibrary`)."""
    if os.environ.get("PAGED_LAB_CPU_KERNELS", "1") == "0":
        return None, "turned off by PAGED_LAB_CPU_KERNELS=0"
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX512"):
        return None, f"this CPU has no AVX-512 (torch reports {capability})"
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None, "no C compiler found (install gcc, or set CC)"
    from paged_lab._cache import cache_root

    # the headers of csrc/ count too: a changed exp_neg must rebuild every file that includes it
    headers = b"".join(h.read_bytes() for h in sorted(source.parent.glob("*.h")))
    key = hashlib.sha256(source.read_bytes() + headers + " ".join((cc, *CFLAGS)).encode()).hexdigest()[:16]
    folder = cache_root() / "kernels"
    lib_path = folder / f"{source.stem}-{key}.so"
    digest_path = folder / f"{source.stem}-{key}.so.sha256"
    try:
        why = _private_folder(folder)
        if why is not None:
            return None, why
        if not _is_our_build(lib_path, digest_path):
            why = _compile(cc, lib_path, digest_path, source)
            if why is not None:
                return None, why
        # torch is loaded, so the library's libgomp.so.1 resolves to torch's own: one OpenMP thread pool
        return ctypes.CDLL(str(lib_path)), None
    except OSError as e:  # a read-only cache folder, a compiler that cannot run, a library that cannot load
        return None, f"could not build or load {lib_path.name}: {e}"


class CLibrary:
    """One C file of ``csrc/``, built and loaded on its first use (once, thread-safe), with the ctypes
    signatures of its functions set by ``declare(lib)``. ``lib()`` is the library or None; ``why`` then
    says why not (no AVX-512, no compiler, a build error, ``PAGED_LAB_CPU_KERNELS=0``)."""

    def __init__(self, source: Path, declare):
        self.source, self._declare = source, declare
        self._lock = threading.Lock()
        self._loaded = False
        self._lib: ctypes.CDLL | None = None
        self.why: str | None = None

    def lib(self) -> ctypes.CDLL | None:
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._lib, self.why = load_library(self.source)
                    if self._lib is not None:
                        self._declare(self._lib)
                    self._loaded = True
        return self._lib
