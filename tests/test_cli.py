"""python -m paged_lab generate / bench."""

import subprocess
import sys

import pytest

from paged_lab.memory import BlockManager
from paged_lab.tools.cli import build_parser, final_block_tables, main


def test_generate_prints_text_and_block_tables():
    cmd = [sys.executable, "-m", "paged_lab", "generate", "The capital of France is", "--max-tokens", "4",
           "--block-size", "2", "--show-blocks", "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Paris" in out and "finish_reason=length" in out
    # 5 prompt tokens + 4 sampled, the last never stored: 8 slots -> 4 blocks of 2
    line = next(x for x in out.splitlines() if x.startswith("seq"))
    assert "8 tokens in blocks" in line and line.count(",") == 3
    assert "KV pool:" in out
    assert any(line.startswith("attention backend: ") and line.split(": ")[1] in ("cpu", "torch", "triton")
               for line in out.splitlines())  # the backend that ran, named


@pytest.mark.parametrize("flag,value,field", [("--max-tokens", "0", "max_tokens"),
                                              ("--top-p", "1.5", "top_p"),
                                              ("--temperature", "-1", "temperature"), ("--n", "0", "n")])
def test_bad_sampling_arguments_exit_2_naming_the_field(capsys, flag, value, field):
    assert main(["generate", "hi", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and field in err


def test_final_block_tables_come_from_the_free_events():
    bm = BlockManager(num_blocks=8, block_size=2)
    bm.allocate("a", [1, 2, 3])
    bm.append_token("a", 4)
    bm.append_token("a", 5)
    table = bm.block_table("a")
    bm.free("a")
    assert final_block_tables(bm.events) == {"a": (table, 5)}


def test_bench_arguments_parse():
    args = build_parser().parse_args(["bench", "--repeats", "3", "--batch-size", "4", "--methods",
                                      "paged_lab"])
    assert (args.repeats, args.batch_size, args.methods, args.requests) == (3, 4, "paged_lab", 32)
    assert args.compile and build_parser().parse_args(["bench", "--compile"]).compile  # compiled by default
    assert not build_parser().parse_args(["bench", "--eager"]).compile
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--eager", "--compile"])


@pytest.mark.slow
def test_a_small_bench_reports_tokens_per_second_and_ratios(smollm2):
    """The bench's own checks run (every method makes exactly the useful tokens); the report says how
    paged_lab multiplied and gives the ratio against each baseline it ran."""
    import torch

    from paged_lab.tools.bench import format_report, run_bench

    report = run_bench(repeats=1, batch_size=2, threads=torch.get_num_threads(), num_requests=4, num_long=1,
                       long_tokens=6, methods=("paged_lab", "hf_static"), progress=False, loaded=smollm2)
    text = format_report(report)
    assert "paged_lab weights: " in text and "paged_lab / hf_static: " in text
    from paged_lab.kernels import resolve_backend

    ran = resolve_backend("auto", torch.zeros(1, 16, 3, 64))  # SmolLM2's cache: 3 KV heads of 64
    assert f"paged_lab attention backend: {ran}\n" in text
    assert sum(r.max_tokens for r in report.workload) == report.runs["paged_lab"][0].output_tokens
    assert report.median_tokens_per_s("paged_lab") > 0 and report.median_tokens_per_s("hf_static") > 0
    # the step breakdown: prompts come in through prefill steps, and every decode step ran 1-2 sequences
    steps = report.runs["paged_lab"][0].steps
    assert steps["prefill"] and set(steps) - {"prefill"} <= {"decode 1", "decode 2"}
    assert "paged_lab's steps in its median run" in text and "  prefill" in text
