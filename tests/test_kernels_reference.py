"""The torch reference and the vectorized torch path against contiguous attention (torch SDPA).

The "truth" here is attention on the contiguous K/V that ``random_paged_kv`` kept aside, computed
by torch SDPA: it never touches a block table, so it checks the paged gather independently.
Unused cache slots hold NaN throughout: reading one would poison the output.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_lab.kernels import paged_attention_decode, paged_attention_prefill, store_kv
from paged_lab.kernels.synthetic import contiguous_attention, random_paged_kv

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}  # abs and rel


def _qsl(q_lens):
    return torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)


def _close(a, b, dtype):
    torch.testing.assert_close(a.float(), b.float(), atol=TOL[dtype], rtol=TOL[dtype])


# ------------------------------------------------------------------------------------------ store
def test_store_kv_writes_each_token_into_its_slot_and_skips_negative_slots():
    k_cache = torch.zeros(4, 3, 2, 8)
    v_cache = torch.zeros(4, 3, 2, 8)
    k, v = torch.randn(4, 2, 8), torch.randn(4, 2, 8)
    slots = torch.tensor([7, 0, -1, 11])  # block 2 offset 1, block 0 offset 0, padding, block 3 offset 2
    store_kv(k, v, k_cache, v_cache, slots, backend="reference")
    assert torch.equal(k_cache[2, 1], k[0]) and torch.equal(v_cache[2, 1], v[0])
    assert torch.equal(k_cache[0, 0], k[1]) and torch.equal(k_cache[3, 2], k[3])
    written = torch.zeros(4, 3, dtype=torch.bool)
    written[2, 1] = written[0, 0] = written[3, 2] = True
    assert k_cache[~written].abs().sum() == 0  # nothing else touched, the padding token included
    assert v_cache[~written].abs().sum() == 0


def test_random_paged_kv_scatters_blocks_non_contiguously():
    kv = random_paged_kv([40, 7], block_size=8, num_kv_heads=1, head_dim=4, seed=3)
    row = kv.block_tables[0, :5].tolist()
    assert row != sorted(row) or row != list(range(row[0], row[0] + 5))
    assert torch.isnan(kv.k_cache).any()  # unused slots really hold NaN


# ----------------------------------------------------------------------------------------- decode
seq_lens = st.lists(st.integers(1, 70), min_size=1, max_size=4)


@settings(max_examples=25, deadline=None)
@given(
    lens=seq_lens,
    block_size=st.sampled_from([1, 2, 3, 4, 8, 16, 32]),
    num_kv_heads=st.integers(1, 3),
    group=st.sampled_from([1, 3, 4, 8]),
    seed=st.integers(0, 2**16),
)
def test_decode_reference_and_torch_match_contiguous_attention(lens, block_size, num_kv_heads, group, seed):
    d = 16
    kv = random_paged_kv(lens, block_size, num_kv_heads, d, table_pad=-1, seed=seed)
    q = torch.randn(len(lens), num_kv_heads * group, d, generator=torch.Generator().manual_seed(seed))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, d**-0.5)
    ref = paged_attention_decode(*args, backend="reference")
    fast = paged_attention_decode(*args, backend="torch")
    for i in range(len(lens)):
        truth = contiguous_attention(q[i : i + 1], kv.keys[i], kv.values[i], d**-0.5)[0]
        _close(ref[i], truth, torch.float32)
    _close(fast, ref, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_half_precision_within_dtype_tolerance(dtype):
    kv = random_paged_kv([1, 16, 37], 16, 2, 32, dtype=dtype, seed=1)
    q = torch.randn(3, 6, 32).to(dtype)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 32**-0.5)
    ref = paged_attention_decode(*args, backend="reference")
    fast = paged_attention_decode(*args, backend="torch")
    assert ref.dtype == fast.dtype == dtype
    for i in range(3):
        _close(ref[i], contiguous_attention(q[i : i + 1], kv.keys[i], kv.values[i], 32**-0.5)[0], dtype)
    _close(fast, ref, dtype)


# ---------------------------------------------------------------------------------------- prefill
@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    block_size=st.sampled_from([1, 3, 4, 8, 16]),
    group=st.sampled_from([1, 3, 4]),
    seed=st.integers(0, 2**16),
)
def test_prefill_reference_and_torch_match_causal_contiguous_attention(data, block_size, group, seed):
    d, kvh = 16, 2
    lens = data.draw(st.lists(st.integers(0, 50), min_size=1, max_size=3), label="context_lens")
    # last q_len positions are queries
    q_lens = [data.draw(st.integers(0, n), label="query_len") for n in lens]
    kv = random_paged_kv(lens, block_size, kvh, d, table_pad=-1, seed=seed)
    q = torch.randn(sum(q_lens), kvh * group, d, generator=torch.Generator().manual_seed(seed))
    qsl = _qsl(q_lens)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, d**-0.5)
    ref = paged_attention_prefill(*args, backend="reference")
    fast = paged_attention_prefill(*args, backend="torch")
    for i, (n, ql) in enumerate(zip(lens, q_lens)):
        s, e = int(qsl[i]), int(qsl[i + 1])
        if ql:
            truth = contiguous_attention(q[s:e], kv.keys[i], kv.values[i], d**-0.5, causal_offset=n - ql)
            _close(ref[s:e], truth, torch.float32)
    _close(fast, ref, torch.float32)


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_chunked_prefill_equals_one_shot_prefill(backend):
    """A 29-token prompt prefilled as chunks 0..11, 11..20, 20..29 (starting mid-block) == all at once."""
    d, n, bs = 16, 29, 8
    kv = random_paged_kv([n], bs, 1, d, seed=5)
    q = torch.randn(n, 3, d)
    whole = paged_attention_prefill(
        q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, _qsl([n]), d**-0.5, backend=backend
    )
    pieces = []
    for start, end in [(0, 11), (11, 20), (20, 29)]:
        lens = torch.tensor([end], dtype=torch.int32)  # the cache holds K/V up to `end` for this chunk
        pieces.append(
            paged_attention_prefill(
                q[start:end], kv.k_cache, kv.v_cache, kv.block_tables, lens, _qsl([end - start]), d**-0.5,
                backend=backend,
            )
        )
    _close(torch.cat(pieces), whole, torch.float32)


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_decode_equals_last_row_of_prefill(backend):
    d = 16
    kv = random_paged_kv([5, 33], 4, 2, d, seed=9)
    q = torch.randn(5 + 33, 4, d)
    qsl = _qsl([5, 33])
    pre = paged_attention_prefill(
        q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, d**-0.5, backend=backend
    )
    last = torch.stack([q[4], q[37]])
    dec = paged_attention_decode(last, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, d**-0.5,
                                 backend)
    _close(dec, torch.stack([pre[4], pre[37]]), torch.float32)


# ------------------------------------------------------------------ stepwise (notebook 06's build-up)
@settings(max_examples=20, deadline=None)
@given(
    lens=st.lists(st.integers(1, 60), min_size=1, max_size=3),
    block_size=st.sampled_from([1, 4, 8, 16]),
    group=st.sampled_from([1, 3, 4]),
    num_splits=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_stepwise_program_and_split_merge_match_the_reference(lens, block_size, group, num_splits, seed):
    from paged_lab.kernels.stepwise import decode_program, merge_splits

    d, kvh = 16, 2
    kv = random_paged_kv(lens, block_size, kvh, d, seed=seed)
    q = torch.randn(len(lens), kvh * group, d, generator=torch.Generator().manual_seed(seed))
    ref = paged_attention_decode(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, d**-0.5,
                                 "reference")
    for i, n in enumerate(lens):
        nb = -(-n // block_size)
        per = -(-nb // num_splits)
        for h in range(kvh):
            qg = q[i, h * group : (h + 1) * group]
            whole, _ = decode_program(qg, kv.k_cache, kv.v_cache, kv.block_tables[i], n, h, d**-0.5)
            parts = [
                decode_program(qg, kv.k_cache, kv.v_cache, kv.block_tables[i], n, h, d**-0.5,
                               blocks=range(s * per, min((s + 1) * per, nb)))  # fmt: skip
                for s in range(num_splits)  # trailing splits may be empty
            ]
            merged = merge_splits([o for o, _ in parts], [lse for _, lse in parts])
            _close(whole, ref[i, h * group : (h + 1) * group], torch.float32)
            _close(merged, whole, torch.float32)


# ------------------------------------------------------------------- block-size trade-off, figures
def test_block_size_cost_counts_table_entries_and_last_block_waste():
    from paged_lab.kernels.tradeoff import block_size_cost

    c = block_size_cost([37, 16, 5], 8)
    assert (c.table_entries, c.wasted_slots, c.slots) == (5 + 2 + 1, 3 + 0 + 3, 64)
    assert c.waste_frac == 6 / 64 and c.lookups_per_seq == 8 / 3
    assert block_size_cost([37, 16, 5], 1).wasted_slots == 0
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        block_size_cost([3], 0)


def test_fig_paged_pool_colours_each_slot_by_owner_and_marks_empty_and_free_slots():
    from paged_lab.viz.kernels import fig_paged_pool

    kv = random_paged_kv([37, 16, 5], 8, 1, 4, extra_blocks=3, seed=0)
    fig = fig_paged_pool(kv.block_tables, kv.context_lens, kv.k_cache.shape[0], 8)
    z = fig.data[0].z
    bt = kv.block_tables.tolist()
    # token 36 held, slot 37 empty
    assert z[bt[0][0]][0] == 0 and z[bt[0][4]][4] == 0 and z[bt[0][4]][5] == 0.5
    assert z[bt[1][1]][7] == 1 and z[bt[2][0]][5] == 2.5
    free = set(range(11)) - {b for row, n in zip(bt, [5, 2, 1]) for b in row[:n]}
    assert len(free) == 3 and all(z[b] == [-1.0] * 8 for b in free)
    stops = [p for p, _ in fig.data[0].colorscale]
    assert stops[0] == 0 and stops[-1] == 1 and stops == sorted(stops)


def test_block_size_cost_counts_what_the_block_manager_allocates():
    """The arithmetic notebooks 03 and 06 and their figures use, against the real BlockManager: every
    sequence allocated at each block size."""
    from paged_lab.kernels.tradeoff import block_size_cost
    from paged_lab.kv_math import cdiv
    from paged_lab.memory import BlockManager

    lens = [5, 9, 16]
    rows = []
    for bs in (1, 4, 16):
        bm = BlockManager(sum(cdiv(n, bs) for n in lens), bs)
        for i, n in enumerate(lens):
            bm.allocate(i, [0] * n)
        rows.append({"block_size": bs, "table_entries": bm.num_used_blocks,
                     "wasted_slots": bm.num_used_blocks * bs - sum(lens)})
    assert [r["wasted_slots"] for r in rows] == [0, 3 + 3 + 0, 11 + 7 + 0]
    assert [r["table_entries"] for r in rows] == [30, 2 + 3 + 4, 3]
    for r in rows:
        cost = block_size_cost(lens, r["block_size"])
        assert (r["wasted_slots"], r["table_entries"]) == (cost.wasted_slots, cost.table_entries)


def test_fig_block_size_tradeoff_and_readout_use_the_costs():
    from paged_lab.kernels.tradeoff import block_size_cost
    from paged_lab.viz.kernels import fig_block_size_tradeoff, sample_context_lens, tradeoff_readout

    lens = sample_context_lens(10, 100, seed=1)
    assert len(lens) == 10 and all(50 <= n <= 150 for n in lens)
    fig = fig_block_size_tradeoff(lens, block_sizes=(1, 16))
    assert list(fig.data[0].y) == [block_size_cost(lens, b).lookups_per_seq for b in (1, 16)]
    assert fig.data[1].y[0] == 0 and fig.data[1].y[1] == 100 * block_size_cost(lens, 16).waste_frac
    c = block_size_cost(lens, 16)
    assert f"{c.wasted_slots:,} of {c.slots:,} slots empty" in tradeoff_readout(
        block_size=16, mean_context=100, num_seqs=10, seed=1)  # fmt: skip


def test_fig_kernel_bench_draws_one_line_per_batch_and_block_size():
    from paged_lab.viz.kernels import fig_kernel_bench

    # figure plumbing only: these rows are test inputs, not measurements
    rows = [dict(batch=b, block_size=16, context_len=n, gbs=float(n * b), pct_peak=None, vs_sdpa=1.0,
                 device="x")
            for b in (1, 32) for n in (4096, 1024)]  # fmt: skip
    fig = fig_kernel_bench(rows, metric="gbs")
    assert [t.name for t in fig.data] == ["batch 1, block 16", "batch 32, block 16"]
    assert list(fig.data[1].x) == [1024, 4096] and list(fig.data[1].y) == [1024.0 * 32, 4096.0 * 32]
    assert len(fig_kernel_bench(rows, metric="pct_peak").data[0].x) == 0  # no peak known: no invented points
    with pytest.raises(ValueError, match="metric must be one of"):
        fig_kernel_bench(rows, metric="speed")
