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
  const kernel = panel && panel.sessionContext && panel.sessionContext.session && \
panel.sessionContext.session.kernel;
  return !!(kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
            && panel.content && panel.content.widgets.length > 0);
}"""

FEEDBACK_TEXT = "(fb) => fb.innerText.trim()"


def _changed(page, feedback, before: str) -> str:
    """The feedback text once the kernel has answered (it differs from ``before`` and is not empty)."""
    page.wait_for_function(f"([fb, before]) => ({FEEDBACK_TEXT})(fb) !== before && "
                           f"({FEEDBACK_TEXT})(fb) !== ''",
                           arg=[feedback.element_handle(), before], timeout=20_000, polling=100)
    return feedback.evaluate(FEEDBACK_TEXT)


def pick_until_right_and_wrong(page, feedback, right: str, wrong: str, where: str):
    """Click the choices of the quiz question that holds ``feedback`` in order until one pick was
    right and one wrong, checking the feedback the kernel sent back after each (it starts with
    ``right`` or ``wrong``). Returns ``({"right"|"wrong": (button index, feedback text)}, buttons)``."""
    buttons = feedback.locator("xpath=..").locator("button")
    seen = {}
    for b in range(buttons.count()):
        before = feedback.evaluate(FEEDBACK_TEXT)
        buttons.nth(b).click()
        text = _changed(page, feedback, before)
        kind = "right" if text.startswith(right) else "wrong"
        assert kind == "right" or text.startswith(wrong), f"{where}: unexpected feedback {text!r}"
        seen.setdefault(kind, (b, text))
        if len(seen) == 2:
            break
    return seen, buttons


def answer_number_box(page, box, marks: dict[str, str], where: str, most: int = 64) -> list[tuple[str, str]]:
    """Answer the number question in ``box`` (its ``paged-lab-quiz-number`` VBox) as a learner who
    reads the feedback would: first type something that is not a number, then halve the range that
    the too-low / too-high feedback leaves until the box says right (the answers are whole numbers
    >= 0). ``marks``: how the feedback starts, for "right", "low", "high" and "nan". Returns what was
    typed and what the box answered, in order."""
    entry, button = box.locator("input").first, box.locator("button").first
    feedback = box.locator(".paged-lab-quiz-feedback").first
    said = []

    def check(typed: str) -> str:
        before = feedback.evaluate(FEEDBACK_TEXT)
        entry.fill(typed)
        button.click()  # the box loses focus (its value reaches the kernel), then Check
        said.append((typed, _changed(page, feedback, before)))
        return said[-1][1]

    text = check("a few")
    assert text.startswith(marks["nan"]) and "a few" in text, f"{where}: not-a-number feedback {text!r}"
    low, high, guess = None, None, 0
    for _ in range(most):
        text = check(str(guess))
        if text.startswith(marks["right"]):
            return said
        # the quiz repeats it as it shows numbers, grouped ("1,023"), so an answer past 999 reads as one
        assert f"{guess:,}" in text, f"{where}: the feedback should repeat the number typed: {text!r}"
        if text.startswith(marks["low"]):
            low = guess
        else:
            assert text.startswith(marks["high"]), f"{where}: unexpected feedback {text!r}"
            high = guess
        assert low is not None, f"{where}: 0 is too high: the answer is not a whole number >= 0"
        guess = 2 * low + 1 if high is None else (low + high) // 2
        assert guess != low and guess != high, f"{where}: no whole number between {low} and {high}: {said}"
    raise AssertionError(f"{where}: no right answer after {most} tries: {said}")


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
