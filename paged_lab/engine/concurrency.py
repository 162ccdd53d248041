"""One caller at a time: an ``LLM`` is not thread-safe, as vLLM's ``LLM`` is not (one scheduler, one pool).

Two threads calling ``generate()`` on one engine would interleave two step loops over one Scheduler: one
of them fails in the middle of a step, the other finds its sequences gone. So the second call raises at
once, before it changes anything, with an error that says what happened; the first runs on unharmed.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager


class OneCaller:
    """``with guard.call("generate()"):`` -- raises RuntimeError at once while another call is running."""

    def __init__(self):
        self._lock = threading.Lock()
        self.running: str | None = None  # "generate() in thread MainThread" while a call runs
        self._thread: int | None = None

    @contextmanager
    def call(self, what: str):
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(self._busy(what))
        self.running = f"{what} in thread {threading.current_thread().name!r}"
        self._thread = threading.get_ident()
        try:
            yield
        finally:
            self.running = self._thread = None
            self._lock.release()

    def check(self, what: str) -> None:
        """Raise when a call runs in another thread (``what`` may run inside the caller's own call)."""
        thread = self._thread
        if thread is not None and thread != threading.get_ident():
            raise RuntimeError(self._busy(what))

    def _busy(self, what: str) -> str:
        return (f"{what}: this LLM is already running {self.running}; concurrent use of one LLM is not "
                f"supported (it is not thread-safe, as vLLM's LLM is not): call it from one thread at a "
                f"time, or give each thread its own LLM")
