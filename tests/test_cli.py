"""python -m paged_lab generate / bench."""

import subprocess
import sys

import pytest

from paged_lab.cli import build_parser, final_block_tables, main
from paged_lab.memory import BlockManager


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


@pytest.mark.parametrize("flag,value,field", [("--max-tokens", "0", "max_tokens"), ("--top-p", "1.5", "top_p"),
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
    args = build_parser().parse_args(["bench", "--repeats", "3", "--batch-size", "4", "--methods", "paged_lab"])
    assert (args.repeats, args.batch_size, args.methods, args.requests) == (3, 4, "paged_lab", 32)
