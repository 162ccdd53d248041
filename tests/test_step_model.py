"""Predict the step time: bytes and FLOPs of a step, the machine probe, and the roofline."""

import pytest

from paged_lab.engine.step_model import MachineProbe, predict_step_seconds, probe_machine, step_cost
from paged_lab.kv_math import get_spec, list_specs


@pytest.fixture
def spec():
    name = next(n for n in list_specs() if "smollm2" in n.lower())
    return get_spec(name)


def test_a_decode_step_reads_the_weights_once_and_each_sequences_kv(spec):
    one = step_cost(spec, num_tokens=1, context_tokens=100)
    eight = step_cost(spec, num_tokens=8, context_tokens=800)
    assert one.weight_bytes == eight.weight_bytes == spec.num_params * 4  # fp32, whatever the batch
    assert one.kv_bytes == 100 * spec.kv_bytes_per_token("float32")
    assert eight.kv_bytes == 8 * one.kv_bytes and eight.flops == pytest.approx(8 * one.flops)
    # batching is nearly free while the weights dominate the bytes
    assert eight.bytes < 1.1 * one.bytes
    assert step_cost(spec, 1, 100, dtype="bfloat16").weight_bytes == spec.num_params * 2


def test_roofline_takes_the_slower_of_bytes_and_flops(spec):
    probe = MachineProbe("test", bandwidth=1e10, matmul_flops=1e11)
    small = step_cost(spec, 1, 10)
    assert predict_step_seconds(small, probe) == pytest.approx(small.bytes / 1e10)  # memory-bound
    big = step_cost(spec, 4096, 4096)
    assert predict_step_seconds(big, probe) == pytest.approx(big.flops / 1e11)  # compute-bound


def test_probe_measures_positive_rates_and_checks_its_arguments():
    p = probe_machine(copy_mib=8, matmul_n=128, repeats=2)
    assert p.bandwidth > 1e7 and p.matmul_flops > 1e7 and p.device == "cpu"
    with pytest.raises(ValueError, match="matmul_n must be an integer >= 16"):
        probe_machine(matmul_n=4)
    with pytest.raises(ValueError, match="num_tokens must be an integer >= 1"):
        step_cost(get_spec(list_specs()[0]), 0, 10)


def test_measure_decode_steps_reads_the_engines_timeline_and_the_figure_draws_it():
    from tiny_models import tiny_torch_engine

    from paged_lab.tools.decode_steps import measure_decode_steps
    from paged_lab.viz.engine import fig_step_time

    llm = tiny_torch_engine()
    probe = MachineProbe("test", bandwidth=1e10, matmul_flops=1e11)
    rows = measure_decode_steps(llm, probe, batch_sizes=(1, 3), context_lens=(8, 20), max_tokens=3, rounds=2)
    assert [(r["batch_size"], r["context_len"]) for r in rows] == [(1, 8), (3, 8), (1, 20), (3, 20)]
    # the shapes take turns, round after round: two decode steps each (max_tokens=3, the prefill samples one)
    decode_batches = [t["num_decode"] for t in llm.timeline if t["num_prefill"] == 0]
    assert decode_batches == [1, 1, 3, 3, 1, 1, 3, 3] * 2
    with pytest.raises(ValueError, match="rounds must be an integer >= 1"):
        measure_decode_steps(llm, probe, rounds=0)
    # decodes at steps 1 and 2; the middle one (step 2) of 3 sequences with 20-token prompts reads
    # 3 x 22 tokens of context (prompt + 2 sampled tokens, the newest one included)
    assert rows[3]["bytes"] == step_cost(llm.spec, 3, 66).bytes
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in rows)
    fig = fig_step_time(rows)  # batch size on x, measured and predicted per context length
    by_ctx = {(t.name, round(x)): y for t in fig.data for x, y in zip(t.x, t.y)}
    assert all(by_ctx[f"predicted, {r['context_len']} tokens of context", r["batch_size"]] == 1e3
               * r["predicted_s"]
               for r in rows)
