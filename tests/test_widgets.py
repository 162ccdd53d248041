"""viz.widgets.interactive: controls drive the figure and the readout, with a FigureWidget
or (Colab) an Output."""

import json
import sys

import ipywidgets as W
import plotly.graph_objects as go
import pytest

from paged_lab.viz import widgets
from paged_lab.viz.widgets import READOUT_CLASS, figure_bundle, interactive


def bars(n: int, scale: float = 1.0, title: str = "bars") -> go.Figure:
    """n bar traces (their number changes with n), heights scaled by ``scale``."""
    fig = go.Figure([go.Bar(x=["a", "b"], y=[i * scale, (i + 1) * scale], name=f"t{i}") for i in range(n)])
    fig.update_layout(title=f"{title} n={n}")
    return fig


def controls():
    return {"n": W.IntSlider(value=2, min=1, max=5, description="n"),
            "scale": W.FloatSlider(value=1.0, description="s")}


def test_figure_widget_follows_the_controls():
    ctl = controls()
    box = interactive(bars, ctl, readout=lambda fig, **v: f"{len(fig.data)} traces at x{v['scale']}",
                      use_figure_widget=True)
    assert isinstance(box.figure, go.FigureWidget) and box.view is box.figure
    assert [list(t.y) for t in box.figure.data] == [[0, 1], [1, 2]]
    assert box.readout.value == "2 traces at x1.0"
    assert READOUT_CLASS in box.readout._dom_classes

    ctl["n"].value = 4
    ctl["scale"].value = 0.5
    assert len(box.figure.data) == 4
    assert [list(t.y) for t in box.figure.data][-1] == [1.5, 2.0]
    assert box.figure.layout.title.text == "bars n=4"
    assert box.readout.value == "4 traces at x0.5"

    ctl["n"].value = 1  # fewer traces than before: the old ones are gone, not left behind
    assert [t.name for t in box.figure.data] == ["t0"]


def test_box_shows_controls_readout_and_figure():
    ctl = controls()
    box = interactive(bars, ctl)
    row, readout, view = box.children
    assert [c.children[1] for c in row.children] == list(ctl.values())  # each control under its label
    assert [c.children[0].value for c in row.children] == ["<span title='n'>n</span>",
                                                           "<span title='s'>s</span>"]
    assert readout is box.readout and view is box.view
    assert box.readout.value == ""  # no readout function: stays empty


def test_controls_sit_under_their_labels_with_room_to_move():
    """A long description beside a slider left its track 0-60 px wide (03's seed slider showed none):
    the label goes above, the control gets the box's whole width."""
    slider = W.IntSlider(value=0, min=0, max=9, description="random seed (which requests)",
                         style={"description_width": "initial"})
    wide = W.SelectionSlider(options=[("a", 0), ("b", 1)], description="after event",
                             layout=W.Layout(width="95%"))
    toggles = W.ToggleButtons(options=["x", "y"], description="dtype")
    box = interactive(lambda seed, step, mode: bars(1), {"seed": slider, "step": wide, "mode": toggles})
    cells = box.children[0].children
    assert all(widgets.CONTROL_CLASS in c._dom_classes for c in cells)
    assert all(widgets.LABEL_CLASS in c.children[0]._dom_classes for c in cells)
    assert cells[0].layout.width == widgets.CONTROL_WIDTH and slider.layout.width == "100%"
    assert slider.style.description_width == "0px" and slider.description == "random seed (which requests)"
    assert cells[1].layout.width == "100%"  # a slider meant to span the output keeps doing so
    assert cells[2].layout.width == "auto"  # toggle buttons are as wide as their buttons
    # 01's "KV cache dtype" appeared twice: the group's own copy of its label is hidden, once
    assert widgets.TOGGLES_CLASS in toggles._dom_classes and widgets.TOGGLES_CLASS not in slider._dom_classes
    label = cells[2].children[0].value
    assert f".{widgets.TOGGLES_CLASS} .widget-label{{display:none}}" in label and label.count(">dtype<") == 1
    assert "<style>" not in cells[0].children[0].value


def test_slider_bounds_reads_every_range():
    ctl = {"n": W.IntSlider(min=1, max=30), "rate": W.FloatSlider(min=0.05, max=1.5),
           "bs": W.Dropdown(options=[1, 4, 16]), "step": W.SelectionSlider(options=[("start", 0), ("3", 4)]),
           "model": W.Dropdown(options=["a", "b"])}
    assert widgets.slider_bounds(ctl) == {"n": (1, 30), "rate": (0.05, 1.5), "bs": (1, 16), "step": (0, 4)}


def test_a_readout_can_be_a_sentence_and_a_table():
    from paged_lab.viz.tables import table

    shown = widgets.readout_html(["One sentence.", table([{"a": 1}])])
    assert "<div>One sentence.</div>" in shown and "<table class='paged-lab-table'>" in shown
    assert widgets.readout_html("plain") == "plain"
    with pytest.raises(TypeError, match="readout part"):
        widgets.readout_html(["ok", 3])


def test_fixed_arguments_reach_the_figure_function():
    box = interactive(bars, controls(), fixed={"title": "KV"}, use_figure_widget=True)
    assert box.figure.layout.title.text == "KV n=2"
    assert box.refresh().layout.title.text == "KV n=2"


def test_output_fallback_redraws_a_plain_figure():
    """The Colab path: no FigureWidget, a plain figure re-drawn in an Output; the core
    controls still drive it."""
    ctl = controls()
    box = interactive(bars, ctl, readout=lambda fig, **v: f"n={v['n']}", use_figure_widget=False)
    assert box.figure is None and isinstance(box.view, W.Output)

    def shown():
        (out,) = box.view.outputs  # exactly one figure, never an accumulation of re-draws
        return out["data"]["application/vnd.plotly.v1+json"]

    assert len(shown()["data"]) == 2 and box.readout.value == "n=2"
    ctl["n"].value = 3
    assert len(shown()["data"]) == 3 and shown()["layout"]["title"]["text"] == "bars n=3"
    assert box.readout.value == "n=3"
    ctl["scale"].value = 2.0
    assert len(box.view.outputs) == 1 and box.readout.value == "n=3"


def test_the_plain_figure_is_the_default_everywhere(monkeypatch):
    """A FigureWidget (plotly 6+, an anywidget) is drawn at 700 px and never resizes, so by default the
    figure is a plain one in an Output, which JupyterLab sizes to the output's width (and Colab can show)."""
    monkeypatch.setitem(sys.modules, "google.colab", object())
    assert "google.colab" in sys.modules
    box = interactive(bars, controls())
    assert box.figure is None and isinstance(box.view, W.Output)
    monkeypatch.delitem(sys.modules, "google.colab")
    box = interactive(bars, controls())
    assert box.figure is None and isinstance(box.view, W.Output) and box.view.layout.width == "100%"
    assert isinstance(interactive(bars, controls(), use_figure_widget=True).figure, go.FigureWidget)


def test_figure_bundle_renders_everywhere():
    fig = bars(2)
    out = figure_bundle(fig)
    data = out["data"]
    json.dumps(out)  # an Output widget syncs it as JSON
    assert data["application/vnd.plotly.v1+json"]["data"][0]["type"] == "bar"
    assert "cdn.plot.ly" in data["text/html"] and "bars n=2" in data["text/plain"]


def test_a_failing_redraw_keeps_the_figure_and_says_why():
    def picky(n, scale):
        if n > 3:
            raise ValueError(f"n must be <= 3, got {n}")
        return bars(n, scale)

    ctl = controls()
    box = interactive(picky, ctl, readout=lambda fig, **v: "ok", use_figure_widget=True)
    ctl["n"].value = 5
    assert len(box.figure.data) == 2  # the last good figure stays
    assert "n must be &lt;= 3, got 5" in box.readout.value
    ctl["n"].value = 3
    assert len(box.figure.data) == 3 and box.readout.value == "ok"


def test_bad_arguments_raise_naming_them():
    with pytest.raises(TypeError, match="make_figure"):
        interactive("not a function", controls())
    with pytest.raises(TypeError, match="controls"):
        interactive(bars, {})
    with pytest.raises(TypeError, match=r"controls\['n'\]"):
        interactive(bars, {"n": 3})
    with pytest.raises(TypeError, match="readout"):
        interactive(bars, controls(), readout="n traces")
    with pytest.raises(ValueError, match=r"\['n'\]"):
        interactive(bars, controls(), fixed={"n": 1})
    with pytest.raises(TypeError, match="must return a plotly Figure"):
        interactive(lambda n, scale: None, controls())
    with pytest.raises(TypeError, match="scale"):  # the first draw raises in the cell, not silently
        interactive(lambda n: bars(n), controls())


def test_long_titles_wrap_at_word_boundaries_and_get_room():
    long = "after step 3: 3 sequences hold 10 of 48 blocks | ran 1 prefill + 2 decode, 13 tokens, 3 waiting"
    wrapped = widgets.wrap_title(long, max_chars=40)
    lines = wrapped.split("<br>")
    assert len(lines) == 3 and all(len(line) <= 40 for line in lines)
    assert " ".join(lines) == long  # nothing lost, only line breaks added
    assert widgets.wrap_title("first<br>second", 40) == "first<br>second"  # existing breaks stay
    fig = go.Figure(layout=dict(title=long, width=700, margin=dict(t=40)))
    widgets.fit_to_output(fig, max_chars=40)
    assert fig.layout.width is None and fig.layout.autosize is True  # sized by the output area
    assert fig.layout.title.text == wrapped and fig.layout.margin.t >= 3 * widgets.TITLE_LINE_PX
    with pytest.raises(ValueError, match="max_chars"):
        widgets.wrap_title(long, max_chars=3)


def test_interactive_figures_fill_the_width_with_whole_titles():
    def wide(n: int) -> go.Figure:
        return go.Figure(go.Bar(y=[n]), layout=dict(title="word " * 40, width=500, margin=dict(t=30)))

    for fallback in (False, True):
        box = interactive(wide, {"n": W.IntSlider(value=1)}, use_figure_widget=not fallback)
        assert box.layout.width == "100%"
        fig = box.refresh()
        assert fig.layout.width is None and "<br>" in fig.layout.title.text
        if not fallback:
            assert box.figure.layout.width is None and box.figure.layout.title.text == fig.layout.title.text
