"""Cells that run for seconds show progress while they run (issue 38 section 2): the package functions
notebooks 07 and 08 call draw a tqdm bar by default, and ``progress=False`` silences it."""

import pytest
from tiny_models import tiny_torch_engine


def test_measuring_decode_steps_counts_its_runs_on_a_bar(capsys):
    from paged_lab.engine.step_model import MachineProbe
    from paged_lab.tools.decode_steps import measure_decode_steps

    llm, probe = tiny_torch_engine(), MachineProbe("test", bandwidth=1e10, matmul_flops=1e11)
    measure_decode_steps(llm, probe, batch_sizes=(1, 2), context_lens=(8,), max_tokens=3, rounds=2)
    err = capsys.readouterr().err
    assert "decode steps" in err and "4/4" in err and "2 seqs x 8 tokens" in err
    measure_decode_steps(llm, probe, batch_sizes=(1,), context_lens=(8,), max_tokens=3, rounds=1,
                         progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_the_fp8_comparison_and_the_benchmark_show_progress(smollm2, capsys):
    from paged_lab.tools.bench import run_bench
    from paged_lab.tools.kv_dtypes import compare_kv_cache_dtypes

    model, tok, _ = smollm2
    compare_kv_cache_dtypes(model, prompts=["Hi", "Name a color."], max_tokens=3, tokenizer=tok,
                            cpu_prepack=False)
    err = capsys.readouterr().err
    assert "fp8 vs float32 cache" in err and "4/4" in err and "teacher-forced logits" in err
    run_bench(repeats=1, batch_size=2, threads=1, num_requests=4, num_long=1, long_tokens=6,
              methods=("paged_lab", "hf_static"), progress=True, loaded=smollm2, cpu_prepack=False)
    err = capsys.readouterr().err
    assert "bench" in err and "hf_static batch 2/2" in err and "generate" in err  # the runs' own progress
    compare_kv_cache_dtypes(model, prompts=["Hi"], max_tokens=2, tokenizer=tok, cpu_prepack=False,
                            progress=False)
    assert "fp8 vs" not in capsys.readouterr().err


def test_the_load_bars_label_keeps_its_width():
    """In Jupyter the label shrank and wrapped ("load_model('smollm2- / 135m')") beside a long postfix:
    it is now not allowed to shrink (what a browser draws is checked by tests/browser)."""
    from tqdm.notebook import tqdm

    from paged_lab.models import keep_label_whole

    with tqdm(total=3, desc="load_model('smollm2-135m')", display=False) as bar:
        keep_label_whole(bar)
        label, _, postfix = bar.container.children
        assert label.layout.flex == "0 0 auto" and postfix.layout.flex == "1 1 0%"
    keep_label_whole(object())  # a console bar has no widget: nothing to do
