"""Every notebook, the way a learner meets it: JupyterLab in headless Chromium, "Run All", then the sliders.

For each notebook in ``notebooks/`` and its zh-TW twin (found by glob, so a new notebook joins
automatically), at 1440 x 900, the test
- waits for the kernel to be connected and idle, runs all cells, and asserts no cell shows an error
  (stderr output such as tqdm's progress bars is not an error) and no widget failed to display;
- asserts every plotly figure drew data, and that no label of a block figure (03, 04, 07: the traces
  named ``pool`` and ``logical``) is partly covered by a block's fill, from the drawn geometry;
- in every ``viz.widgets.interactive`` box (found by its ``paged-lab-readout``) measures every
  slider's track (at least MIN_TRACK_PX) and checks its label is whole and clear of the track and
  knob; moves each slider with the keyboard, picks another option of each dropdown, presses another
  toggle button, flips each checkbox, and asserts what the learner sees changes while the figure
  keeps its size, its plot area and every axis range after every one of them (a playground holds
  still);
  and, before and after the moves, that the figure spans the output area's width, its title is
  drawn whole (not clipped) and no block label is covered;
- in at least one quiz per series notebook (``paged_lab.classroom.quiz``, found by its
  ``paged-lab-quiz`` box),
  clicks one wrong and one right choice and checks what the learner is told after each;
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
TWINS = budget.discover(notebooks_dir() / "zh-TW")
# What a quiz says after a right and a wrong pick, and how it names a pick, per edition.
# What the quiz's feedback starts with, per edition (paged_lab.classroom.quiz; the zh-TW
# words from locale/zh-TW.json).
QUIZ_MARKS = {
    "en": {"right": "✓ Right", "wrong": "✗ Not quite", "low": "✗ Too low", "high": "✗ Too high",
           "nan": "✗ Not a number"},
    "zh-TW": {"right": "✓ 答對了", "wrong": "✗ 不太對", "low": "✗ 太小了", "high": "✗ 太大了",
              "nan": "✗ 不是數字"},
}
MIN_TRACK_PX = 200  # a slider's track at 1440 px: a learner can move it one value at a time


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
      drawn: \
p.querySelectorAll('.main-svg .trace, .main-svg .hm, .main-svg .slice, .main-svg .table').length})),
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

# Every slider of an interactive box: its track's width, and whether its label (above it, in the
# control's box) is whole and clear of the track and the knob.
TRACKS = """(box) => {
  const r = (e) => e.getBoundingClientRect();
  const meet = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5
                      && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  const sliders = Array.from(box.querySelectorAll('.widget-slider'));
  return sliders.map((s) => {
    const cell = s.closest('.paged-lab-control');
    const label = cell && cell.querySelector('.paged-lab-label .widget-html-content');
    const track = s.querySelector('.noUi-target'), knob = s.querySelector('.noUi-handle');
    const text = label ? label.innerText.trim() : (s.querySelector('.widget-label') || s).innerText.trim();
    if (!label || !track) return {label: text, track: track ? r(track).width : 0, whole: false, clear: false};
    const L = r(label.firstElementChild || label);
    return {label: text, track: r(track).width,
            whole: label.scrollWidth <= label.clientWidth + 1 && L.right <= r(cell).right + 1,
            clear: !meet(L, r(track)) && !meet(L, r(knob))};
  });
}"""

# What must not change while a slider moves: the figure's size, its plot area and every axis range.
FRAME = """(box) => {
  const p = box.querySelector('.js-plotly-plot'), fl = p && p._fullLayout;
  if (!fl) return null;
  const svg = p.querySelector('.main-svg').getBoundingClientRect();
  const axes = {};
  Object.keys(fl).filter((k) => /^[xy]axis[0-9]*$/.test(k)).sort()
    .forEach((k) => { axes[k] = (fl[k].range || []).map((v) => Math.round(Number(v) * 1e4) / 1e4); });
  const z = fl._size;
  return {size: [Math.round(svg.width), Math.round(svg.height)],
          plot: [Math.round(z.l), Math.round(z.t), Math.round(z.w), Math.round(z.h)], axes: axes};
}"""

# Block labels a fill covers, from the drawn geometry: a label (the text of a trace named "pool" or
# "logical") that meets a shape named "fill" must lie inside it, in an ink that reads on it (contrast
# at least 3:1). Returns the problems found.
COVERED = """(plot) => {
  const names = (plot.data || []).map((t) => t.name);
  if (!names.includes('pool')) return null;
  const shapes = (plot._fullLayout && plot._fullLayout.shapes) || [];
  const drawn = {};
  plot.querySelectorAll('.shapelayer path[data-index]').forEach((e) => { \
drawn[e.getAttribute('data-index')] = e; });
  const rgb = (c) => { const x = document.createElement('canvas').getContext('2d'); x.fillStyle = c;
    const h = x.fillStyle; return h.startsWith('#') ? [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16))
      : h.match(/[0-9.]+/g).slice(0, 3).map(Number); };
  const lum = (c) => { const v = rgb(c).map((u) => { u /= 255; return u <= 0.03928 ? u / 12.92 : \
((u + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const contrast = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); \
return (x + 0.05) / (y + 0.05); };
  const fills = shapes.map((s, i) => [s, drawn[i]]).filter(([s, e]) => s.name === 'fill' && e)
    .map(([s, e]) => Object.assign(e.getBoundingClientRect().toJSON(), {color: s.fillcolor}));
  const traces = plot.querySelectorAll('.scatterlayer .trace');
  const problems = [];
  let labels = 0;
  names.forEach((name, i) => {
    if (!['pool', 'logical'].includes(name) || !traces[i]) return;
    traces[i].querySelectorAll('.textpoint text').forEach((t) => {
      if (!t.textContent.trim()) return;
      labels += 1;
      const a = t.getBoundingClientRect();
      fills.forEach((f) => {
        const meet = Math.min(a.right, f.right) - Math.max(a.left, f.left) > 1
                  && Math.min(a.bottom, f.bottom) - Math.max(a.top, f.top) > 1;
        const inside = a.left >= f.left - 1 && a.right <= f.right + 1 && a.top >= f.top - 1 && \
a.bottom <= f.bottom + 1;
        if (meet && !inside) problems.push(`${name} label "${t.textContent}" is partly under a fill`);
        const ink = getComputedStyle(t).fill;
        if (inside && contrast(ink, f.color) < 3)
          problems.push(`${name} label "${t.textContent}" is drawn in ${ink} on ${f.color}`);
      });
    });
  });
  return {labels: labels, fills: fills.length, problems: problems};
}"""


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
        inside = (t["left"] >= fig["left"] - 1 and t["right"] <= fig["right"] + 1
                  and t["top"] >= fig["top"] - 1)
        assert inside, (f"{where}: the title {t['text']!r} is clipped: it spans x "
                        f"{t['left']:.0f}-{t['right']:.0f}, top {t['top']:.0f}, in a figure at x "
                        f"{fig['left']:.0f}-{fig['right']:.0f}, top {fig['top']:.0f}")


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


def _covered_labels(page, where: str, scope: str = ".jp-NotebookPanel") -> int:
    """Assert no block figure under ``scope`` has a label partly under a fill; returns the labels seen."""
    seen = 0
    for i, found in enumerate(page.locator(f"{scope} .js-plotly-plot").evaluate_all(
        f"(ps) => ps.map({COVERED})")):
        if found is None:
            continue
        assert not found["problems"], f"{where}, block figure {i}: " + "; ".join(found["problems"])
        seen += found["labels"]
    return seen


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_reacts_in_jupyterlab(path, lab_server, page, artifacts_dir):
    _open_and_check(page, lab_server, path, artifacts_dir)


@pytest.mark.parametrize("path", TWINS, ids=[f"zh-TW-{p.stem}" for p in TWINS])
def test_zh_tw_twin_runs_and_reacts_in_jupyterlab(path, lab_server, page, artifacts_dir):
    """The same checks on the zh-TW edition: its labels, titles and readouts are other words, of other
    lengths (05's 記憶體池大小（block 數） was clipped by its knob)."""
    _open_and_check(page, lab_server, path, artifacts_dir, lang="zh-TW")


COLAB_PATH = """import ipywidgets as W
import plotly.graph_objects as go
from paged_lab.viz.widgets import interactive

def bars(n, mode):  # fixed axes, as every playground of the series: the sliders move the data only
    trace = go.Bar if mode == "bars" else go.Scatter
    return go.Figure(trace(y=list(range(1, n + 1))), layout_title_text=f"{n} {mode}",
                     layout_xaxis_range=[-0.5, 5.5], layout_yaxis_range=[0, 7])

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


def _open_and_check(page, lab_server, path, artifacts_dir, record: bool = True, lang: str = "en") -> None:
    name = path.name if lang == "en" else f"{lang}/{path.name}"
    page.goto(lab_server.notebook_url(name))
    page.wait_for_function(PANEL_READY, timeout=90_000)
    with notebook_session(page, artifacts_dir, path.stem if lang == "en" else f"{lang}-{path.stem}"):
        _run_and_check(page, path, artifacts_dir, record, lang)


def _run_and_check(page, path, artifacts_dir, record: bool, lang: str = "en") -> None:
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
    stem = path.stem if lang == "en" else f"{lang}-{path.stem}"
    if record:
        _record(
            artifacts_dir,
            path.name if lang == "en" else f"{lang}/{path.name}",
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
        "() => document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot .main-svg').length >= "
        f"{expected_plots}",
        timeout=30_000,
    )
    report = page.evaluate(REPORT)
    blank = [i for i, p in enumerate(report["plots"]) if p["traces"] == 0 or p["drawn"] == 0]
    assert not blank, f"{path.name}: plotly figures {blank} (in page order) have no data drawn"
    _covered_labels(page, f"{stem}")

    _move_sliders(page, path, artifacts_dir, stem)
    _answer_a_quiz(page, path, artifacts_dir, required=record and not path.name.startswith("00_"), lang=lang,
                   stem=stem)
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


def _close(a, b) -> bool:
    """Two FRAME readings alike: sizes and plot areas to a pixel, axis ranges to 1e-4 of their span."""
    if a is None or b is None or a["axes"].keys() != b["axes"].keys():
        return a == b
    if any(abs(x - y) > 1 for x, y in zip(a["size"] + a["plot"], b["size"] + b["plot"])):
        return False
    for k, r in a["axes"].items():
        span = max(abs(r[-1] - r[0]), 1e-9) if r else 1
        if len(r) != len(b["axes"][k]) or any(abs(x - y) > 1e-4 * span for x, y in zip(r, b["axes"][k])):
            return False
    return True


def _check_tracks(box, where: str) -> list[dict]:
    tracks = box.evaluate(TRACKS)
    for t in tracks:
        assert t["track"] >= MIN_TRACK_PX, (
            f"{where}: the slider {t['label']!r} has a {t['track']:.0f} px track (at least {MIN_TRACK_PX} px "
            "at 1440 px wide: a drag should move a value at a time)")
        assert t["whole"] and t["clear"], (f"{where}: the slider label {t['label']!r} is clipped or "
                                           f"under the track: {t}")
    return tracks


def _check_still(box, frame: dict, where: str, what: str) -> None:
    """The figure kept its size, its plot area and every axis range (``frame``: FRAME before the move)."""
    moved = box.evaluate(FRAME)
    assert _close(frame, moved), (f"{where}: moving {what} changed the figure's size or axes (a playground "
                                  f"holds still):\nbefore {frame}\nafter  {moved}")


def _other_controls(box):
    """Every control of the box but its sliders, as (kind, element, a function that moves it once):
    each dropdown to its next option (the previous one from the last), each toggle-button group to a
    button not pressed, each checkbox flipped."""
    out = []
    selects = box.locator(".widget-dropdown select")
    for d in range(selects.count()):
        select = selects.nth(d)
        n, index = select.locator("option").count(), select.evaluate("(s) => s.selectedIndex")
        if n >= 2:
            out.append(("dropdown", select, lambda s=select, i=(index - 1 if index == n - 1 else index + 1):
                        s.select_option(index=i)))
    groups = box.locator(".widget-toggle-buttons")
    for g in range(groups.count()):
        buttons = groups.nth(g).locator("button")
        idle = [buttons.nth(i) for i in range(buttons.count())
                if "mod-active" not in (buttons.nth(i).get_attribute("class") or "")]
        if idle:
            out.append(("toggle", groups.nth(g), idle[0].click))
    boxes = box.locator(".widget-checkbox input[type=checkbox]")
    for c in range(boxes.count()):
        out.append(("checkbox", boxes.nth(c), boxes.nth(c).click))
    return out


def _move_sliders(page, path, artifacts_dir, stem: str) -> None:
    """In every interactive box: measure every slider's track, move each slider with the keyboard, pick
    another option in each dropdown, press another toggle button and flip each checkbox. Every move must
    change what the learner sees; no move may change the figure's size, plot area or axes (a dropdown
    once moved 03's x range from 26.5 to 19.9); a slider must change the figure; and where the box has a
    readout, some control must update it."""
    readouts = page.locator(".jp-NotebookPanel .paged-lab-readout")
    for b in range(readouts.count()):
        box = readouts.nth(b).locator("xpath=..")  # interactive() puts the readout right in its VBox
        box.scroll_into_view_if_needed()
        has_readout = bool(box.evaluate(SNAPSHOT)["readout"].strip())
        where = f"{stem}, interactive box {b}"
        _check_fits(box, where)
        tracks = _check_tracks(box, where)
        moves = []  # (control, figure changed, readout changed)
        handles = box.locator(".noUi-handle")  # ipywidgets 8 sliders: noUi handles, not <input type=range>
        for h in range(handles.count()):
            handle, before = handles.nth(h), box.evaluate(SNAPSHOT)
            frame = box.evaluate(FRAME)
            now, top = float(handle.get_attribute("aria-valuenow")), float(handle.get_attribute(
                "aria-valuemax"))
            handle.focus()
            handle.press("ArrowLeft" if now >= top else "ArrowRight")
            after = _after_change(page, box, before, has_readout)
            label = tracks[h]["label"]
            moves.append((f"slider {label!r}", after["figure"] != before["figure"],
                          after["readout"] != before["readout"]))
            _check_still(box, frame, where, f"the slider {label!r}")
            _covered_labels(page, f"{where}, after moving {label!r}", scope=".jp-NotebookPanel")
        for kind, control, pick in _other_controls(box):
            before, frame = box.evaluate(SNAPSHOT), box.evaluate(FRAME)
            pick()
            after = _after_change(page, box, before, has_readout)
            label = control.locator("xpath=ancestor::*[contains(@class, 'paged-lab-control')][1]").locator(
                ".paged-lab-label").inner_text().strip()
            moves.append((f"{kind} {label!r}", after["figure"] != before["figure"],
                          after["readout"] != before["readout"]))
            _check_still(box, frame, where, f"the {kind} {label!r}")
            _covered_labels(page, f"{where}, after changing {label!r}", scope=".jp-NotebookPanel")
        box.screenshot(path=str(artifacts_dir / f"{stem}-box{b}.png"))

        _check_fits(box, where + " (after the moves)")
        _check_tracks(box, where + " (after the moves)")
        _covered_labels(page, where + " (after the moves)")
        dead = [name for name, fig, text in moves if not (fig or text)]
        assert not dead, f"{where}: moving {dead} changed neither the figure nor the readout"
        if handles.count():
            assert any(fig for name, fig, _ in moves if name.startswith("slider")), (
                f"{where}: no slider moved with the keyboard changed the figure's data"
            )
        if has_readout and moves:
            assert any(text for _, _, text in moves), f"{where}: no control updated the readout"


def _answer_a_quiz(page, path, artifacts_dir, required: bool, lang: str = "en",
                   stem: str | None = None) -> None:
    """In the notebook's first quiz: click choices of its first multiple choice in order until one pick
    was wrong and one right, and read what each said; then answer its first number box."""
    marks, stem = QUIZ_MARKS[lang], stem or path.stem
    quizzes = page.locator(".jp-NotebookPanel .paged-lab-quiz")
    if not quizzes.count():
        assert not required, f"{path.name}: no quiz (paged_lab.classroom.quiz) was displayed"
        return
    quiz = quizzes.first
    quiz.scroll_into_view_if_needed()
    check_a_choice_question(page, quiz, marks, artifacts_dir / f"{stem}-quiz.png", path.name)
    numbers = quiz.locator(".paged-lab-quiz-number")
    if not numbers.count():
        assert not required, (f"{path.name}: the quiz asks for no number (a "
                              "paged_lab.classroom.quiz.NumberQuestion)")
        return
    box = numbers.first
    box.scroll_into_view_if_needed()
    said = answer_number_box(page, box, marks, path.name)
    box.screenshot(path=str(artifacts_dir / f"{stem}-quiz-number.png"))
    assert any(text.startswith(marks["low"]) for _, text in said) or len(said) == 2, said
    right = said[-1][1]
    assert len(right) > len(marks["right"]) + 2 + len(said[-1][0]) + 20, (f"{path.name}: no explanation "
        "after a right number")


def check_a_choice_question(page, quiz, marks: dict[str, str], shot, where: str) -> dict:
    """Pick a wrong and a right choice of the quiz's first multiple choice; each says why.
    Returns what they said."""
    question = quiz.locator(".paged-lab-quiz-choice").first
    question.scroll_into_view_if_needed()
    feedback = question.locator(".paged-lab-quiz-feedback").first
    seen, buttons = pick_until_right_and_wrong(page, feedback, marks["right"], marks["wrong"], where)
    question.screenshot(path=str(shot))
    assert set(seen) == {"right", "wrong"}, f"{where}: the quiz's first question gave only {seen}"
    (wrong, wrong_text), (right, right_text) = seen["wrong"], seen["right"]
    choice = buttons.nth(right).locator("xpath=following-sibling::*[1]").inner_text().strip()
    letter = "abcdefgh"[wrong]
    assert f"({letter})" in wrong_text or f"（{letter}）" in wrong_text, (f"{where}: a wrong pick should "
        f"name the pick: {wrong_text!r}")
    assert len(wrong_text) > len(marks["wrong"]) + 40, (f"{where}: a wrong pick should say why it is "
                                                        f"wrong: {wrong_text!r}")
    assert choice and choice in right_text, f"{where}: the right pick should repeat the answer {choice!r}"
    assert len(right_text) > len(marks["right"]) + len(choice) + 20, (f"{where}: no explanation "
                                                                      "after a right pick")
    assert choice not in wrong_text, f"{where}: a wrong pick gave the answer away"
    assert "mod-danger" in (buttons.nth(wrong).get_attribute("class") or "")
    assert "mod-success" in (buttons.nth(right).get_attribute("class") or "")
    return {"wrong": wrong_text, "right": right_text}
