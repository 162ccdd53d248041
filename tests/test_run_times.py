"""Run times as a learner meets them (issue 38 section 2): a notebook's first run, with an empty cache, is
measured and quoted as such; the load bar's promise is the benchmark's measured cold load."""

import os
import re
from pathlib import Path

import nbformat
from scriptkit import load_script

ROOT = Path(__file__).resolve().parents[1]
budget = load_script("scripts/measure_notebooks.py")
badges = load_script("scripts/sync_badges.py")


def test_a_cold_run_starts_with_an_empty_cache_of_its_own(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setenv("PAGED_LAB_CACHE", str(tmp_path / "warm"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = ("import os\ncache = os.environ['PAGED_LAB_CACHE']\n"
              "assert 'warm' not in cache and os.listdir(cache) == []")
    nb.cells = [nbformat.v4.new_code_cell(source)]
    path = tmp_path / "01_probe.ipynb"
    nbformat.write(nb, path)
    m = budget.execute(path, cold=True)
    assert m.error is None and m.notebook == "01_probe.ipynb (first run: empty cache)"
    assert os.environ["PAGED_LAB_CACHE"] == str(tmp_path / "warm")  # put back
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("paged_lab_cold_")]  # removed


def test_the_first_run_row_is_written_kept_and_read_as_such(tmp_path):
    doc = tmp_path / "notebooks.md"
    doc.write_text(f"{budget.TABLE_START}\n{budget.TABLE_END}\n")
    rows = [budget.Measurement("01_x.ipynb", 6.0, 2**20),
            budget.Measurement("01_x.ipynb" + budget.COLD, 14.0, 2**20)]
    budget.write_table(doc, budget.markdown_table(rows), "note")
    assert "| `01_x.ipynb` (first run: empty cache) | 14.0 s | 60 s |" in doc.read_text()
    assert sorted(budget.table_rows(doc)) == ["01_x.ipynb", "01_x.ipynb (first run: empty cache)"]
    assert badges.run_seconds(doc) == {"01_x.ipynb": 6.0}
    assert badges.first_run_seconds(doc) == {"01_x.ipynb": 14.0}


def test_the_index_quotes_notebook_01s_first_run():
    first = badges.first_run_seconds()
    assert "01_kv_cache_math.ipynb" in first
    assert first["01_kv_cache_math.ipynb"] > badges.run_seconds()["01_kv_cache_math.ipynb"]
    index = (ROOT / "notebooks" / "00_index.ipynb").read_text()
    assert f"{first['01_kv_cache_math.ipynb']:.0f} s the first time (the model is converted)" in index


def test_the_load_bars_promise_is_the_measured_cold_load():
    """models.CONVERT_SECONDS is what the bar says while the GGUF is converted: docs/benchmarks.md's
    measured median of the cold load_model() (benchmarks/model_load.py)."""
    from paged_lab import models

    text = (ROOT / "docs" / "benchmarks.md").read_text()
    measured = float(re.search(r"cold load_model\(\) median: \*\*([\d.]+) s\*\*", text).group(1))
    assert models.CONVERT_SECONDS == round(measured)
    assert f"~{models.CONVERT_SECONDS} s" in models.CONVERT_NOTE.format(seconds=models.CONVERT_SECONDS)
