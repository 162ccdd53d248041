"""Thin widget wiring: controls -> a pure figure function -> a live figure.

A notebook cell stays a few lines:

    interactive(fig_kv_vs_gpu, {"model": Dropdown(...), "context_len": IntSlider(...)},
                readout=lambda fig, **v: f"{v['context_len']} tokens")

The figure comes from a pure function that tests call directly; nothing here computes.
"""

from __future__ import annotations

import html
import json
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

import plotly.graph_objects as go

from paged_lab.viz import i18n

READOUT_CLASS = "paged-lab-readout"
CONTROL_CLASS, LABEL_CLASS = "paged-lab-control", "paged-lab-label"  # a control under its label
TOGGLES_CLASS = "paged-lab-toggles"  # a toggle-button group, whose own copy of its label is hidden
# Each control's width, its label above it: a slider's track gets all of it but its value's readout,
# about 250 px, so a drag moves a value at a time instead of jumping (a label beside the track once
# left it 0-60 px). Several controls share a row when the output is wide enough.
CONTROL_WIDTH = "340px"
READOUT_STYLE = ("<style>.paged-lab-readout table{border-collapse:collapse;margin:4px 0}"
                 ".paged-lab-readout th,.paged-lab-readout td{padding:1px 12px 1px 0;text-align:left}"
                 ".paged-lab-readout th{border-bottom:1px solid #bbb}</style>")
# A 17 px title line holds about 90 characters in a 900 px figure: Colab's output area is that
# narrow, JupyterLab's at a 1280 px window is wider. Longer titles are wrapped, not clipped.
TITLE_CHARS = 90
TITLE_LINE_PX = 24  # one title line, with its leading


def _values(controls: Mapping[str, Any]) -> dict[str, Any]:
    return {name: w.value for name, w in controls.items()}


def figure_bundle(fig: go.Figure) -> dict[str, Any]:
    """A display_data output for ``fig`` that needs no FigureWidget.

    JupyterLab renders the plotly mimetype (offline, through its plotly extension); Colab and plain
    HTML pages fall back to ``text/html``, which loads plotly.js from its CDN (Colab is online).
    """
    return {
        "output_type": "display_data",
        "data": {
            "application/vnd.plotly.v1+json": {**json.loads(fig.to_json()), "config": {"responsive": True}},
            "text/html": fig.to_html(include_plotlyjs="cdn", full_html=False),
            "text/plain": f"<plotly figure: {fig.layout.title.text or 'untitled'}>",
        },
        "metadata": {},
    }


def wrap_title(text: str, max_chars: int = TITLE_CHARS) -> str:
    """``text`` with a ``<br>`` at a word boundary wherever a line would pass ``max_chars``.

    Existing ``<br>`` breaks are kept; a single word longer than ``max_chars`` stays whole."""
    if max_chars < 10:
        raise ValueError(f"max_chars must be >= 10 (a title line of a few words), got {max_chars}")
    lines = []
    for part in text.split("<br>"):
        lines.extend(textwrap.wrap(part, max_chars, break_long_words=False, break_on_hyphens=False) or [""])
    return "<br>".join(lines)


def fit_to_output(fig: go.Figure, max_chars: int = TITLE_CHARS) -> go.Figure:
    """Make ``fig`` take the output's full width and keep its title whole (changes ``fig``, returns it).

    A fixed ``layout.width`` is dropped (the figure then sizes itself to its output area); a long
    title is wrapped (``wrap_title``) and the top margin grows to hold every line above the plot."""
    fig.layout.width = None
    fig.layout.autosize = True
    text = fig.layout.title.text
    if text:
        wrapped = wrap_title(text, max_chars)
        fig.layout.title.text = wrapped
        need = 50 + TITLE_LINE_PX * (wrapped.count("<br>") + 1)  # 50: padding and subplot titles
        if fig.layout.margin.t is not None and fig.layout.margin.t < need:
            fig.layout.margin.t = need
    return fig


def slider_bounds(controls: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{argument: (lowest, highest)}`` for each control with a range of numbers: a slider's
    ``min`` and ``max``, a dropdown's (or selection slider's) smallest and largest option. A playground
    function that takes ``bounds`` makes room for every position, so its figure holds still."""
    out = {}
    for name, w in controls.items():
        if hasattr(w, "min") and hasattr(w, "max"):
            out[name] = (w.min, w.max)
            continue
        values = list(getattr(w, "_options_values", ()) or ())
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[name] = (min(values), max(values))
    return out


def labelled(w):
    """``w`` under its description, in a box of its own: the label above (in the learner's language),
    the control below at the box's full width. The description stays on ``w`` (what a screen reader
    and the static pages read) but is drawn with no width."""
    import ipywidgets as W

    text = i18n.t(w.description or "")
    toggles = isinstance(w, W.ToggleButtons)  # its buttons set its width
    # A toggle group draws its own description on a line of its own, whatever its width ("KV cache
    # dtype" appeared twice in 01): a rule beside the label hides that copy.
    hide = f"<style>.{TOGGLES_CLASS} .widget-label{{display:none}}</style>" if toggles else ""
    label = W.HTML(value=f"{hide}<span title='{html.escape(text)}'>{html.escape(text)}</span>")
    label.add_class(LABEL_CLASS)
    if toggles:
        w.add_class(TOGGLES_CLASS)
    if hasattr(w, "style") and hasattr(w.style, "description_width"):
        w.style.description_width = "0px"
    wide = bool(w.layout.width) and str(w.layout.width).endswith("%")  # e.g. a slider over a whole log
    if not toggles:
        w.layout.width = "100%"
    box = W.VBox([label, w], layout=W.Layout(width="100%" if wide else ("auto" if toggles else CONTROL_WIDTH),
                                             margin="0 24px 6px 0"))
    box.add_class(CONTROL_CLASS)
    return box


def readout_html(value: Any) -> str:
    """What ``interactive``'s readout shows for ``value``: a text in the learner's language, or a
    sequence of texts (each its own paragraph) and tables (``viz.tables.Table``, shown as HTML)."""
    if isinstance(value, str):
        return i18n.t(value)
    parts = []
    for part in value:
        if isinstance(part, str):
            parts.append(f"<div>{i18n.t(part)}</div>")
        elif hasattr(part, "_repr_html_"):
            parts.append(part._repr_html_())
        else:
            raise TypeError(f"a readout part must be a text or a table, got {type(part).__name__}")
    return READOUT_STYLE + "".join(parts)


def _check_args(make_figure, controls, readout, fixed) -> None:
    if not callable(make_figure):
        raise TypeError("make_figure must be a function returning a plotly Figure, got "
                        f"{type(make_figure).__name__}")
    if not isinstance(controls, Mapping) or not controls:
        raise TypeError("controls must be a non-empty dict {argument name: ipywidgets control}")
    for name, w in controls.items():
        if not (hasattr(w, "value") and hasattr(w, "observe")):
            raise TypeError(f"controls[{name!r}] must be an ipywidgets control with .value, got "
                            f"{type(w).__name__}")
    if readout is not None and not callable(readout):
        raise TypeError(f"readout must be a function (fig, **values) -> str, got {type(readout).__name__}")
    clash = sorted(set(controls) & set(fixed))
    if clash:
        raise ValueError(f"fixed and controls both set {clash}; give each argument in one place only")


def interactive(
    make_figure: Callable[..., go.Figure],
    controls: Mapping[str, Any],
    readout: Callable[..., str] | None = None,
    fixed: Mapping[str, Any] | None = None,
    use_figure_widget: bool = False,
):
    """Wire ipywidgets ``controls`` to ``make_figure(**values, **fixed)`` and return a displayable box.

    ``readout(fig, **values)`` returns a short text shown under the controls (an HTML widget with
    the class ``paged-lab-readout``), or a list of texts and tables (``readout_html``). Each control
    is drawn under its label (``labelled``), wide enough for a slider to move one step at a time. By default
    (and on Colab, where FigureWidget is
    unreliable) the figure is re-drawn as a plain figure inside an ``Output`` widget: the front end's
    plotly renderer sizes it to the output's full width. ``use_figure_widget=True`` keeps a plotly
    FigureWidget instead, which plotly 6+ (an anywidget) draws at a fixed 700 px and never resizes.
    Every figure goes through ``fit_to_output``: full output width, titles wrapped rather than clipped.
    The returned box has ``.figure`` (the FigureWidget, or None in the fallback), ``.view`` (the
    widget that shows the figure: the FigureWidget or the Output), ``.readout`` and ``.refresh()``,
    which re-draws from the controls' current values and returns the Figure.

    The first figure is drawn at once, so a bad argument raises in the cell. A later control change
    that makes ``make_figure`` raise keeps the last figure and shows the error in the readout.
    """
    import ipywidgets as W

    fixed = dict(fixed or {})
    _check_args(make_figure, controls, readout, fixed)
    def draw() -> go.Figure:
        fig = make_figure(**_values(controls), **fixed)
        if not isinstance(fig, go.Figure):
            raise TypeError(f"make_figure must return a plotly Figure, got {type(fig).__name__}")
        return fit_to_output(fig)

    first = draw()
    readout_w = W.HTML()
    readout_w.add_class(READOUT_CLASS)
    full_width = W.Layout(width="100%")
    view = go.FigureWidget(i18n.figure(first)) if use_figure_widget else W.Output(layout=full_width)

    def show(fig: go.Figure, redraw: bool = True) -> None:
        values = _values(controls)
        # in the learner's language (paged_lab.viz.i18n); readout and caller get `fig`
        shown = i18n.figure(fig)
        if not redraw:  # the FigureWidget was built from this very figure
            pass
        elif use_figure_widget:
            with view.batch_update():
                view.data = ()  # replace traces wholesale: their number may change
                view.add_traces(list(shown.data))
                view.layout = shown.layout
        else:
            # Set the outputs directly (not `with view:`), so the re-draw needs no kernel context.
            view.outputs = (figure_bundle(shown),)
        if readout is not None:
            readout_w.value = readout_html(readout(fig, **values))

    def refresh(*_):
        try:
            fig = draw()
            show(fig)
        except Exception as exc:  # a learner's slider combination; keep the last figure, say why
            readout_w.value = (f'<span style="color:#d62728">'
                               f'{html.escape(f"{type(exc).__name__}: {exc}")}</span>')
            return None
        return fig

    rows = [labelled(w) for w in controls.values()]
    for w in controls.values():
        w.description = i18n.t(w.description)
        w.observe(refresh, names="value")
    show(first, redraw=not use_figure_widget)
    # The box spans the output area, so the figure inside it sizes itself to the full width.
    box = W.VBox([W.HBox(rows, layout=W.Layout(flex_flow="row wrap")), readout_w, view],
                 layout=full_width)
    box.figure = view if use_figure_widget else None
    box.view, box.readout, box.refresh = view, readout_w, refresh
    return box

