from paged_lab.kv_math import GB, get_spec, plan_capacity
from paged_lab.viz import fig_kv_by_model, fig_kv_vs_gpu, fig_mha_gqa_mqa


def test_mha_gqa_mqa_bars_are_the_formula():
    fig = fig_mha_gqa_mqa("llama-3.2-1b", "bfloat16")
    assert list(fig.data[0].y) == [128.0, 32.0, 4.0]  # KiB/token as MHA (32 KV heads), GQA (8), MQA (1)


def test_kv_by_model_has_one_bar_per_model():
    fig = fig_kv_by_model("bfloat16", 1000, models=["smollm2-135m", "llama-3.2-1b"])
    assert list(fig.data[0].x) == [23_040 * 1000 / 2**20, 32_768 * 1000 / 2**20]


def test_kv_vs_gpu_stacks_weights_kv_and_free():
    spec = get_spec("llama-3.1-8b")
    fig = fig_kv_vs_gpu(spec, "bfloat16", context_len=4096, num_requests=32, gpu_sizes_gb=(24, 80))
    weights, kv_fit, kv_over, free, marker = fig.data
    need = spec.kv_bytes(32 * 4096, "bf16") / GB
    for i, size in enumerate((24, 80)):
        budget = plan_capacity(spec, size * GB, 4096).kv_budget_bytes / GB
        assert abs(kv_fit.y[i] + kv_over.y[i] - need) < 1e-9
        assert abs(kv_fit.y[i] + free.y[i] - budget) < 1e-9
        assert abs(weights.y[i] + kv_fit.y[i] + free.y[i] - size) < 1e-9  # the stack below the overflow is the card
    assert kv_over.y[0] > 0 and kv_over.y[1] == 0  # 32 x 4096 tokens (17 GB) fit on 80 GB, not beside 16 GB of weights on 24
    assert list(marker.y) == [24, 80]


def test_kv_vs_gpu_changes_with_inputs():
    a = fig_kv_vs_gpu("smollm2-135m", "bfloat16", 2048, 8)
    b = fig_kv_vs_gpu("smollm2-135m", "bfloat16", 4096, 8)
    assert list(a.data[1].y) != list(b.data[1].y)
