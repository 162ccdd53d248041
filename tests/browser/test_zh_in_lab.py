"""A zh-TW notebook the way a learner meets it: JupyterLab in headless Chromium, "Run All", a slider, a quiz.

The zh-TW edition is generated from the English notebooks (``scripts/build_zh.py``); its code is the
English code, so what can differ in the browser is what a reader sees: Chinese figure titles, readouts
and quiz feedback, and whether the browser has a font to draw them. The test
- runs ``notebooks/zh-TW/02_contiguous_vs_paged.ipynb`` (lockers, a playground, a quiz) and asserts no
  cell failed, every figure drew data, and the figures' titles are in Chinese;
- checks that the page draws CJK text with a real font, not the missing-glyph box (``make test-browser``
  installs Debian's ``fonts-noto-cjk``), and keeps screenshots for a person to look at;
- moves a slider of the playground and asserts the figure and the (Chinese) readout change;
- answers the quiz's first multiple choice wrongly and rightly and reads both Chinese explanations, and
  answers its first number box (not a number, too low / too high, right), in Chinese;
- holds the notebook to its English twin's time and 2 GB memory budget.
"""

from __future__ import annotations

import re
import time

import pytest
from labkit import PANEL_READY, answer_number_box, budget, notebook_session
from test_notebooks_in_lab import (
    KERNEL_ID,
    KERNEL_IDLE,
    REPORT,
    RUN_ALL,
    SNAPSHOT,
    _kernel_pid,
    _settled,
    check_a_choice_question,
)

pytestmark = pytest.mark.browser

NOTEBOOK = "zh-TW/02_contiguous_vs_paged.ipynb"
CJK = "[\u3400-\u9fff]"

# Width of a CJK string against the same number of characters no font has (drawn as .notdef boxes):
# equal widths mean the CJK text is drawn as boxes too. Measured in the font plotly asks for.
GLYPH_WIDTHS = """() => {
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = '16px "Open Sans", verdana, arial, sans-serif';
  const w = (s) => ctx.measureText(s).width;
  return {cjk: [w('置物櫃'), w('阿頁'), w('服務窗口')], boxes: [w('\\u{10FFFD}\\u{10FFFC}\\u{10FFFB}'),
          w('\\u{10FFFD}\\u{10FFFC}'), w('\\u{10FFFD}\\u{10FFFC}\\u{10FFFB}\\u{10FFFA}')]};
}"""

TITLES = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot'))
  .map((p) => (p.layout && p.layout.title && p.layout.title.text) || '')"""


def test_a_zh_tw_notebook_runs_reacts_and_draws_chinese(lab_server, page, artifacts_dir):
    path = lab_server.root_dir / NOTEBOOK
    assert path.exists(), f"{NOTEBOOK} is missing: run python scripts/build_zh.py"
    page.goto(lab_server.notebook_url(NOTEBOOK))
    page.wait_for_function(PANEL_READY, timeout=90_000)
    with notebook_session(page, artifacts_dir, "zh-TW-02"):
        _run_and_check(page, path, artifacts_dir)


def _run_and_check(page, path, artifacts_dir) -> None:
    limit = budget.time_limit(path)  # the English twin's budget: the number in the name decides it
    pid = _kernel_pid(page.evaluate(KERNEL_ID))
    start = time.perf_counter()
    page.evaluate(RUN_ALL)
    page.wait_for_function("() => window.__runAll !== null", timeout=2 * limit * 1000, polling=250)
    page.wait_for_function(KERNEL_IDLE, timeout=30_000)
    report = page.evaluate(REPORT)
    seconds = report["kernelMs"] / 1000 if report["kernelMs"] is not None else time.perf_counter() - start
    measured = budget.Measurement(f"zh-TW/{path.name}", seconds, budget.peak_rss_bytes(pid))

    errors = [f"cell {c['index']}: {e}" for c in report["cells"] for e in c["errors"]]
    assert not errors, ("the zh-TW notebook shows errors (the last cell lists untranslated text):\n"
                        + "\n".join(errors))
    assert page.evaluate("() => window.__runAll").get("ok") is True
    assert not report["widgetErrors"], report["widgetErrors"]
    expected = sum(c["plotly"] for c in report["cells"])
    page.wait_for_function(
        "() => document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot "
        f".main-svg').length >= {expected}",
        timeout=30_000)
    report = page.evaluate(REPORT)
    assert report["plots"] and all(p["traces"] and p["drawn"] for p in report["plots"]), report["plots"]

    titles = [t for t in page.evaluate(TITLES) if t]
    assert titles and all(re.search(CJK, t) for t in titles), f"figure titles not in Chinese: {titles}"
    widths = page.evaluate(GLYPH_WIDTHS)
    assert widths["cjk"] != widths["boxes"], f"CJK text is drawn as missing-glyph boxes: {widths}"
    first_plot = page.locator(".jp-NotebookPanel .js-plotly-plot").first
    first_plot.scroll_into_view_if_needed()
    first_plot.screenshot(path=str(artifacts_dir / "zh-TW-02-figure.png"))

    _move_a_slider(page, artifacts_dir)
    _answer_the_quiz(page, artifacts_dir)
    assert not measured.problems(), "; ".join(measured.problems())


def _move_a_slider(page, artifacts_dir) -> None:
    box = page.locator(".jp-NotebookPanel .paged-lab-readout").first.locator("xpath=..")
    box.scroll_into_view_if_needed()
    before = box.evaluate(SNAPSHOT)
    assert re.search(CJK, before["readout"]), f"the readout is not in Chinese: {before['readout']!r}"
    labels = box.locator(".widget-slider .widget-label").all_inner_texts()
    assert any(re.search(CJK, label) for label in labels), f"slider labels not in Chinese: {labels}"
    handle = box.locator(".noUi-handle").first
    now, top = float(handle.get_attribute("aria-valuenow")), float(handle.get_attribute("aria-valuemax"))
    handle.focus()
    handle.press("ArrowLeft" if now >= top else "ArrowRight")
    page.wait_for_function("([box, before]) => { const s = (" + SNAPSHOT + ")(box);"
                           " return s.figure !== before.figure && s.readout !== before.readout; }",
                           arg=[box.element_handle(), before], timeout=20_000, polling=100)
    after = _settled(page, box)
    assert re.search(CJK, after["readout"]) and after["figure"] != before["figure"]
    box.screenshot(path=str(artifacts_dir / "zh-TW-02-box0.png"))


ZH_MARKS = {"right": "✓ 答對了", "wrong": "✗ 不太對", "low": "✗ 太小了", "high": "✗ 太大了",
            "nan": "✗ 不是數字"}


def _answer_the_quiz(page, artifacts_dir) -> None:
    quiz = page.locator(".jp-NotebookPanel .paged-lab-quiz").first
    quiz.scroll_into_view_if_needed()
    assert "小測驗" in quiz.inner_text()
    said = check_a_choice_question(page, quiz, ZH_MARKS, artifacts_dir / "zh-TW-02-quiz.png", "zh-TW 02")
    assert all(re.search(CJK, text) for text in said.values()), said
    box = quiz.locator(".paged-lab-quiz-number").first
    box.scroll_into_view_if_needed()
    assert re.search(CJK, box.locator("button").first.inner_text()), "the Check button is not in Chinese"
    typed = answer_number_box(page, box, ZH_MARKS, "zh-TW 02")
    box.screenshot(path=str(artifacts_dir / "zh-TW-02-quiz-number.png"))
    assert all(re.search(CJK, text) for _, text in typed), typed
