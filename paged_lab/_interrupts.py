"""Steps a Ctrl-C cannot cut: a SIGINT that arrives during a step is held and raised at the step's end.

Python turns SIGINT (Ctrl-C in a terminal, "Interrupt kernel" in Jupyter: ipykernel sends the kernel
SIGINT and runs each cell under ``signal.default_int_handler``, ``Kernel.pre_handler_hook`` in
``ipykernel/kernelbase.py``) into a ``KeyboardInterrupt`` at whatever line runs next. In the middle of a
scheduler step that line may sit between two refcount changes of one block table. So an engine step
(``LLM.step``) and a ``simulate()`` step run inside ``atomic()``: a SIGINT that arrives there only sets a
flag, and the ``KeyboardInterrupt`` is raised when the step has finished, where the state is whole.

    with interrupts.held():             # once per generate() / simulate() call: installs the handler
        while work_left:
            with interrupts.atomic():   # one step; a Ctrl-C inside it is raised at its end
                step()

Only the main thread receives signals, and only while SIGINT's handler is Python's own
``default_int_handler`` is the handler replaced (for as long as ``held()`` or the outermost ``atomic()``
lasts; the previous one is put back). Another handler (a program's own, or ipykernel's handler for
``async`` cells) is left alone, and so are other threads: there ``atomic()`` does nothing. A SIGINT between
two steps of one call is raised at the end of the next step (or of the call); outside a call, at once.

What a signal cannot reach, an exception from inside a step still can (a bug, or a ``KeyboardInterrupt``
raised some other way). For those a call names its way back to a whole state:

    with interrupts.on_error(abort, requests):   # an exception escaping the body runs abort(err, requests)
        run_the_steps()                          # inside atomic(), then goes on

The engine's ``abort`` rebuilds the scheduler and the pool empty (``Scheduler.abort_all``), so it needs no
step to be atomic against those.
"""

from __future__ import annotations

import signal
import threading

_MAIN = threading.main_thread().ident


class _Held:
    """The SIGINT handler, and how many ``atomic()`` sections the main thread has open."""

    def __init__(self):
        self.depth = 0  # open atomic() sections (main thread only)
        self.pending = False  # a SIGINT arrived while our handler was installed
        self.previous = None  # the handler ours replaced; None: ours is not installed

    def on_sigint(self, signum, frame) -> None:
        self.pending = True  # (never raises: nothing here can be cut half-way)

    def install(self) -> bool:
        """Put our handler in place (main thread, Python's default handler only). True when it did."""
        if self.previous is not None or threading.get_ident() != _MAIN:
            return False
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        self.pending = False
        self.previous = signal.signal(signal.SIGINT, self.on_sigint)
        return True

    def restore(self) -> None:
        """Put the previous handler back, then raise the SIGINT that arrived meanwhile, if any."""
        signal.signal(signal.SIGINT, self.previous)
        self.previous = None
        self.raise_pending()

    def raise_pending(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt("interrupted (Ctrl-C): held until the step in progress had finished")


_HELD = _Held()


class held:
    """``with held():`` -- the handler stays installed for a whole call (cheaper than once per step). A
    SIGINT between two steps is raised at the end of the next step, or of the call."""

    __slots__ = ("installed",)

    def __enter__(self):
        self.installed = _HELD.install()
        return self

    def __exit__(self, *exc) -> None:
        if self.installed:
            _HELD.restore()


class atomic:
    """``with atomic():`` -- one step: a SIGINT in it raises ``KeyboardInterrupt`` when it ends. Nested
    sections raise at the end of the outermost one. Does nothing on another thread."""

    __slots__ = ("installed", "main")

    def __enter__(self):
        self.main = threading.get_ident() == _MAIN
        if self.main:
            self.installed = _HELD.depth == 0 and _HELD.install()  # (a step called outside held())
            _HELD.depth += 1
        return self

    def __exit__(self, *exc) -> None:
        if not self.main:
            return
        _HELD.depth -= 1
        if _HELD.depth:
            return
        if self.installed:
            _HELD.restore()
        elif _HELD.previous is not None:
            _HELD.raise_pending()


class on_error:
    """``with on_error(undo, *args):`` -- when an exception (``KeyboardInterrupt`` included) escapes the
    body, ``undo(err, *args)`` runs inside ``atomic()`` (a Ctrl-C meanwhile waits for it to finish) and the
    exception then goes on. A body that ends normally runs nothing."""

    __slots__ = ("undo", "args")

    def __init__(self, undo, *args):
        self.undo, self.args = undo, args

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if err is not None:
            with atomic():
                self.undo(err, *self.args)
        return False  # the exception goes on
