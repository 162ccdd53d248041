"""`make lab`'s JupyterLab settings (jupyter/jupyter_server_config.py), on the server the browser tests
run: the file browser hides conftest.py and i18n/, no news pop-up asks anything, and saving a series
notebook writes it without outputs while a learner copy keeps its own."""

from __future__ import annotations

import json
import urllib.request

import nbformat
import pytest
from labkit import PANEL_READY

pytestmark = pytest.mark.browser


def _put(server, path: str, nb) -> None:
    body = json.dumps({"type": "notebook", "format": "json", "content": nb}).encode()
    req = urllib.request.Request(f"{server.url}/api/contents/{path}", data=body, method="PUT",
                                 headers={"Authorization": f"token {server.token}",
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def _ran() -> dict:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("1 + 1", execution_count=1,
                                     metadata={"execution": {"iopub.status.busy": "x"}})
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "2"}, execution_count=1)]
    nb.cells = [cell]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return json.loads(nbformat.writes(nb))


def test_the_file_browser_hides_what_is_not_for_reading(lab_server):
    names = {item["name"] for item in lab_server.api("/api/contents/")["content"]}
    assert "03_block_tables.ipynb" in names and "zh-TW" in names
    assert "conftest.py" not in names and "i18n" not in names
    assert (lab_server.root_dir / "conftest.py").exists() and (lab_server.root_dir / "i18n").is_dir()


def test_saving_a_series_notebook_drops_its_outputs(lab_server):
    for path in ("98_saved.ipynb", "zh-TW/98_saved.ipynb", "exercises/98_saved.ipynb", "scratch.ipynb"):
        (lab_server.root_dir / path).parent.mkdir(parents=True, exist_ok=True)
        _put(lab_server, path, _ran())
        saved = json.loads((lab_server.root_dir / path).read_text())
        cell = saved["cells"][0]
        kept = "exercises" in path or path == "scratch.ipynb"  # the learner's own files keep what they ran
        assert bool(cell["outputs"]) == kept and (cell["execution_count"] is not None) == kept, path
        assert ("execution" in cell["metadata"]) == kept and ("widgets" in saved["metadata"]) == kept, path
        (lab_server.root_dir / path).unlink()


def test_no_news_pop_up_asks_anything(lab_server, page):
    settings = lab_server.api("/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert settings["schema"]["properties"]["fetchNews"]["default"] == "false"
    page.goto(lab_server.notebook_url("00_index.ipynb"))
    page.wait_for_function(PANEL_READY, timeout=90_000)
    page.wait_for_timeout(2_000)  # the toast, when there is one, comes a moment after the app is restored
    toasts = page.locator(".jp-toast-message, .Toastify__toast").all_inner_texts()
    assert not any("news" in t.lower() for t in toasts), toasts
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
