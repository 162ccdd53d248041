"""scripts/build_site.py without a kernel or a browser: each static page holds plotly.js at most once,
and the offline check counts the figures a reader is meant to see."""

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
    return {"model_name": "AnyModel", "model_module": "anywidget", "model_module_version": "~0.9.*",
            "state": state}


def executed_page_with_two_playgrounds() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    fig = go.Figure(go.Scatter(y=[3, 1, 2]), layout_title_text="a plain figure")
    cell = nbformat.v4.new_code_cell("fig")
    cell.outputs = [nbformat.v4.new_output("display_data", data={site.PLOTLY: json.loads(fig.to_json())})]
    setup = nbformat.v4.new_code_cell("print('setup done')  # SETUP-CODE",
                                      metadata={"jupyter": {"source_hidden": True}})
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
    state = json.loads(page.split('<script type="application/vnd.jupyter.widget-state+json">')[1].split(
        "</script>")[0])
    kept = state["state"]
    assert [e["state"]["_esm"] for e in kept.values()] == [site.FIGURE_WIDGET_ESM] * 2
    assert kept["a"]["state"]["_widget_layout"]["title"]["text"] == "one"  # the figure itself is kept
    assert len(page) < 6 * 2**20


def test_cdn_page_loads_plotlyjs_once_and_embeds_none(nb):
    from plotly.offline import get_plotlyjs_version

    page = site.to_html(nb, [], plotlyjs="cdn")
    assert site.plotlyjs_copies(page) == 0
    assert (page.count("https://cdn.plot.ly/plotly-") == 1
            and f"plotly-{get_plotlyjs_version()}.min.js" in page)
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


def executed_page_with_an_output_playground() -> nbformat.NotebookNode:
    """A plain figure, then a playground as ``interactive()`` saves it: a VBox of the controls, the
    readout and an Output widget holding the live figure (plotly's JSON and its HTML, which calls
    Plotly.newPlot), all in the widget state; the cell's output is only a view of the VBox."""
    import plotly.io as pio

    fig = go.Figure(go.Bar(y=[1, 2]), layout_title_text="live")
    live = {site.PLOTLY: json.loads(fig.to_json()), "text/html": pio.to_html(fig, include_plotlyjs=False,
                                                                             full_html=False)}
    slider = {"model_name": "IntSliderModel", "state": {"description": "n", "value": 2}}
    state = {
        "slider": slider,
        "controls": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_slider"]}},
        "readout": {"model_name": "HTMLModel", "state": {"value": "2 bars",
                                                         "_dom_classes": ["paged-lab-readout"]}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [{"output_type": "display_data",
                                                                    "data": live}]}},
        "box": {"model_name": "VBoxModel",
                "state": {"children": ["IPY_MODEL_controls", "IPY_MODEL_readout", "IPY_MODEL_out"]}},
    }
    plain = nbformat.v4.new_code_cell("fig")
    plain.outputs = [nbformat.v4.new_output("display_data", data={
        site.PLOTLY: json.loads(go.Figure(go.Scatter(y=[3, 1, 2])).to_json())})]
    playground = nbformat.v4.new_code_cell("interactive(...)")
    playground.outputs = [nbformat.v4.new_output("display_data", data={
        site.WIDGET_VIEW: {"model_id": "box", "version_major": 2, "version_minor": 0},
        "text/plain": "VBox(...)"})]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 · Site check"), plain, playground]
    nb.metadata["widgets"] = {site.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


def test_the_offline_check_counts_the_figures_a_reader_is_meant_to_see():
    """make html --check once failed every page with a playground: it counted the live figure kept in
    the widget state, which an offline page cannot draw, beside the static picture that it does draw."""
    page = site.to_html(executed_page_with_an_output_playground(), [])
    assert page.count('class="paged-lab-static"') == 1 and "n = 2" in page  # the playground's static picture
    assert page.count("Plotly.newPlot(") == 3  # the plain figure, the static picture, the live figure
    assert site.figures_meant_to_draw(page) == 2  # the live figure is the widget manager's, online only


def test_each_page_is_titled_after_its_notebook():
    """Every page's <title> was "Notebook"."""
    page = site.to_html(executed_page_with_an_output_playground(), [])
    assert "<title>98 · Site check</title>" in page
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Intro\n\n# 03 · Block *tables*: "
                                              "[Ah-Ye](02_x.ipynb)'s `table`")]
    assert site.page_title(nb) == "03 · Block tables: Ah-Ye's table"
    assert site.page_title(nbformat.v4.new_notebook()) == "paged-lab"


def test_a_labelled_control_shows_in_the_static_picture():
    """viz.widgets.interactive puts each control in a box under its label; the static picture still
    names each control's setting."""
    nb = executed_page_with_an_output_playground()
    state = nb.metadata["widgets"][site.WIDGET_STATE]["state"]
    state["label"] = {"model_name": "HTMLModel", "state": {"value": "n"}}
    state["cell"] = {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_label",
                                                                       "IPY_MODEL_slider"]}}
    state["controls"]["state"]["children"] = ["IPY_MODEL_cell"]
    assert "n = 2" in site.to_html(nb, [])


def test_a_problem_names_the_page_with_its_folder():
    assert site.page_name(Path("site/zh-TW/01_kv_cache_math.html")) == "zh-TW/01_kv_cache_math.html"
    assert site.page_name(Path("site/01_kv_cache_math.html")) == "01_kv_cache_math.html"
