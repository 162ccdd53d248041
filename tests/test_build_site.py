"""scripts/build_site.py without a kernel or a browser: each static page holds plotly.js at most once."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import pytest
from scriptkit import load_script

ROOT = Path(__file__).resolve().parents[1]
site = load_script("scripts/build_site.py")


def _saved_figure_widget(title: str) -> dict:
    """A FigureWidget's entry in a notebook's saved widget state, as nbclient stores it."""
    w = go.FigureWidget(go.Bar(y=[1, 2, 3]), layout_title_text=title)
    state = {k: getattr(w, k) for k in ("_esm", "_widget_data", "_widget_layout")}
    return {"model_name": "AnyModel", "model_module": "anywidget", "model_module_version": "~0.9.*", "state": state}


def executed_page_with_two_playgrounds() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    fig = go.Figure(go.Scatter(y=[3, 1, 2]), layout_title_text="a plain figure")
    cell = nbformat.v4.new_code_cell("fig")
    cell.outputs = [nbformat.v4.new_output("display_data", data={site.PLOTLY: json.loads(fig.to_json())})]
    setup = nbformat.v4.new_code_cell("print('setup done')  # SETUP-CODE", metadata={"jupyter": {"source_hidden": True}})
    setup.outputs = [nbformat.v4.new_output("stream", name="stdout", text="setup done\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 · Site check"), setup, cell]
    state = {"a": _saved_figure_widget("one"), "b": _saved_figure_widget("two")}
    nb.metadata["widgets"] = {site.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


@pytest.fixture(scope="module")
def nb():
    return executed_page_with_two_playgrounds()


def test_saved_widgets_would_carry_plotlyjs_once_each(nb):
    raw = json.dumps(nb.metadata["widgets"])  # what the page held before: the check can fail
    assert site.plotlyjs_copies(raw) == 2


def test_embedded_page_holds_plotlyjs_once(nb):
    page = site.to_html(nb, [])
    assert site.plotlyjs_copies(page) == 1
    state = json.loads(page.split('<script type="application/vnd.jupyter.widget-state+json">')[1].split("</script>")[0])
    kept = state["state"]
    assert [e["state"]["_esm"] for e in kept.values()] == [site.FIGURE_WIDGET_ESM] * 2
    assert kept["a"]["state"]["_widget_layout"]["title"]["text"] == "one"  # the figure itself is kept
    assert len(page) < 6 * 2**20


def test_cdn_page_loads_plotlyjs_once_and_embeds_none(nb):
    from plotly.offline import get_plotlyjs_version

    page = site.to_html(nb, [], plotlyjs="cdn")
    assert site.plotlyjs_copies(page) == 0
    assert page.count("https://cdn.plot.ly/plotly-") == 1 and f"plotly-{get_plotlyjs_version()}.min.js" in page
    assert len(page) < 2**20


def test_unknown_plotlyjs_mode_is_refused():
    with pytest.raises(ValueError, match="plotlyjs must be one of"):
        site.plotly_js("inline")


def test_collapsed_cells_show_only_their_output(nb):
    page = site.to_html(nb, [])
    assert "SETUP-CODE" not in page and "setup done" in page
    assert nb.cells[1].metadata.get("transient") is None  # the notebook itself is not changed


def test_an_english_page_and_its_translation_get_screenshots_of_their_own():
    en, zh = Path("site/01_kv_cache_math.html"), Path("site/zh-TW/01_kv_cache_math.html")
    assert site.shot_name(en) == "01_kv_cache_math.png"
    assert site.shot_name(zh) == "zh-TW-01_kv_cache_math.png"
