"""Execute the series and write it as static HTML pages, readable without a kernel (``make html``).

    python scripts/build_site.py                  # every notebook -> site/NN_name.html, site/index.html
                                                  # and the zh-TW edition -> site/zh-TW/NN_name.html
    python scripts/build_site.py --out site 01    # only notebooks whose name starts with 01

- Plotly figures are drawn by plotly.js loaded once per page: embedded (the default, so a page works
  offline) or, with ``--plotlyjs cdn``, one ``<script src>`` from plotly's CDN (pages of ~0.3 MB).
  A saved FigureWidget would carry its own 5 MB bundle (plotly.js inside, once per playground); its
  state keeps only a small module that draws the saved figure with the page's one plotly.js.
- The widget state is kept (stored in the page like nbconvert's ``store_widget_state``); online, the
  playgrounds render from it. Each playground also gets a static picture of its figure at the default
  settings, built from that same state, shown when the widgets cannot render (offline, or no kernel).
- Cells collapsed in JupyterLab (``jupyter.source_hidden``: the setup cell, the check cells) show no
  code on the page either, only their output.
- A quiz (``paged_lab.classroom.quiz``) is shown as its text: questions, choices, and
  answers in ``<details>``.
- Links between notebooks point at the pages; ``index.html`` is the executed ``00_index``.
"""

from __future__ import annotations

import argparse
import copy
import html
import re
import sys
import time
from pathlib import Path

import nbformat

from paged_lab.viz.i18n import LANGS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
TRANSLATED_FOLDERS = LANGS[1:]  # every language but the English source: notebooks/zh-TW/ -> site/zh-TW/
QUIZ_STATIC = "paged-lab-quiz-static"  # paged_lab.classroom.quiz's text rendering

# Show the static picture of a playground only where the live widget did not render a figure.
HIDE_FALLBACKS = """<script>
window.addEventListener("load", () => setTimeout(() => {
  document.querySelectorAll(".paged-lab-static").forEach((el) => {
    const live = el.closest(".jp-OutputArea-child")?.previousElementSibling;
    if (live && live.querySelector(".js-plotly-plot .main-svg")) el.style.display = "none";
  });
}, 4000));
</script>"""


# What a saved plotly FigureWidget runs in a static page instead of its bundle: there is no kernel to
# answer it, so it only draws the saved figure, with the page's plotly.js (the global ``Plotly``).
FIGURE_WIDGET_ESM = """export default {
  render({ model, el }) {
    const data = model.get("_widget_data") || [], layout = model.get("_widget_layout") || {};
    window.Plotly.newPlot(el, data, layout, { responsive: true });
    return () => window.Plotly.purge(el);
  },
};"""
PLOTLYJS_MODES = ("embed", "cdn")


def plotly_js(mode: str = "embed") -> str:
    """plotly.js, once per page: inlined (``embed``) or from plotly's CDN (``cdn``); hidden from
    require.js (which nbconvert loads for widgets) so that it defines the global ``Plotly``."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    if mode not in PLOTLYJS_MODES:
        raise ValueError(f"plotlyjs must be one of {PLOTLYJS_MODES}, got {mode!r}")
    if mode == "cdn":
        script = (f'<script src="https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js" '
                  'charset="utf-8"></script>')
    else:
        script = f"<script type=\"text/javascript\">{get_plotlyjs()}</script>"
    return (
        "<script>window.__define = window.define; window.define = undefined;</script>\n"
        f"{script}\n"
        "<script>window.define = window.__define;</script>"
    )


PLOTLYJS_MARK = "PlotlyGeoAssets"  # a word plotly.js (and any bundle of it) holds a fixed number of times


def plotlyjs_copies(page: str) -> int:
    """How many copies of plotly.js a page's text holds (inlined or inside a widget bundle)."""
    from plotly.offline import get_plotlyjs

    per_copy = get_plotlyjs().count(PLOTLYJS_MARK)
    return -(-page.count(PLOTLYJS_MARK) // per_copy)


def slim_widget_state(state: dict) -> int:
    """Replace every plotly FigureWidget's bundled module in the kept widget ``state`` (in place) by
    FIGURE_WIDGET_ESM; returns how many were replaced."""
    slimmed = 0
    for entry in state.values():
        esm = entry.get("state", {}).get("_esm")
        if (entry.get("model_name") == "AnyModel" and "_widget_data" in entry["state"]
                and esm != FIGURE_WIDGET_ESM):
            entry["state"]["_esm"] = FIGURE_WIDGET_ESM
            slimmed += 1
    return slimmed


def figure_html(fig: dict) -> str:
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False, validate=False)


def _model(state: dict, ref: str) -> dict | None:
    entry = state.get(ref.removeprefix("IPY_MODEL_"))
    return entry and entry["state"] | {"_model_name": entry["model_name"]}


def _controls(state: dict, row: dict) -> list[str]:
    """The controls of an ``interactive()`` row: its children, or the control in each labelled box
    (``viz.widgets.labelled``: a VBox of the label and the control)."""
    out = []
    for ref in row.get("children", []):
        child = _model(state, ref) or {}
        out += child.get("children", [])[1:] if child.get("_model_name") == "VBoxModel" else [ref]
    return out


def playground_fallback(view: dict, state: dict) -> str | None:
    """A static picture of an ``interactive()`` box from its kept widget state, or None if it is not one."""
    box = _model(state, view.get("model_id", ""))
    if not box or box["_model_name"] != "VBoxModel":
        return None
    readout, figure, controls = None, None, []
    for ref in box.get("children", []):
        child = _model(state, ref) or {}
        if "paged-lab-readout" in child.get("_dom_classes", []):
            readout = child.get("value", "")
        elif "_widget_data" in child:  # plotly FigureWidget
            figure = {"data": child["_widget_data"], "layout": child.get("_widget_layout", {})}
        elif child.get("_model_name") == "OutputModel":  # the Colab-style fallback
            for out in child.get("outputs", []):
                figure = out.get("data", {}).get(PLOTLY, figure)
        elif child.get("_model_name") == "HBoxModel":
            for c in _controls(state, child):
                ctl = _model(state, c) or {}
                if not ctl.get("description"):
                    continue
                if ctl.get("_options_labels") and ctl.get("index") is not None:  # Dropdown, ToggleButtons
                    shown = ctl["_options_labels"][ctl["index"]]
                elif "value" in ctl:
                    shown = ctl["value"]
                else:
                    continue
                controls.append(f"{html.escape(str(ctl['description']))} = {html.escape(str(shown))}")
    if figure is None:
        return None
    note = "Static picture at " + (", ".join(controls) or "the default settings")
    note += ". Open the notebook (the Binder or Colab link above) to move the controls."
    return (
        '<div class="paged-lab-static">'
        f'<p style="font-style:italic;color:#555">{note}</p>'
        f"<div>{readout or ''}</div>{figure_html(figure)}</div>"
    )


def make_static(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Give every plotly output an HTML rendering and every playground a static picture."""
    nb = copy.deepcopy(nb)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    slim_widget_state(state)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.metadata.get("jupyter", {}).get("source_hidden"):  # collapsed in JupyterLab (setup, checks):
            # nbconvert leaves its code out too
            cell.metadata.setdefault("transient", {})["remove_source"] = True
        outputs = []
        for out in cell.outputs:
            data = out.get("data", {})
            if WIDGET_VIEW in data and QUIZ_STATIC in data.get("text/html", ""):
                # a quiz needs a kernel to answer: the page shows its text, answers folded
                del data[WIDGET_VIEW]
            if PLOTLY in data and "text/html" not in data:
                data["text/html"] = figure_html(data[PLOTLY])
            outputs.append(out)
            if WIDGET_VIEW in data:
                fallback = playground_fallback(data[WIDGET_VIEW], state)
                if fallback:
                    outputs.append(nbformat.v4.new_output("display_data", data={"text/html": fallback}))
        cell.outputs = outputs
    return nb


def execute(path: Path, timeout: int = 600) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return nb


def page_title(nb: nbformat.NotebookNode, default: str = "paged-lab") -> str:
    """The page's ``<title>``: the notebook's first heading, as plain text ("03 · Block tables: ...")."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        found = re.search(r"^#\s+(.+)$", cell.source, flags=re.M)
        if found:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", found.group(1))  # [text](link) -> text
            return re.sub(r"[*_`]", "", text).strip() or default
    return default


def to_html(nb: nbformat.NotebookNode, pages: list[str], plotlyjs: str = "embed") -> str:
    from nbconvert import HTMLExporter

    # nbconvert titles every page "Notebook" unless told the name
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(
        make_static(nb), resources={"metadata": {"name": page_title(nb)}})
    if "Plotly.newPlot" in body:  # only pages with figures (static or saved widgets) carry plotly.js
        body = body.replace("</head>", plotly_js(plotlyjs) + "\n</head>", 1)
    body = body.replace("</body>", HIDE_FALLBACKS + "\n</body>", 1)
    for name in pages:  # links between notebooks go to their pages
        stem = name.removesuffix(".ipynb")
        body = re.sub(rf'href="((?:\.\./)?)(?:notebooks/)?{re.escape(name)}"', rf'href="\g<1>{stem}.html"',
                      body)
    return body


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]  # fmt: skip


def shot_name(page_path: Path) -> str:
    """The screenshot's file name: a translated page keeps its folder in the name
    (``zh-TW-01_kv_cache_math.png``),
    so that it does not overwrite the English page's ``01_kv_cache_math.png``."""
    folder = page_path.parent.name
    return f"{folder}-{page_path.stem}.png" if folder in TRANSLATED_FOLDERS else f"{page_path.stem}.png"


WIDGET_STATE_SCRIPT = re.compile(rf'<script type="{re.escape(WIDGET_STATE)}">.*?</script>', flags=re.S)


def figures_meant_to_draw(page: str) -> int:
    """How many plotly figures a page draws by itself, offline: its plain figures and the static
    picture of each playground. A playground's live figure is not counted: it lives in the kept widget
    state and draws only where the widget manager loads (online, from its CDN)."""
    return WIDGET_STATE_SCRIPT.sub("", page).count("Plotly.newPlot(")


def page_name(page_path: Path) -> str:
    """A page as a reader finds it in the site: ``01_kv_cache_math.html``, ``zh-TW/01_kv_cache_math.html``."""
    folder = page_path.parent.name
    return f"{folder}/{page_path.name}" if folder in TRANSLATED_FOLDERS else page_path.name


# A figure is drawn when plotly made its SVG and gave it data; the live figures of playgrounds (inside a
# widget view) are left out, as figures_meant_to_draw leaves them out.
DRAWN_FIGURES = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter((p) => !p.closest('.jupyter-widgets') && p.querySelector('.main-svg') && (p.data || []).length > 0)
  .length"""
STATIC_PICTURES = """() => Array.from(document.querySelectorAll('.paged-lab-static')).map(
  (el) => Array.from(el.querySelectorAll('.js-plotly-plot')).some((p) => p.querySelector('.main-svg') && \
(p.data || []).length > 0))"""


def check_pages(pages: list[Path], shots: Path, chromium: str = "/usr/bin/chromium") -> list[str]:
    """Open each page in headless Chromium (offline is fine), screenshot its top into ``shots``, and
    return what a reader would miss: figures the page should draw offline but did not, and playgrounds
    whose static picture is not drawn."""
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        for page_path in pages:
            name, expected = page_name(page_path), figures_meant_to_draw(page_path.read_text())
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(page_path.resolve().as_uri(), wait_until="load", timeout=120_000)
            try:
                page.wait_for_function(f"() => ({DRAWN_FIGURES})() >= {expected}", timeout=30_000)
            except Exception:  # reported below, with the count
                pass
            drawn, statics = page.evaluate(DRAWN_FIGURES), page.evaluate(STATIC_PICTURES)
            page.screenshot(path=str(shots / shot_name(page_path)))
            if drawn < expected:
                problems.append(f"{name}: {drawn} of {expected} figures drawn (plain figures and "
                                "playgrounds' static pictures)")
            if not all(statics):
                problems.append(f"{name}: {statics.count(False)} of {len(statics)} playgrounds show "
                                "no static picture")
            page.close()
        browser.close()
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="name prefixes of the notebooks to build (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "site")
    parser.add_argument("--plotlyjs", choices=PLOTLYJS_MODES, default="embed",
                        help="embed plotly.js in each page (offline) or load it once from plotly's CDN")
    parser.add_argument("--check", action="store_true",
                        help="open the pages in headless Chromium, offline, and fail unless every plain "
                             "figure and every playground's static picture is drawn; screenshots "
                             "to OUT/screenshots")
    args = parser.parse_args(argv)
    series = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) + [
        p for folder in TRANSLATED_FOLDERS for p in sorted((NOTEBOOKS / folder).glob("[0-9][0-9]_*.ipynb"))]
    chosen = [p for p in series if not args.only or any(p.name.startswith(o) for o in args.only)]
    if not chosen:
        print(f"no notebook in {NOTEBOOKS} matches {args.only}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    pages, built = [p.name for p in series], []
    for i, path in enumerate(chosen, 1):
        start = time.perf_counter()
        page = args.out / path.relative_to(NOTEBOOKS).with_suffix(".html")  # zh-TW/ pages in site/zh-TW/
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(to_html(execute(path), pages, args.plotlyjs))
        if path.name.startswith("00_"):
            (page.parent / "index.html").write_text(page.read_text())
        built.append(page)
        size = page.stat().st_size / 2**20
        print(f"[{i}/{len(chosen)}] {path.name} -> {page} ({size:.1f} MiB, "
              f"{time.perf_counter() - start:.0f} s)", flush=True)
    if args.check:
        problems = check_pages(built, args.out / "screenshots")
        for problem in problems:
            print(f"NOT DRAWN: {problem}", file=sys.stderr)
        print(f"checked {len(built)} pages in headless Chromium; screenshots in {args.out / 'screenshots'}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
