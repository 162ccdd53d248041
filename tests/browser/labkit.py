"""Shared by the browser conftest and tests: where the notebooks are, what their budgets are, and the
few page helpers more than one test uses."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


sys.path.insert(0, str(ROOT / "tests"))
from scriptkit import load_script  # noqa: E402  (re-exported for the browser tests)

# scripts/ is not a package; load the one module that defines the budgets so both places agree.
budget = load_script("scripts/measure_notebooks.py")


def notebooks_dir() -> Path:
    """The folder under test: ``notebooks/``, or ``$PAGED_LAB_NOTEBOOKS_DIR`` (to try a draft notebook)."""
    return Path(os.environ.get("PAGED_LAB_NOTEBOOKS_DIR", ROOT / "notebooks")).resolve()


# The open notebook panel once the app has restored it, with a kernel session.
PANEL_READY = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return !!(kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
            && panel.content && panel.content.widgets.length > 0);
}"""

FEEDBACK_TEXT = "(fb) => fb.innerText.trim()"


def pick_until_right_and_wrong(page, feedback, right: str, wrong: str, where: str):
    """Click the choices of the quiz question that holds ``feedback`` in order until one pick was
    right and one wrong, checking the feedback the kernel sent back after each (it starts with
    ``right`` or ``wrong``). Returns ``({"right"|"wrong": (button index, feedback text)}, buttons)``."""
    buttons = feedback.locator("xpath=..").locator("button")
    seen = {}
    for b in range(buttons.count()):
        before = feedback.evaluate(FEEDBACK_TEXT)
        buttons.nth(b).click()
        page.wait_for_function(f"([fb, before]) => ({FEEDBACK_TEXT})(fb) !== before && ({FEEDBACK_TEXT})(fb) !== ''",
                               arg=[feedback.element_handle(), before], timeout=20_000, polling=100)
        text = feedback.evaluate(FEEDBACK_TEXT)
        kind = "right" if text.startswith(right) else "wrong"
        assert kind == "right" or text.startswith(wrong), f"{where}: unexpected feedback {text!r}"
        seen.setdefault(kind, (b, text))
        if len(seen) == 2:
            break
    return seen, buttons


@contextlib.contextmanager
def notebook_session(page, artifacts_dir: Path, name: str):
    """Around a test's work in the open notebook: on a failure, keep what the learner would have seen
    (``NAME-FAILED.png``) and print what the page complained about; pass or fail, shut the kernel
    down, which frees its memory before the next notebook."""
    try:
        yield
    except Exception:
        page.screenshot(path=str(artifacts_dir / f"{name}-FAILED.png"))
        print(f"uncaught errors in the page: {page.problems or 'none'}")
        raise
    finally:
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
