import pytest

from paged_lab.kv_math import COMMON_GPU_SIZES_GB, GB, get_spec, plan_capacity
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
    weights, weights_over, kv_fit, kv_over, free, marker, _labels = fig.data
    assert list(weights_over.y) == [0, 0]  # 16 GB of weights fit both cards
    need = spec.kv_bytes(32 * 4096, "bf16") / GB
    for i, size in enumerate((24, 80)):
        budget = plan_capacity(spec, size * GB, 4096).kv_budget_bytes / GB
        assert abs(kv_fit.y[i] + kv_over.y[i] - need) < 1e-9
        assert abs(kv_fit.y[i] + free.y[i] - budget) < 1e-9
        # the stack below the overflow is the card
        assert abs(weights.y[i] + kv_fit.y[i] + free.y[i] - size) < 1e-9
    # 32 x 4096 tokens (17 GB) fit on 80 GB, not beside 16 GB of weights on 24
    assert kv_over.y[0] > 0 and kv_over.y[1] == 0
    assert list(marker.y) == [24, 80]


def test_kv_vs_gpu_changes_with_inputs():
    a = fig_kv_vs_gpu("smollm2-135m", "bfloat16", 2048, 8)
    b = fig_kv_vs_gpu("smollm2-135m", "bfloat16", 4096, 8)
    assert list(a.data[2].y) != list(b.data[2].y)


def test_kv_vs_gpu_labels_fits_readably_on_a_fixed_axis():
    spec = get_spec("llama-3.1-8b")
    small = fig_kv_vs_gpu(spec, "bfloat16", context_len=4096, num_requests=8, gpu_sizes_gb=(24, 80))
    large = fig_kv_vs_gpu(spec, "bfloat16", context_len=32768, num_requests=256, gpu_sizes_gb=(24, 80))
    labels = small.data[-1]
    fits = [plan_capacity(spec, s * GB, 4096).max_seqs for s in (24, 80)]
    assert list(labels.text) == [f"fits {n:,} seqs" for n in fits] and labels.textfont.size >= 12
    # above bar and card
    assert labels.y[0] > max(24, sum(t.y[0] for t in small.data[:4])) and labels.y[1] > 80
    assert small.layout.yaxis.range == large.layout.yaxis.range == (0, 100)  # the y-axis stays put
    assert "GB" in small.layout.yaxis.title.text


def test_weights_larger_than_a_card_are_drawn_whole_past_its_line():
    """gpt-oss-20b's 42 GB of bf16 weights were cut at a 16 or 24 GB card's size: they looked as if
    they fitted. The part past the card is its own hatched bar, and the stack reaches 42 GB."""
    spec = get_spec("gpt-oss-20b")
    fig = fig_kv_vs_gpu(spec, "bfloat16", context_len=4096, num_requests=32)
    weights, over = fig.data[0], fig.data[1]
    assert over.name == "weights that do not fit" and over.marker.pattern.shape == "/"
    gb = spec.weight_bytes() / GB
    assert gb > 40
    for i, size in enumerate(COMMON_GPU_SIZES_GB):
        assert weights.y[i] + over.y[i] == pytest.approx(gb)  # the whole weights, whatever the card
        assert weights.y[i] == pytest.approx(min(gb, size)) and (over.y[i] > 0) == (gb > size)


def test_token_kv_picture_is_the_formula():
    from paged_lab.viz.kv import fig_token_kv

    spec = get_spec("llama-3.2-1b")
    fig = fig_token_kv(spec, "bfloat16")
    z = fig.data[0].z
    assert len(z) == spec.num_layers  # one row per layer
    squares = [v for row in z for v in row if v is not None]
    assert squares.count(0) == squares.count(1) == spec.num_layers * spec.num_kv_heads  # K and V per KV head
    per_square = spec.head_dim * 2  # head_dim numbers of 2 bytes each
    assert len(squares) * per_square == spec.kv_bytes_per_token("bfloat16") == 32_768
    assert "32,768 B" in fig.layout.title.text and "64 numbers × 2 B = 128 B" in fig.layout.title.text
    mqa = fig_token_kv(spec.as_mqa(), "fp8")
    assert [v for row in mqa.data[0].z for v in row if v is not None].count(0) == spec.num_layers


def test_capacity_readout_says_where_it_fits_and_why():
    from paged_lab.viz import capacity_readout

    spec = get_spec("llama-3.1-8b")
    text = capacity_readout(spec, "bfloat16", 4096, 32, gpu_sizes_gb=(24, 40, 80))
    on_24 = plan_capacity(spec, 24 * GB, 4096).max_seqs
    assert ("17.18 GB</b> of KV" in text and "from <b>40 GB</b> up" in text
            and f"on 24 GB only {on_24} fit" in text)
    assert "no card here holds it" in capacity_readout("llama-3.1-70b", "bfloat16", 4096, 32,
                                                       gpu_sizes_gb=(80,))


def test_measurement_table_is_a_table_of_the_measurement():
    from paged_lab.viz.kv import measurement_table

    m = {"num_tokens": 12, "total_bytes": 552960, "bytes_per_token": 46080, "num_tensors": 60,
         "shape": (1, 3, 12, 64), "dtype": "float32"}
    md = measurement_table(m, 552_960)._repr_markdown_()
    assert md.count("\n") == 8 and "| 1 × 3 × 12 × 64 |" in md and md.count("552,960") == 2


def test_catalogue_table_is_a_markdown_table_of_every_model():
    from paged_lab.kv_math import list_specs
    from paged_lab.viz import catalogue_table

    md = catalogue_table("bfloat16", 4096)._repr_markdown_().split("\n")
    assert len(md) == 2 + len(list_specs())
    row = next(line for line in md if line.startswith("| llama-3.2-1b |"))
    assert "| 16 | 32 | 8 | 64 | GQA |" in row and "| 32 |" in row and row.endswith("| 0.125 |")
