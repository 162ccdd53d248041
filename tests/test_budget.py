"""scripts/measure_notebooks.py: the per-notebook time and memory budget and how it is measured."""

import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from scriptkit import load_script

ROOT = Path(__file__).resolve().parents[1]
budget = load_script("scripts/measure_notebooks.py")


def test_time_limits_follow_the_notebook_number():
    assert [budget.time_limit(f"0{n}_x.ipynb") for n in range(8)] == [60, 60, 60, 60, 60, 60, 90, 180]
    assert budget.time_limit("08_x.ipynb") == 90  # 08 runs SmolLM2 twice (fp32 and fp8 caches): ~30 s
    assert budget.time_limit("10_x.ipynb") == 90  # 10 runs SmolLM2 with and without drafts on three prompts
    with pytest.raises(ValueError, match="two-digit"):
        budget.time_limit("kv_math.ipynb")


def test_problems_name_the_value_and_the_limit():
    ok = budget.Measurement("06_kernel.ipynb", 89.0, 1_900_000_000)
    assert ok.problems() == []
    slow = budget.Measurement("06_kernel.ipynb", 91.0, 1_000)
    assert slow.problems() == ["06_kernel.ipynb took 91.0 s; its limit is 90 s"]
    fat = budget.Measurement("01_x.ipynb", 1.0, 2_100_000_000)
    assert fat.problems() == ["01_x.ipynb peaked at 2.10 GB of RAM; the limit is 2 GB"]


def test_peak_rss_sees_memory_that_was_freed_again():
    code = "import time; b = bytearray(300 * 2**20); del b; print('done', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "done"
        assert budget.peak_rss_bytes(proc.pid) >= 300 * 2**20  # the high-water mark, not the current RSS
    finally:
        proc.kill()
        proc.wait()


def test_execute_measures_a_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(1.0)"), nbformat.v4.new_code_cell("1 / 0")]
    path = tmp_path / "03_probe.ipynb"
    nbformat.write(nb, path)
    start = time.perf_counter()
    m = budget.execute(path)
    assert 1.0 <= m.seconds <= time.perf_counter() - start
    assert 20 * 2**20 < m.peak_bytes < budget.MEMORY_LIMIT_BYTES  # a bare kernel: tens of MiB
    assert "ZeroDivisionError" in m.error and m.problems()[0].startswith("03_probe.ipynb failed")


def test_table_goes_between_the_markers_only(tmp_path):
    doc = tmp_path / "notebooks.md"
    doc.write_text(f"# Head\n{budget.TABLE_START}\nold\n{budget.TABLE_END}\ntail\n")
    table = budget.markdown_table([budget.Measurement("01_x.ipynb", 12.34, 500 * 2**20)])
    budget.write_table(doc, table, "note")
    text = doc.read_text()
    assert text.startswith("# Head\n") and text.endswith(f"{budget.TABLE_END}\ntail\n") and "old" not in text
    assert "| `01_x.ipynb` | 12.3 s | 60 s | 500 MiB | 2 GB | yes |" in text
    unmarked = tmp_path / "unmarked.md"
    unmarked.write_text("no markers here\n")
    with pytest.raises(ValueError, match="budget-table"):
        budget.write_table(unmarked, table, "")


def test_rows_of_notebooks_not_measured_now_are_kept(tmp_path):
    doc = tmp_path / "notebooks.md"
    doc.write_text(f"{budget.TABLE_START}\n{budget.TABLE_END}\n")
    first = [budget.Measurement("01_x.ipynb", 1.0, 2**20), budget.Measurement("02_y.ipynb", 2.0, 2**20)]
    budget.write_table(doc, budget.markdown_table(first), "first run")
    rows = budget.table_rows(doc)
    assert sorted(rows) == ["01_x.ipynb", "02_y.ipynb"]
    again = budget.markdown_table([budget.Measurement("02_y.ipynb", 9.0, 2**20)], kept=[rows["01_x.ipynb"]])
    budget.write_table(doc, again, "second run")
    rows = budget.table_rows(doc)
    assert "| 1.0 s |" in rows["01_x.ipynb"] and "| 9.0 s |" in rows["02_y.ipynb"]
    assert list(rows) == ["01_x.ipynb", "02_y.ipynb"]  # still in series order
