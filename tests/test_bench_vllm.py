"""``python -m paged_lab bench --vs-vllm`` without vLLM: the token comparison, the report, the runner's
protocol (driven through a stand-in script that answers as benchmarks/vllm_runner.py does) and the
runner's own rules (stdlib + vllm only, vLLM's CPU settings). The race itself needs the vLLM venv
(make bench-vllm) and is never run in CI."""

import ast
import json
import sys
import textwrap

import pytest
from scriptkit import ROOT, load_script

from paged_lab.tools import bench_vllm
from paged_lab.tools.bench import BenchRequest, RunResult
from paged_lab.tools.cli import build_parser


def test_compare_tokens_counts_identical_requests_and_finds_the_first_divergence():
    same = bench_vllm.compare_tokens([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]])
    assert same.all_equal and same.describe() == "identical: 2/2 requests, 5 tokens"
    diff = bench_vllm.compare_tokens([[1, 2, 3], [4, 5], [6, 7]], [[1, 2, 3], [4, 9], [0, 7]])
    assert not diff.all_equal and diff.identical == 1
    assert diff.first_divergence == (1, 1)  # request 1 differs from its output token 1 on
    assert diff.tokens_before_divergence == 3 + 1 + 0
    assert "1/3 requests identical" in diff.describe() and "request 1 at output token 1" in diff.describe()
    with pytest.raises(ValueError):
        bench_vllm.compare_tokens([[1]], [[1], [2]])  # one answer per request, or it is not the same workload


def _report() -> bench_vllm.RaceReport:
    work = [BenchRequest([1, 2, 3], 2), BenchRequest([4, 5], 3)]
    report = bench_vllm.RaceReport("float32", work, threads=2, max_num_seqs=32, block_size=128)
    report.paged_lab = [RunResult("paged_lab", s, 5, token_ids=[[7, 8], [9, 9,
                                                                         9]]) for s in (0.05, 0.04, 0.06)]
    report.vllm = [{"seconds": s, "output_tokens": 5, "tokens_per_s": 5 / s, "token_ids": [[7, 8], [9, 9, 9]]}
                   for s in (0.1, 0.08, 0.12)]
    report.vllm_settings = {"vllm_version": "0.32.0", "dtype": "torch.float32", "block_size": 128,
                            "max_num_batched_tokens": 4096, "threads_bind": "0-1", "ld_preload": ""}
    report.load = [0.5, 0.7, 0.6, 0.4, 0.5, 0.6]
    report.agreement = bench_vllm.compare_tokens(report.paged_lab[0].token_ids, report.vllm[0]["token_ids"])
    report.paged_lab_attention = "cpu"
    return report


def test_the_race_report_gives_medians_the_ratio_the_load_and_the_token_check():
    report = _report()
    assert (report.median("paged_lab") == pytest.approx(5 / 0.05)
            and report.median("vllm") == pytest.approx(5 / 0.1))
    assert report.ratio == pytest.approx(2.0)
    text = bench_vllm.format_race(report)
    assert "paged_lab vs vLLM 0.32.0 (CPU build), float32" in text
    assert "paged_lab / vLLM: 2.00x (ratio of the medians" in text
    assert "3 interleaved rounds" in text and "load average (1 min) before the runs: 0.40-0.70" in text
    assert "tokens, paged_lab vs vLLM (their first timed runs): identical: 2/2 requests, 5 tokens" in text
    report.vllm_repeatable = False
    assert "vLLM's runs did not all make the same tokens" in bench_vllm.format_race(report)


FAKE_RUNNER = textwrap.dedent('''
    import json, sys
    args = sys.argv[1:]
    work = json.load(open(args[args.index("--workload") + 1]))
    print("INFO vLLM-like log line")  # vLLM logs on stdout too: the prefix tells answers apart
    print("@@vllm_runner " + json.dumps({"event": "ready", "dtype": args[args.index("--dtype") + 1]}), \
flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        ids = [[0] * r["max_tokens"] for r in work]
        print("@@vllm_runner " + json.dumps({"event": "run", "seconds": 0.5, "tokens_per_s": 10.0,
                                            "output_tokens": sum(map(len, ids)), "token_ids": ids}), \
flush=True)
''')


def test_the_runner_protocol_skips_log_lines_and_answers_each_run(tmp_path, monkeypatch):
    fake = tmp_path / "fake_runner.py"
    fake.write_text(FAKE_RUNNER)
    monkeypatch.setattr(bench_vllm, "RUNNER", fake)
    (tmp_path / "w.json").write_text(json.dumps([{"prompt_token_ids": [1, 2], "max_tokens": 3}]))
    runner = bench_vllm.VllmRunner(sys.executable, tmp_path / "w.json", "unused", "bfloat16", 128, 32, 2,
                                   tmp_path / "vllm.log")
    try:
        assert runner.answer() == {"event": "ready", "dtype": "bfloat16"}
        assert runner.run()["token_ids"] == [[0, 0, 0]]
        assert runner.run()["tokens_per_s"] == 10.0
    finally:
        runner.close()
    assert runner.proc.returncode == 0
    assert "INFO vLLM-like log line" in (tmp_path / "vllm.log").read_text()


def test_a_missing_vllm_venv_is_named_with_how_to_build_it(tmp_path):
    with pytest.raises(ValueError, match="make vllm-venv"):
        bench_vllm.VllmRunner(str(tmp_path / "no" / "python"), tmp_path / "w.json", "m", "float32", 128, 32,
                              2, tmp_path / "log")


def test_the_vllm_runner_imports_only_the_standard_library_and_vllm():
    tree = ast.parse((ROOT / "benchmarks" / "vllm_runner.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - {"vllm", "__future__"} <= set(sys.stdlib_module_names), names


def test_the_vllm_runner_sets_vllm_cpu_threads_and_kv_cache(monkeypatch):
    runner = load_script("benchmarks/vllm_runner.py")
    for var in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    runner.set_cpu_env(threads=2, kv_cache_gib=1)
    import os

    assert (os.environ["VLLM_CPU_OMP_THREADS_BIND"], os.environ["OMP_NUM_THREADS"]) == ("0-1", "2")
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1")  # a user's own binding is kept
    runner.set_cpu_env(threads=1, kv_cache_gib=1)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "1"


def test_bench_vs_vllm_arguments_parse():
    args = build_parser().parse_args(["bench", "--vs-vllm", "--dtype", "bfloat16", "--vllm-python",
                                      "/v/bin/python"])
    assert args.vs_vllm and args.dtype == "bfloat16" and args.vllm_python == "/v/bin/python"
    # the race's own defaults
    assert args.repeats is None and args.batch_size is None and args.block_size is None
    assert build_parser().parse_args(["bench"]).dtype == "float32,bfloat16"
