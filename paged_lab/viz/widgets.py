"""Thin widget wiring: controls -> a pure figure function -> a live figure.

A notebook cell stays a few lines:

    interactive(fig_kv_vs_gpu, {"model": Dropdown(...), "context_len": IntSlider(...)},
                readout=lambda fig, **v: f"{v['context_len']} tokens")

The figure comes from a pure function that tests call directly; nothing here computes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import plotly.graph_objects as go


def in_colab() -> bool:
    return "google.colab" in sys.modules


def _values(controls: Mapping[str, Any]) -> dict[str, Any]:
    return {name: w.value for name, w in controls.items()}


def interactive(
    make_figure: Callable[..., go.Figure],
    controls: Mapping[str, Any],
    readout: Callable[..., str] | None = None,
    fixed: Mapping[str, Any] | None = None,
    use_figure_widget: bool | None = None,
):
    """Wire ipywidgets ``controls`` to ``make_figure(**values, **fixed)`` and return a displayable box.

    ``readout(fig, **values)`` returns a short text shown under the controls (an HTML widget with
    the class ``paged-lab-readout``). On Colab, or with ``use_figure_widget=False``, the figure is
    re-drawn as a plain figure inside an ``Output`` widget, since FigureWidget is unreliable there.
    The returned box has ``.figure`` (the FigureWidget or None), ``.readout`` and ``.refresh()``.
    """
    import ipywidgets as W

    fixed = dict(fixed or {})
    if use_figure_widget is None:
        use_figure_widget = not in_colab()
    first = make_figure(**_values(controls), **fixed)
    readout_w = W.HTML()
    readout_w.add_class("paged-lab-readout")
    if use_figure_widget:
        figure = go.FigureWidget(first)
        view = figure
    else:
        figure = None
        view = W.Output()

    def refresh(*_):
        values = _values(controls)
        fig = make_figure(**values, **fixed)
        if figure is not None:
            with figure.batch_update():
                figure.data = ()  # replace traces wholesale: their number may change
                figure.add_traces(list(fig.data))
                figure.layout = fig.layout
        else:
            view.clear_output(wait=True)
            with view:
                fig.show()
        if readout is not None:
            readout_w.value = readout(fig, **values)
        return fig

    for w in controls.values():
        w.observe(refresh, names="value")
    refresh()
    box = W.VBox([W.HBox(list(controls.values()), layout=W.Layout(flex_flow="row wrap")), readout_w, view])
    box.figure, box.readout, box.refresh = figure, readout_w, refresh
    return box
