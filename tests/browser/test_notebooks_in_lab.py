"""Every notebook, the way a learner meets it: JupyterLab in headless Chromium, "Run All", then the sliders.

For each notebook in ``notebooks/`` (found by glob, so a new notebook joins automatically) the test
- waits for the kernel to be connected and idle, runs all cells, and asserts no cell shows an error
  (stderr output such as tqdm's progress bars is not an error) and no widget failed to display;
- asserts every plotly figure drew data;
- in every ``viz.widgets.interactive`` box (found by its ``paged-lab-readout``), moves each slider
  with the keyboard and asserts the figure's data and the readout change, and, before and after the
  moves, that the figure spans the output area's width and its title is drawn whole (not clipped);
- in the quiz of every series notebook (``paged_lab.quiz``, found by its ``paged-lab-quiz`` box),
  clicks one wrong and one right choice of its first multiple choice and reads both explanations, and
  answers its first number box (not a number, then too low / too high until right);
- measures the run's wall time and the kernel's peak memory and fails above the notebook's budget
  (the same limits as ``scripts/measure_notebooks.py``); the figures go to ``budget.json``.
"""

from __future__ import annotations

import json
import time

import nbformat
import psutil
import pytest
from labkit import (
    PANEL_READY,
    answer_number_box,
    budget,
    notebook_session,
    notebooks_dir,
    pick_until_right_and_wrong,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.browser

NOTEBOOKS = budget.discover(notebooks_dir())


KERNEL_ID = "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id"

RUN_ALL = """() => {
  window.__runAll = null;
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    (ok) => { window.__runAll = {ok: ok}; },
    (err) => { window.__runAll = {error: String(err)}; });
}"""

KERNEL_IDLE = """() => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  return k.status === 'idle';
}"""

# What the notebook model and the page say about every cell after the run.
REPORT = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = [];
  panel.content.widgets.forEach((cell, index) => {
    if (cell.model.type !== 'code') return;
    const outputs = cell.model.outputs.toJSON();
    cells.push({
      index: index,
      executed: cell.model.executionCount !== null,
      errors: outputs.filter((o) => o.output_type === 'error').map((o) => o.ename + ': ' + o.evalue),
      plotly: outputs.filter((o) => o.data && o.data['application/vnd.plotly.v1+json']).length,
    });
  });
  const root = panel.node;
  const plots = Array.from(root.querySelectorAll('.js-plotly-plot'));
  return {
    cells: cells,
    errorNodes: root.querySelectorAll('[data-mime-type="application/vnd.jupyter.error"]').length,
    // ipywidgets 8 draws a failed widget as an error icon ("Click to show javascript error")
    widgetErrors: Array.from(root.querySelectorAll('.jupyter-widgets-error-widget')).map((n) => n.innerText)
      .concat(Array.from(root.querySelectorAll('.jp-OutputArea-output')).map((n) => n.innerText)
        .filter((t) => /Error displaying widget|Failed to load (model|view) class/.test(t))),
    plots: plots.map((p) => ({traces: (p.data || []).length,
      // marks plotly drew: cartesian traces, heatmap images, pie slices, tables
      drawn: p.querySelectorAll('.main-svg .trace, .main-svg .hm, .main-svg .slice, .main-svg .table').length})),
    readouts: root.querySelectorAll('.paged-lab-readout').length,
    // kernel-side span of the run (recordTiming): first cell busy -> last cell idle, in ms
    kernelMs: (() => {
      const t = panel.content.widgets.filter((c) => c.model.type === 'code')
        .map((c) => c.model.getMetadata('execution')).filter((e) => e && e['iopub.status.busy']);
      if (!t.length) return null;
      const ends = t.map((e) => Date.parse(e['iopub.status.idle'] || e['shell.execute_reply']));
      return Math.max(...ends) - Math.min(...t.map((e) => Date.parse(e['iopub.status.busy'])));
    })(),
  };
}"""

# A fingerprint of what an interactive box shows: the figure's data and title, and the readout text.
SNAPSHOT = """(box) => {
  const plot = box.querySelector('.js-plotly-plot');
  const pick = (t) => ({x: t.x, y: t.y, z: t.z, text: t.text, values: t.values, base: t.base, name: t.name});
  return {
    figure: plot ? JSON.stringify([(plot.data || []).map(pick), plot.layout && plot.layout.title]) : null,
    readout: box.querySelector('.paged-lab-readout').innerText,
  };
}"""


# Where an interactive box's figure and its title sit, against the output area that holds the box.
GEOMETRY = """(box) => {
  const output = box.closest('.jp-OutputArea-output') || box.parentElement;
  const svg = box.querySelector('.js-plotly-plot .main-svg');
  if (!svg) return null;
  const frame = svg.getBoundingClientRect();
  const title = box.querySelector('.js-plotly-plot .gtitle');
  const t = title && title.textContent ? title.getBoundingClientRect() : null;
  return {outputWidth: output.getBoundingClientRect().width, figure: {left: frame.left, right: frame.right,
          top: frame.top, width: frame.width},
          title: t && {text: title.textContent, left: t.left, right: t.right, top: t.top}};
}"""

# The figure may leave this share of the output area's width unused (padding and scrollbars).
MIN_WIDTH_SHARE = 0.9


def _check_fits(box, where: str) -> None:
    """The box's figure spans the output area's width, and its title lies inside the figure (SVG
    clips what is outside: 07's title once read "... 3 waitin")."""
    g = box.evaluate(GEOMETRY)
    assert g is not None, f"{where}: no drawn figure in the box"
    fig, out = g["figure"], g["outputWidth"]
    assert fig["width"] >= MIN_WIDTH_SHARE * out, (
        f"{where}: the figure is {fig['width']:.0f} px wide in an output area of {out:.0f} px "
        f"(at least {MIN_WIDTH_SHARE:.0%} expected)")
    t = g["title"]
    if t is not None:
        inside = t["left"] >= fig["left"] - 1 and t["right"] <= fig["right"] + 1 and t["top"] >= fig["top"] - 1
        assert inside, (f"{where}: the title {t['text']!r} is clipped: it spans x {t['left']:.0f}-{t['right']:.0f}, "
                        f"top {t['top']:.0f}, in a figure at x {fig['left']:.0f}-{fig['right']:.0f}, top {fig['top']:.0f}")


def _kernel_pid(kernel_id: str) -> int:
    """The kernel process the server started for ``kernel_id`` (its connection file names the id)."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(kernel_id in part for part in proc.info["cmdline"] or ()):
            return proc.info["pid"]
    raise LookupError(f"no process found for kernel {kernel_id}")


def _record(artifacts_dir, name: str, **figures) -> None:
    path = artifacts_dir / "budget.json"
    rows = json.loads(path.read_text()) if path.exists() else {}
    rows[name] = figures
    path.write_text(json.dumps(rows, indent=1, sort_keys=True))


def test_series_is_not_empty():
    assert NOTEBOOKS, f"no NN_*.ipynb notebooks found in {notebooks_dir()}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_reacts_in_jupyterlab(path, lab_server, page, artifacts_dir):
    _open_and_check(page, lab_server, path, artifacts_dir)


COLAB_PATH = """import ipywidgets as W
import plotly.graph_objects as go
from paged_lab.viz.widgets import interactive

def bars(n, mode):
    trace = go.Bar if mode == "bars" else go.Scatter
    return go.Figure(trace(y=list(range(1, n + 1))), layout_title_text=f"{n} {mode}")

controls = {"n": W.IntSlider(value=3, min=1, max=6, description="n"),
            "mode": W.Dropdown(options=["bars", "line"], description="mode")}
interactive(bars, controls, readout=lambda fig, n, mode: f"{n} points as {mode}", use_figure_widget=False)"""


def test_colab_fallback_redraws_in_jupyterlab(lab_server, page, artifacts_dir):
    """The path Colab takes (a plain figure re-drawn in an Output widget), driven by a real slider."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(COLAB_PATH)]
    path = lab_server.root_dir / "97_colab_fallback.ipynb"
    nbformat.write(nb, path)
    _open_and_check(page, lab_server, path, artifacts_dir, record=False)
    assert (artifacts_dir / "97_colab_fallback-box0.png").exists()


def _open_and_check(page, lab_server, path, artifacts_dir, record: bool = True) -> None:
    page.goto(lab_server.notebook_url(path.name))
    page.wait_for_function(PANEL_READY, timeout=90_000)
    with notebook_session(page, artifacts_dir, path.stem):
        _run_and_check(page, path, artifacts_dir, record)


def _run_and_check(page, path, artifacts_dir, record: bool) -> None:
    limit = budget.time_limit(path)
    pid = _kernel_pid(page.evaluate(KERNEL_ID))
    start = time.perf_counter()
    page.evaluate(RUN_ALL)
    # Twice the budget before giving up, so an over-budget notebook reports its time, not a timeout.
    try:
        page.wait_for_function("() => window.__runAll !== null", timeout=2 * limit * 1000, polling=250)
    except PlaywrightTimeout:
        peak = budget.peak_rss_bytes(pid) / 1e9
        pytest.fail(
            f"{path.name}: Run All did not finish within {2 * limit:.0f} s (twice its {limit:.0f} s limit); "
            f"the kernel's peak RAM so far was {peak:.2f} GB (limit {budget.MEMORY_LIMIT_BYTES / 1e9:.0f} GB)"
        )
    browser_seconds = time.perf_counter() - start
    run = page.evaluate("() => window.__runAll")
    page.wait_for_function(KERNEL_IDLE, timeout=30_000)
    report = page.evaluate(REPORT)
    # The budget is on the kernel's own time (what nbclient measures headless); the browser's
    # rendering on top of it is recorded beside it.
    kernel_seconds = report["kernelMs"] / 1000 if report["kernelMs"] is not None else browser_seconds
    measured = budget.Measurement(path.name, kernel_seconds, budget.peak_rss_bytes(pid))
    if record:
        _record(
            artifacts_dir,
            path.name,
            kernel_seconds=round(kernel_seconds, 2),
            browser_seconds=round(browser_seconds, 2),
            peak_bytes=measured.peak_bytes,
            time_limit=limit,
        )

    errors = [f"cell {c['index']}: {e}" for c in report["cells"] for e in c["errors"]]
    assert not errors, f"{path.name} shows errors:\n" + "\n".join(errors)
    assert report["errorNodes"] == 0, f"{path.name}: {report['errorNodes']} error outputs on the page"
    assert run.get("ok") is True, f"{path.name}: Run All did not finish cleanly: {run}"
    not_run = [c["index"] for c in report["cells"] if not c["executed"]]
    assert not not_run, f"{path.name}: cells {not_run} were not executed"
    assert not report["widgetErrors"], f"{path.name}: widgets failed to display: {report['widgetErrors']}"

    # Every figure the notebook shows is drawn, with data.
    expected_plots = sum(c["plotly"] for c in report["cells"])
    page.wait_for_function(
        f"() => document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot .main-svg').length >= {expected_plots}",
        timeout=30_000,
    )
    report = page.evaluate(REPORT)
    blank = [i for i, p in enumerate(report["plots"]) if p["traces"] == 0 or p["drawn"] == 0]
    assert not blank, f"{path.name}: plotly figures {blank} (in page order) have no data drawn"

    _move_sliders(page, path, artifacts_dir)
    _answer_a_quiz(page, path, artifacts_dir, required=record and not path.name.startswith("00_"))
    assert not measured.problems(), "; ".join(measured.problems())


CHANGED = (
    "([box, before, both]) => { const s = (" + SNAPSHOT + ")(box);"
    " const f = s.figure !== before.figure, r = s.readout !== before.readout;"
    " return both ? f && r : f || r; }"
)


def _after_change(page, box, before, has_readout: bool) -> dict:
    """What the box shows once the kernel has answered a control change (or after 20 s of nothing)."""
    element = box.element_handle()
    try:  # first anything, then give the other part (figure or readout) a moment to follow
        page.wait_for_function(CHANGED, arg=[element, before, False], timeout=20_000, polling=100)
        if has_readout:
            page.wait_for_function(CHANGED, arg=[element, before, True], timeout=1_000, polling=100)
    except PlaywrightTimeout:  # the caller's asserts say what did and did not change
        pass
    return _settled(page, box)


def _settled(page, box, quiet_ms: int = 300, timeout_s: float = 5.0) -> dict:
    """The box's snapshot once it has stopped changing for ``quiet_ms`` (a re-draw can arrive in
    several messages; the next control's "before" must not catch the tail of this one)."""
    last, deadline = box.evaluate(SNAPSHOT), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        page.wait_for_timeout(quiet_ms)
        now = box.evaluate(SNAPSHOT)
        if now == last:
            break
        last = now
    return last


def _move_sliders(page, path, artifacts_dir) -> None:
    """In every interactive box: move each slider with the keyboard and pick another option in each
    dropdown. Every move must change what the learner sees; a slider must change the figure; and
    where the box has a readout, some control must update it."""
    readouts = page.locator(".jp-NotebookPanel .paged-lab-readout")
    for b in range(readouts.count()):
        box = readouts.nth(b).locator("xpath=..")  # interactive() puts the readout right in its VBox
        box.scroll_into_view_if_needed()
        has_readout = bool(box.evaluate(SNAPSHOT)["readout"].strip())
        where = f"{path.name}, interactive box {b}"
        _check_fits(box, where)
        moves = []  # (control, figure changed, readout changed)
        handles = box.locator(".noUi-handle")  # ipywidgets 8 sliders: noUi handles, not <input type=range>
        for h in range(handles.count()):
            handle, before = handles.nth(h), box.evaluate(SNAPSHOT)
            now, top = float(handle.get_attribute("aria-valuenow")), float(handle.get_attribute("aria-valuemax"))
            handle.focus()
            handle.press("ArrowLeft" if now >= top else "ArrowRight")
            after = _after_change(page, box, before, has_readout)
            label = box.locator(".widget-slider .widget-label").nth(h).inner_text()
            moves.append((f"slider {label!r}", after["figure"] != before["figure"], after["readout"] != before["readout"]))
        selects = box.locator(".widget-dropdown select")
        for d in range(selects.count()):
            select, before = selects.nth(d), box.evaluate(SNAPSHOT)
            n, index = select.locator("option").count(), select.evaluate("(s) => s.selectedIndex")
            if n < 2:
                continue
            select.select_option(index=index - 1 if index == n - 1 else index + 1)
            after = _after_change(page, box, before, has_readout)
            label = box.locator(".widget-dropdown .widget-label").nth(d).inner_text()
            moves.append((f"dropdown {label!r}", after["figure"] != before["figure"], after["readout"] != before["readout"]))
        box.screenshot(path=str(artifacts_dir / f"{path.stem}-box{b}.png"))

        _check_fits(box, where + " (after the moves)")
        dead = [name for name, fig, text in moves if not (fig or text)]
        assert not dead, f"{where}: moving {dead} changed neither the figure nor the readout"
        if handles.count():
            assert any(fig for name, fig, _ in moves if name.startswith("slider")), (
                f"{where}: no slider moved with the keyboard changed the figure's data"
            )
        if has_readout and moves:
            assert any(text for _, _, text in moves), f"{where}: no control updated the readout"


ENGLISH_MARKS = {"right": "✓ Right", "wrong": "✗ Not quite", "low": "✗ Too low", "high": "✗ Too high",
                 "nan": "✗ Not a number"}


def _answer_a_quiz(page, path, artifacts_dir, required: bool) -> None:
    """In the notebook's first quiz: click choices of its first multiple choice in order until one pick
    was wrong and one right, and read what each said; then answer its first number box."""
    quizzes = page.locator(".jp-NotebookPanel .paged-lab-quiz")
    if not quizzes.count():
        assert not required, f"{path.name}: no quiz (paged_lab.quiz) was displayed"
        return
    quiz = quizzes.first
    quiz.scroll_into_view_if_needed()
    check_a_choice_question(page, quiz, ENGLISH_MARKS, artifacts_dir / f"{path.stem}-quiz.png", path.name)
    numbers = quiz.locator(".paged-lab-quiz-number")
    if not numbers.count():
        assert not required, f"{path.name}: the quiz asks for no number (a paged_lab.quiz.NumberQuestion)"
        return
    box = numbers.first
    box.scroll_into_view_if_needed()
    said = answer_number_box(page, box, ENGLISH_MARKS, path.name)
    box.screenshot(path=str(artifacts_dir / f"{path.stem}-quiz-number.png"))
    assert any(text.startswith(ENGLISH_MARKS["low"]) for _, text in said) or len(said) == 2, said
    right = said[-1][1]
    assert len(right) > len("✓ Right: ") + len(said[-1][0]) + 20, f"{path.name}: no explanation after a right number"


def check_a_choice_question(page, quiz, marks: dict[str, str], shot, where: str) -> dict:
    """Pick a wrong and a right choice of the quiz's first multiple choice; each says why. Returns what they said."""
    question = quiz.locator(".paged-lab-quiz-choice").first
    question.scroll_into_view_if_needed()
    feedback = question.locator(".paged-lab-quiz-feedback").first
    seen, buttons = pick_until_right_and_wrong(page, feedback, marks["right"], marks["wrong"], where)
    question.screenshot(path=str(shot))
    assert set(seen) == {"right", "wrong"}, f"{where}: the quiz's first question gave only {seen}"
    (wrong, wrong_text), (right, right_text) = seen["wrong"], seen["right"]
    choice = buttons.nth(right).locator("xpath=following-sibling::*[1]").inner_text().strip()
    letter = "abcdefgh"[wrong]
    assert f"({letter})" in wrong_text or f"（{letter}）" in wrong_text, f"{where}: a wrong pick should name the pick: {wrong_text!r}"
    assert len(wrong_text) > len(marks["wrong"]) + 40, f"{where}: a wrong pick should say why it is wrong: {wrong_text!r}"
    assert choice and choice in right_text, f"{where}: the right pick should repeat the answer {choice!r}"
    assert len(right_text) > len(marks["right"]) + len(choice) + 20, f"{where}: no explanation after a right pick"
    assert choice not in wrong_text, f"{where}: a wrong pick gave the answer away"
    assert "mod-danger" in (buttons.nth(wrong).get_attribute("class") or "")
    assert "mod-success" in (buttons.nth(right).get_attribute("class") or "")
    return {"wrong": wrong_text, "right": right_text}
