"""The throughput-latency sweep (notebook 05, section 5): the ordering it claims, and its figure."""

import pytest

from paged_lab.sim.sweep import latency_sweep, run_point, saturation
from paged_lab.viz.latency import fig_throughput_latency, latency_playground, latency_readout

RATES = (0.05, 0.3, 1.0)


@pytest.fixture(scope="module")
def points():
    return latency_sweep(RATES, num_requests=100)


def test_paging_saturates_last_and_static_batching_first(points):
    sat = saturation(points)
    assert sat["paged"] > 1.4 * sat["contiguous"] > 1.4 * sat["static"]
    low = {p.design: p for p in points if p.rate == 0.05}
    # Light load: continuous batching answers at once; static batching waits for the running batch.
    assert low["paged"].ttft_p90 == low["contiguous"].ttft_p90 == 1 < low["static"].ttft_p90
    high = {p.design: p for p in points if p.rate == 1.0}
    assert high["paged"].ttft_p90 < high["contiguous"].ttft_p90 < high["static"].ttft_p90
    # Contiguous reservations cap the running set at num_slots / MAX_SEQ_LEN = 8; paging does not.
    assert high["contiguous"].peak_running == 8 < high["paged"].peak_running


def test_more_windows_help_only_until_memory_is_full():
    tput = [run_point("paged", 1.0, num_requests=100, max_num_seqs=m).tokens_per_step for m in (4, 8, 16, 64)]
    assert tput[0] < tput[1] < tput[2]
    assert tput[3] == pytest.approx(tput[2], rel=0.1)  # the pool, not the windows, is the limit now


@pytest.mark.parametrize("call, match", [
    (lambda: run_point("orca", 0.5), "design must be one of"),
    (lambda: run_point("paged", 0), "rate must be a number > 0"),
    (lambda: run_point("paged", 0.5, num_slots=64), "num_slots must be an integer >= 128"),
    (lambda: latency_sweep(()), "rates must hold numbers > 0"),
])
def test_bad_sweep_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_figure_draws_each_design_on_both_panels_and_rings_the_chosen_rate(points):
    fig = fig_throughput_latency(points, highlight_rate=0.3)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(lines) == 6 and all(len(t.x) == len(RATES) for t in lines)
    rings = [t for t in fig.data if t.mode == "markers"]
    assert len(rings) == 6 and all(len(t.x) == 1 for t in rings)
    paged_ttft = next(t for t in lines if t.legendgroup == "paged" and t.showlegend)
    assert list(paged_ttft.y) == [p.ttft_p90 for p in points if p.design == "paged"]


def test_playground_follows_its_sliders():
    a = latency_playground(rate=0.4, block_size=16, num_requests=60, rates=(0.1, 1.0))
    b = latency_playground(rate=0.4, block_size=64, num_requests=60, rates=(0.1, 1.0))
    assert a.layout.title.text != b.layout.title.text
    assert latency_readout(a, 0.4, 16, 60) != latency_readout(a, 0.7, 16, 60)


def test_latency_readout_says_why_paged_answers_first():
    """One sentence that matters, then the numbers as a table (05's readout was four lines of numbers)."""
    (busy, numbers) = latency_readout(None, 0.4, 16, 60)
    assert "paged memory answers first" in busy and "capped the batch at" in busy and busy.count(". ") == 0
    assert numbers.header == ["design", "p90 TTFT (steps)", "output tokens per step", "most running at once"]
    assert [r[0] for r in numbers.rows] == ["static batching, contiguous", "continuous batching, contiguous",
                                           "continuous batching, paged"]
    (light, _) = latency_readout(None, 0.05, 16, 60)
    assert "memory is not the limit" in light


def test_latency_playground_keeps_its_axes_while_the_sliders_move():
    bounds = {"rate": (0.05, 1.5), "block_size": (8, 24), "num_requests": (20, 60)}
    figs = [latency_playground(rate=r, block_size=b, num_requests=n, rates=(0.1, 1.0), bounds=bounds)
            for r, b, n in ((0.05, 8, 20), (1.5, 24, 60), (0.7, 16, 40))]
    ranges = {(tuple(f.layout.xaxis.range), tuple(f.layout.yaxis.range), tuple(f.layout.yaxis2.range))
              for f in figs}
    assert len(ranges) == 1
    (x_hi, ttft_hi, itl_hi) = (figs[0].layout.xaxis.range[1], 10 ** figs[0].layout.yaxis.range[1],
                               figs[0].layout.yaxis2.range[1])
    for f in figs:  # every point inside
        for t in f.data:
            assert max(t.x) <= x_hi
            assert max(t.y) <= (ttft_hi if t.yaxis == "y" else itl_hi)


def test_latency_figure_labels_only_powers_of_ten_and_leaves_room_for_its_title():
    fig = latency_playground(rate=0.4, block_size=16, num_requests=60, rates=(0.1, 1.0))
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.minor.ticks == ""
    assert fig.layout.title.text.count("<br>") == 1 and fig.layout.margin.t == 80 + 24
