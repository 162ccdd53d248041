from paged_lab.kv_math import GB, get_spec, plan_capacity
from paged_lab.tools.cli import main


def test_kv_prints_the_formula_and_capacity(capsys):
    assert main(["kv", "llama-3.2-1b", "--gpu-gb", "80", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "2 x 16 x 8 x 64 x 2 B = 32,768 B" in out
    plan = plan_capacity(get_spec("llama-3.2-1b"), 80 * GB, 4096)
    assert f"{plan.max_seqs:,} sequences of 4,096 tokens" in out


def test_kv_prints_mla_latent_and_sliding_window_savings(capsys):
    assert main(["kv", "deepseek-v3"]) == 0
    assert "61 x (512 + 64) x 2 B = 70,272 B" in capsys.readouterr().out
    assert main(["kv", "gpt-oss-20b", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    # 12 full layers keep 4,096 tokens, 12 sliding ones 128, at 2 x 8 x 64 x 2 B a layer and token
    assert "12 of 24 layers keep only the last 128 tokens: 4,096 tokens take 99 MiB, not 192 MiB" in out
    assert (12 * 4096 + 12 * 128) * 2048 == 99 * 2**20
    assert "blocks of" not in out  # a hybrid model has no one block size for all its layers


def test_kv_unknown_model_is_one_clear_line(capsys):
    assert main(["kv", "gpt-9"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'gpt-9'" in err and "llama-3.1-8b" in err


def test_simulate_compares_paged_and_contiguous(capsys):
    assert main(["simulate", "--requests", "60"]) == 0  # 32,768 slots; 2,048-slot reservations
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines
            if line.split()[:1] in (["paged"], ["contiguous"])}
    # columns: makespan, tokens_per_step, ..., utilization (7th), num_rejected
    assert float(rows["paged"][6]) > float(rows["contiguous"][6])
    assert int(rows["paged"][0]) <= int(rows["contiguous"][0])  # makespan
    assert rows["paged"][7] == rows["contiguous"][7] == "0"     # nobody rejected


def test_simulate_rejects_unknown_allocator(capsys):
    assert main(["simulate", "--requests", "5", "--allocators", "buddy"]) == 2
    assert "--allocators" in capsys.readouterr().err
