"""make html: a page of the static site draws its plotly figures offline and keeps the widget state."""

from __future__ import annotations

import nbformat
import pytest
from labkit import load_script

pytestmark = pytest.mark.browser


def _build_site():
    return load_script("scripts/build_site.py")


PLAYGROUND = """import ipywidgets as W
import plotly.graph_objects as go
from paged_lab.viz.widgets import interactive

def bars(n):
    return go.Figure(go.Bar(x=list("abcdef")[:n], y=list(range(1, n + 1))), layout_title_text=f"{n} bars")

go.Figure(go.Scatter(y=[3, 1, 2]), layout_title_text="a plain figure").show()
interactive(bars, {"n": W.IntSlider(value=4, min=1, max=6, description="bars")}, readout=lambda fig, n: \
f"{n} bars drawn")"""

QUIZ = """from paged_lab.kv_math import plan_capacity
from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz

Quiz([Question("How many bars are drawn at first?", [Choice("4", "The slider starts at 4."),
                                                     Choice("6", \
"The slider goes up to 6; it starts lower.")], 0),
      NumberQuestion("How many bars can the slider draw at most?", answer=6, source=plan_capacity,
                     explanation="Its max is 6.", too_low="Look at its max.", \
too_high="Look at its max.")])"""


def test_static_page_draws_figures_and_keeps_widget_state(tmp_path, browser):
    site = _build_site()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 · Site check"), nbformat.v4.new_code_cell(PLAYGROUND),
                nbformat.v4.new_code_cell(QUIZ)]
    path = tmp_path / "98_site_check.ipynb"
    nbformat.write(nb, path)
    page_path = tmp_path / "98_site_check.html"
    page_path.write_text(site.to_html(site.execute(path, timeout=120), [path.name]))
    text = page_path.read_text()
    assert "application/vnd.jupyter.widget-state+json" in text  # the widget state is kept
    assert site.plotlyjs_copies(text) == 1  # one plotly.js for the page, none inside the saved FigureWidget

    page = browser.new_page()
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg .trace').length >= 2")
    titles = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map((p) => "
                           "p.layout.title.text)")
    assert "a plain figure" in titles
    static = page.locator(".paged-lab-static")
    assert static.count() == 1
    assert "bars = 4" in static.inner_text() and "4 bars drawn" in static.inner_text()
    bars = static.evaluate("(el) => el.querySelector('.js-plotly-plot').data[0]")
    assert bars["type"] == "bar" and len(bars["x"]) == 4
    quiz = page.locator(".paged-lab-quiz-static")  # the quiz as text: question, choices, folded answer
    assert quiz.count() == 1 and "How many bars are drawn at first?" in quiz.inner_text()
    answers = quiz.locator("details")  # every answer folded, with every choice's why and the number's
    assert answers.count() == 2 and "The slider starts at 4." in answers.first.text_content()
    assert not answers.first.evaluate("(d) => d.open") and "it starts lower" in answers.first.text_content()
    assert "Its max is 6." in answers.nth(1).text_content() and "Answer with a number." in quiz.inner_text()
    page.close()
