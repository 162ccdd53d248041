"""Execute each notebook headless and check it against its time and memory budget.

    python scripts/measure_notebooks.py                 # every notebook and zh-TW twin, print the
    table, exit 1 if over budget
    python scripts/measure_notebooks.py --write docs/notebooks.md
    python scripts/measure_notebooks.py notebooks/01_kv_cache_math.ipynb
    python scripts/measure_notebooks.py --cold notebooks/01_kv_cache_math.ipynb --write docs/notebooks.md

Wall time is from the first cell's start to the last cell's end (the kernel is already up, as it is
for a learner who presses "Run All"); peak memory is the kernel process's high-water resident set
(VmHWM from /proc, plus any child process it left running), the number Binder's 2 GB limit is about.
``--cold`` runs the notebooks as a learner's first run meets them: with an empty ``PAGED_LAB_CACHE``, so
the default model is converted from its GGUF and the C kernels are compiled (row "(first run: empty
cache)"); without it, the cache is whatever this machine has built (the model's copy, the kernels).
The browser test (tests/browser) enforces the same budgets on its own run of every notebook.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from paged_lab.viz.i18n import LANGS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

# Binder gives a session 2 GB; decimal on purpose (the stricter reading of "2 GB").
MEMORY_LIMIT_BYTES = 2 * 1000**3
DEFAULT_SECONDS = 60.0
SECONDS_BY_NUMBER = {6: 90.0, 7: 180.0, 8: 90.0, 9: 90.0, 10: 90.0}

COLD = " (first run: empty cache)"  # the table row of a notebook measured with --cold
TABLE_START = "<!-- budget-table:start -->"
TABLE_END = "<!-- budget-table:end -->"


def discover(folder: Path = NOTEBOOKS) -> list[Path]:
    """The series, in order: every ``NN_name.ipynb`` in ``folder`` (checkpoints excluded)."""
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb") if p.is_file())


def notebook_number(path: Path | str) -> int:
    match = re.match(r"(\d\d)_", Path(path).name)
    if not match:
        raise ValueError(f"notebook name {Path(path).name!r} does not start with a two-digit number 'NN_'")
    return int(match.group(1))


def time_limit(path: Path | str) -> float:
    """Seconds a notebook may take on CPU: 60 s for 00-05, 90 s for 06, 08, 09 and 10, 180 s for 07."""
    return SECONDS_BY_NUMBER.get(notebook_number(path), DEFAULT_SECONDS)


def peak_rss_bytes(pid: int) -> int:
    """High-water resident set of ``pid`` plus the current RSS of its live children (bytes)."""
    import psutil

    proc = psutil.Process(pid)
    peak = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    except OSError:  # not Linux: fall back to the current RSS
        peak = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            peak += child.memory_info().rss
        except psutil.Error:
            pass
    return peak


@dataclass
class Measurement:
    notebook: str
    seconds: float
    peak_bytes: int
    error: str | None = None
    load: float | None = None  # the machine's 1-minute load average when the run started

    @property
    def time_limit(self) -> float:
        return time_limit(self.notebook)

    def problems(self) -> list[str]:
        """What is over budget, each as a sentence naming the measured value and the limit."""
        out = []
        if self.error:
            out.append(f"{self.notebook} failed: {self.error}")
        if self.seconds > self.time_limit:
            out.append(f"{self.notebook} took {self.seconds:.1f} s; its limit is {self.time_limit:.0f} s")
        if self.peak_bytes > MEMORY_LIMIT_BYTES:
            out.append(
                f"{self.notebook} peaked at {self.peak_bytes / 1e9:.2f} GB of RAM; "
                f"the limit is {MEMORY_LIMIT_BYTES / 1e9:.0f} GB"
            )
        return out


def execute(path: Path, timeout: float | None = None, cold: bool = False) -> Measurement:
    """Run ``path`` top to bottom in a fresh python3 kernel (nbclient) and measure it; ``cold``: with an
    empty ``PAGED_LAB_CACHE`` of its own (removed afterwards)."""
    import os
    import shutil
    import tempfile

    if cold:
        cache, before = tempfile.mkdtemp(prefix="paged_lab_cold_"), os.environ.get("PAGED_LAB_CACHE")
        os.environ["PAGED_LAB_CACHE"] = cache  # the kernel inherits it
        try:
            m = execute(path, timeout)
        finally:
            os.environ.pop("PAGED_LAB_CACHE") if before is None else os.environ.update(PAGED_LAB_CACHE=before)
            shutil.rmtree(cache, ignore_errors=True)
        return Measurement(m.notebook + COLD, m.seconds, m.peak_bytes, m.error, m.load)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    limit = time_limit(path)
    client = NotebookClient(
        nb,
        timeout=int(timeout or 2 * limit),  # per cell; the budget check itself is on the whole run
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    error, load = None, os.getloadavg()[0]
    with client.setup_kernel():
        pid = client.km.provisioner.process.pid
        start = time.perf_counter()
        try:
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
        except CellExecutionError as exc:
            error = f"{exc.ename}: {exc.evalue}" if getattr(exc, "ename", None) else type(exc).__name__
        seconds = time.perf_counter() - start
        peak = peak_rss_bytes(pid)
    return Measurement(display_name(path), seconds, peak, error, load)


def display_name(path: Path) -> str:
    """``01_x.ipynb`` for the series, ``zh-TW/01_x.ipynb`` for a translation's twin."""
    path = Path(path).resolve()
    return path.relative_to(NOTEBOOKS).as_posix() if path.is_relative_to(NOTEBOOKS) else path.name


def _row_name(notebook: str) -> str:
    """The row's first cell: the name in backticks, then ``(first run: empty cache)`` for --cold."""
    return f"`{notebook.removesuffix(COLD)}`{COLD if notebook.endswith(COLD) else ''}"


def markdown_table(rows: list[Measurement], kept: list[str] = ()) -> str:
    """The budget table; ``kept`` are earlier rows (markdown lines) of notebooks not measured now."""
    lines = [
        f"| {_row_name(m.notebook)} | {m.seconds:.1f} s | {m.time_limit:.0f} s | "
        f"{m.peak_bytes / 2**20:,.0f} MiB | "
        f"{MEMORY_LIMIT_BYTES / 1e9:.0f} GB | {'yes' if not m.problems() else '**no**'} | "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())}"
        f"{'' if m.load is None else f', load {m.load:.1f}'} |"
        for m in rows
    ]
    header = [
        "| Notebook | Wall time | Limit | Peak RAM (kernel) | Limit | OK | Measured |",
        "|----------|----------:|------:|------------------:|------:|:--:|----------|",
    ]
    return "\n".join(header + sorted([*lines, *kept]))


def table_rows(doc: Path) -> dict[str, str]:
    """The rows of the budget table now in ``doc``, by notebook file name."""
    text = doc.read_text() if doc.exists() else ""
    block = text.split(TABLE_START, 1)[-1].split(TABLE_END, 1)[0] if TABLE_START in text else ""
    rows = {}
    for line in block.splitlines():
        if m := re.match(r"\| `([^`]+)`(" + re.escape(COLD) + r")? \|", line):
            rows[m.group(1) + (m.group(2) or "")] = line
    return rows


def write_table(doc: Path, table: str, note: str) -> None:
    """Replace the block between the budget-table markers in ``doc`` (the rest is left as it is)."""
    text = doc.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{doc} has no {TABLE_START} ... {TABLE_END} block to write the table into")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    doc.write_text(f"{head}{TABLE_START}\n{note}\n\n{table}\n{TABLE_END}{tail}")


def machine_note(cold: bool = False) -> str:
    import os
    import platform

    import psutil

    return (
        f"Measured with `python scripts/measure_notebooks.py{' --cold' if cold else ''} --write "
        "docs/notebooks.md` "
        "(last run, of the rows dated then: "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC) on {platform.machine()} Linux, "
        f"{os.cpu_count()} CPU cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, no GPU: Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the start (a shared machine: "
        "the times are upper bounds)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: the whole series and its zh-TW twins)")
    parser.add_argument("--write", type=Path, help="markdown file whose budget-table block gets the results")
    parser.add_argument("--cold", action="store_true",
                        help="run with an empty PAGED_LAB_CACHE, as a learner's first run (model converted)")
    args = parser.parse_args(argv)
    translations = [p for lang in LANGS[1:] for p in discover(NOTEBOOKS / lang)]  # notebooks/zh-TW/, ...
    paths = [p.resolve() for p in args.notebooks] or discover() + translations
    if not paths:
        print(f"no notebooks found in {NOTEBOOKS}", file=sys.stderr)
        return 1
    note, rows = machine_note(args.cold), []
    for path in paths:
        m = execute(path, cold=args.cold)
        print(f"{m.notebook}: {m.seconds:.1f} s (limit {m.time_limit:.0f} s), "
              f"{m.peak_bytes / 2**20:,.0f} MiB", flush=True)
        rows.append(m)
    print(markdown_table(rows))
    if args.write:  # rows of notebooks not measured this time stay, with their own date
        measured = {m.notebook for m in rows}
        kept = [line for name,
                line in table_rows(args.write).items() if name not in measured
                and (NOTEBOOKS / name.removesuffix(COLD)).exists()]
        write_table(args.write, markdown_table(rows, kept), note)
    problems = [p for m in rows for p in m.problems()]
    for p in problems:
        print(f"OVER BUDGET: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
