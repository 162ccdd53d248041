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
