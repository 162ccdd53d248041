"""JupyterLab as this project serves it: `make lab` and the browser tests put this folder on
JUPYTER_CONFIG_PATH (a learner's own Jupyter config still loads; this one wins where both say something).

- The file browser hides what is not for reading: notebooks/conftest.py (pytest's) and notebooks/i18n/
  (the translation catalogues build_zh.py reads).
- No news and no update check: no pop-up asking about Jupyter news (lab-settings/overrides.json says
  no for the front end, news_url for the server), and nothing reaches the network.
- The series notebooks are committed without outputs. JupyterLab autosaves what a learner ran, so
  saving a series notebook (NN_*.ipynb, or a translation's) writes it without outputs, execution counts,
  cell timings or widget state; the learner copies in exercises/ keep theirs.
"""

import re
from pathlib import Path

c = get_config()  # noqa: F821  (traitlets defines it for a config file)
HERE = Path(__file__).resolve().parent

c.ContentsManager.hide_globs = ["__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "conftest.py", "i18n"]
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
c.LabApp.app_settings_dir = str(HERE / "lab-settings")  # overrides.json: the settings' project defaults

SERIES = re.compile(r"(?:[^/]+/)?\d\d_[^/]+\.ipynb")  # 03_block_tables.ipynb, zh-TW/03_block_tables.ipynb


def strip_series_outputs(model, path, contents_manager=None, **kwargs):
    """Before a save: a series notebook loses its outputs (the learner's copies in exercises/ keep them)."""
    path = path.strip("/")
    if model.get("type") != "notebook" or not SERIES.fullmatch(path) or "exercises" in path.split("/"):
        return
    nb = model["content"]
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cell.get("metadata", {}).pop("execution", None)  # recordTiming's start/end times
    nb.get("metadata", {}).pop("widgets", None)


c.ContentsManager.pre_save_hook = strip_series_outputs
