"""Notebook 05's time section in a real JupyterLab: the throughput-latency figure is drawn, and each
slider of its playground (arrival rate, block size, number of requests) redraws the figure and the
readout. (``test_notebooks_in_lab.py`` runs every notebook generically; this test names what the
time section must show.)"""

from __future__ import annotations

import time

import pytest
from labkit import notebook_session

pytestmark = pytest.mark.browser

NOTEBOOK = "05_continuous_batching.ipynb"

READY = """() => {
  const p = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = p && p.sessionContext && p.sessionContext.session && p.sessionContext.session.kernel;
  return !!(k && k.connectionStatus === 'connected' && k.status === 'idle' && p.content.widgets.length > 0);
}"""

RUN_ALL = """() => { window.__runAll = null;
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    (ok) => { window.__runAll = {ok: ok}; }, (err) => { window.__runAll = {error: String(err)}; }); }"""

# The plotly figures of the curve (a trace per design, named after it), and how many traces each drew.
CURVES = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot'))
  .filter((p) => (p.data || []).some((t) => t.name === 'continuous batching, paged'))
  .map((p) => ({traces: p.data.length, drawn: p.querySelectorAll('.main-svg .trace').length}))"""

SNAPSHOT = """(box) => { const p = box.querySelector('.js-plotly-plot');
  return {figure: p ? JSON.stringify([p.data.map((t) => [t.x, t.y]), p.layout.title]) : null,
          readout: box.querySelector('.paged-lab-readout').innerText}; }"""


def _settled(page, box, before, timeout_s: float = 30.0) -> dict:
    """The box once both the figure and the readout differ from ``before`` and stay put for 0.5 s."""
    deadline, last = time.monotonic() + timeout_s, box.evaluate(SNAPSHOT)
    while time.monotonic() < deadline:
        page.wait_for_timeout(500)
        now = box.evaluate(SNAPSHOT)
        if now == last and now["figure"] != before["figure"] and now["readout"] != before["readout"]:
            return now
        last = now
    return last


def test_time_section_draws_the_curve_and_its_sliders_redraw_it(lab_server, page, artifacts_dir):
    page.goto(lab_server.notebook_url(NOTEBOOK))
    page.wait_for_function(READY, timeout=90_000)
    with notebook_session(page, artifacts_dir, "05-time"):
        page.evaluate(RUN_ALL)
        page.wait_for_function("() => window.__runAll !== null", timeout=240_000, polling=250)
        assert page.evaluate("() => window.__runAll") == {"ok": True}
        page.wait_for_function(f"() => ({CURVES})().length >= 2", timeout=60_000)
        curves = page.evaluate(CURVES)
        # the section's figure and the playground's: 3 designs x 2 panels, plus the ringed points
        assert all(c["traces"] >= 6 and c["drawn"] >= 6 for c in curves), curves

        box = page.locator(".jp-NotebookPanel .paged-lab-readout",
                           has_text="arrivals per step").locator("xpath=..")
        box.scroll_into_view_if_needed()
        handles = box.locator(".noUi-handle")
        assert handles.count() == 3  # rate, block_size, requests
        for h in range(3):
            handle, before = handles.nth(h), box.evaluate(SNAPSHOT)
            handle.focus()
            handle.press("ArrowRight")
            after = _settled(page, box, before)
            label = box.locator(".widget-slider .widget-label").nth(h).inner_text()
            assert after["figure"] != before["figure"], f"slider {label!r} did not redraw the figure"
            assert after["readout"] != before["readout"], f"slider {label!r} did not update the readout"
        box.screenshot(path=str(artifacts_dir / "05-time-playground.png"))
