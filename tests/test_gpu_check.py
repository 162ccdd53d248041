"""scripts/gpu_check.py's CPU side: arguments, the no-GPU exit, the report. The GPU parts need a GPU."""

import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scriptkit import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    return load_script(SCRIPT)


def test_arguments(gc, tmp_path, capsys):
    args = gc.parse_args(["--out", str(tmp_path)])
    assert args.only == list(gc.PARTS) and args.model == "random:llama-3.2-1b" and args.requests == 64
    assert gc.parse_args(["--out", "x", "--only", "kernels, identity"]).only == ["kernels", "identity"]
    for argv, msg in ((["--out", "x", "--only", "kernel"], "subset"), (["--only", "kernels"], "--out"),
                      (["--out", "x", "--requests", "4"], ">= 8")):  # fmt: skip
        with pytest.raises(SystemExit):
            gc.parse_args(argv)
        assert msg in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_exits_at_once_with_a_clear_message(tmp_path):
    start = time.monotonic()
    res = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "o")], capture_output=True,
                         text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 2
    assert "needs a CUDA GPU" in res.stderr and "nothing was run" in res.stderr
    assert not (tmp_path / "o").exists()  # no report pretending to be a result
    assert time.monotonic() - start < 60


def test_report_names_the_gpu_each_command_and_failures(gc, tmp_path):
    results = [gc.Result("bandwidth", "best share of peak", 81.5, "%", gc.TARGETS["bandwidth"], True,
                         "python x --only bandwidth"),
               gc.Result("throughput", "engine / static batching", 2.1, "x", gc.TARGETS["throughput"], False,
                         "python x --only throughput"),
               gc.Result("identity", "tokens compared", 250, command="python x --only identity")]  # fmt: skip
    env = {"python": "3.12.0", "torch": "2.11.0", "gpu": "NVIDIA H200 (sm_90, 1 visible)"}
    md, csv_path = gc.write_report(results, env, tmp_path / "out", 321.0)
    text = md.read_text()
    assert text.startswith("# GPU check: NVIDIA H200 (sm_90, 1 visible)")
    assert "`python x --only bandwidth`" in text and "**NO**" in text and "torch 2.11.0" in text
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["part"] for r in rows] == ["bandwidth", "throughput", "identity"]
    assert {r["gpu"] for r in rows} == {"NVIDIA H200 (sm_90, 1 visible)"} and rows[1]["met"] == "False"


def test_bandwidth_targets_from_kernel_bench_rows(gc):
    def row(ctx, batch, gbs, pct, ratio, err=1e-3):
        return dict(context_len=str(ctx), batch=str(batch), block_size="16", gbs=str(gbs), pct_peak=str(pct),
                    vs_sdpa=str(ratio), max_abs_err=str(err))  # fmt: skip

    rows = [row(4096, 32, 3000, 62.5, 1.1), row(4096, 64, 3500, 72.9, 1.0), row(1024, 1, 100, 2.0, 1.4)]
    res = gc.bandwidth_results(rows, "cmd")
    assert res[0].value == 72.9 and res[0].met
    assert res[1].value == 1.4 and res[1].met is False  # the worst ratio anywhere in the sweep
    assert res[2].met
    unlisted = gc.bandwidth_results([row(4096, 32, 3000, "None", 1.0)], "cmd")
    assert unlisted[0].value == "n/a" and unlisted[0].met is None  # GPU not in PEAK_GBS: no guess
