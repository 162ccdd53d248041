"""Sliding-window paged attention (``sliding_window=W``) in the torch and reference backends, against a
dense masked attention written here from the definition: the query at position p sees keys p-W+1..p.

Block tables hold NULL_BLOCK (-1) where a window group gave a block back (every position of the block is
before every query's window), and those physical blocks are filled with NaN: a backend that read one
would return NaN."""

import pytest
import torch

from paged_lab import kernels
from paged_lab.kernels import dispatch, torch_paged
from paged_lab.kv_math import cdiv
from paged_lab.memory.block_pool import NULL_BLOCK

BACKENDS = ["torch", "reference"]


def dense_window_attention(q, k, v, q_pos, W, scale):
    """q [nq, H, d] at positions q_pos [nq]; k, v [ctx, kvh, d] of positions 0..ctx-1 -> [nq, H, d]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    kp = torch.arange(k.shape[0])[None, :]
    see = (kp <= q_pos[:, None]) & (kp > q_pos[:, None] - W)  # [nq, ctx]
    scores = scores.masked_fill(~see, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def paged_batch(seed, ctxs, q_lens, W, block_size, kvh=2, H=4, d=8):
    """Random K/V of every sequence written into a shuffled pool; its tables with NULL_BLOCK for the
    blocks before each sequence's first query's window, those pool blocks set to NaN."""
    g = torch.Generator().manual_seed(seed)
    nbs = [cdiv(c, block_size) for c in ctxs]
    num_blocks = sum(nbs) + 2
    k_cache = torch.randn(num_blocks, block_size, kvh, d, generator=g)
    v_cache = torch.randn(num_blocks, block_size, kvh, d, generator=g)
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables, ks, vs, qs = [], [], [], []
    for ctx, ql, nb in zip(ctxs, q_lens, nbs):
        ids = [perm.pop() for _ in range(nb)]
        k = torch.randn(ctx, kvh, d, generator=g)
        v = torch.randn(ctx, kvh, d, generator=g)
        for i, b in enumerate(ids):
            rows = slice(i * block_size, min(ctx, (i + 1) * block_size))
            k_cache[b, : rows.stop - rows.start] = k[rows]
            v_cache[b, : rows.stop - rows.start] = v[rows]
        first = max(0, ctx - ql - W + 1)  # the first query's window start
        for i in range(first // block_size):  # wholly before every window: given back
            k_cache[ids[i]] = float("nan")
            v_cache[ids[i]] = float("nan")
            ids[i] = NULL_BLOCK
        tables.append(ids)
        ks.append(k)
        vs.append(v)
        qs.append(torch.randn(ql, H, d, generator=g))
    width = max(nbs)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    return qs, ks, vs, k_cache, v_cache, bt, torch.tensor(ctxs, dtype=torch.int32)


CASES = [  # (ctxs, W, block_size): W smaller than, equal to and larger than a block; block boundaries
    ([1, 7, 16, 17, 40], 3, 4),
    ([16, 33, 64, 5], 16, 16),
    ([31, 32, 33, 100], 32, 16),
    ([9, 50, 12], 20, 8),
    ([3, 70], 1, 16),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ctxs, W, block_size", CASES)
def test_window_decode_equals_dense(backend, ctxs, W, block_size):
    qs, ks, vs, kc, vc, bt, lens = paged_batch(0, ctxs, [1] * len(ctxs), W, block_size)
    q = torch.cat(qs)
    out = kernels.paged_attention_decode(q, kc, vc, bt, lens, 0.3, backend=backend, sliding_window=W)
    for i, c in enumerate(ctxs):
        want = dense_window_attention(qs[i], ks[i], vs[i], torch.tensor([c - 1]), W, 0.3)
        torch.testing.assert_close(out[i : i + 1], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ctxs, W, block_size", CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_window_prefill_chunks_equal_dense(backend, ctxs, W, block_size, seed):
    """Each sequence's query is its last q_len positions: a whole prompt, or a later chunk of one."""
    g = torch.Generator().manual_seed(seed)
    q_lens = [int(torch.randint(1, c + 1, (1,), generator=g)) for c in ctxs]
    qs, ks, vs, kc, vc, bt, lens = paged_batch(seed, ctxs, q_lens, W, block_size)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    out = kernels.paged_attention_prefill(torch.cat(qs), kc, vc, bt, lens, qsl, 0.3, backend=backend,
                                          sliding_window=W)
    for i, (c, ql) in enumerate(zip(ctxs, q_lens)):
        want = dense_window_attention(qs[i], ks[i], vs[i], torch.arange(c - ql, c), W, 0.3)
        torch.testing.assert_close(out[qsl[i]:qsl[i + 1]], want, atol=1e-5, rtol=1e-5)


def test_window_store_and_decode_with_a_plan_equals_dense():
    """The engine's path: one plan of the step (built with the window), the fused store + decode."""
    ctxs, W, bs = [20, 45, 9], 8, 4
    qs, ks, vs, kc, vc, bt, lens = paged_batch(3, ctxs, [1] * 3, W, bs)
    kv = torch.stack((kc, vc))  # one tensor, K and V its halves: the fused path
    slots = torch.tensor([int(bt[i, (c - 1) // bs]) * bs + (c - 1) % bs for i, c in enumerate(ctxs)])
    plan = torch_paged.plan_gather(bt, lens, bs, slot_mapping=slots, sliding_window=W)
    new_k = torch.stack([k[-1] for k in ks])
    new_v = torch.stack([v[-1] for v in vs])
    out = kernels.store_and_decode(torch.cat(qs), new_k, new_v, kv[0], kv[1], slots, bt, lens, 0.3,
                                   backend="torch", plan=plan, sliding_window=W)
    for i, c in enumerate(ctxs):
        want = dense_window_attention(qs[i], ks[i], vs[i], torch.tensor([c - 1]), W, 0.3)
        torch.testing.assert_close(out[i : i + 1], want, atol=1e-5, rtol=1e-5)


def test_a_window_larger_than_the_context_is_full_attention():
    qs, ks, vs, kc, vc, bt, lens = paged_batch(4, [13, 30], [1, 1], 1000, 8)
    q = torch.cat(qs)
    windowed = kernels.paged_attention_decode(q, kc, vc, bt, lens, 0.3, backend="torch", sliding_window=1000)
    full = kernels.paged_attention_decode(q, kc, vc, bt, lens, 0.3, backend="torch")
    torch.testing.assert_close(windowed, full)


def test_full_attention_reads_a_null_entry_and_says_so():
    """Without the window the NULL_BLOCK entries are in use: the checks name them."""
    qs, ks, vs, kc, vc, bt, lens = paged_batch(5, [40], [1], 8, 4)
    with pytest.raises(ValueError, match="block_tables entries in use"):
        kernels.paged_attention_decode(torch.cat(qs), kc, vc, bt, lens, 0.3, backend="torch")


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_bad_sliding_window_is_named(bad):
    qs, ks, vs, kc, vc, bt, lens = paged_batch(6, [10], [1], 4, 4)
    with pytest.raises(ValueError, match="sliding_window must be None or an integer >= 1"):
        kernels.paged_attention_decode(torch.cat(qs), kc, vc, bt, lens, 0.3, backend="torch",
                                       sliding_window=bad)


def test_a_plan_of_another_window_is_refused():
    qs, ks, vs, kc, vc, bt, lens = paged_batch(7, [10, 20], [1, 1], 4, 4)
    plan = torch_paged.plan_gather(bt, lens, 4, sliding_window=8)
    with pytest.raises(ValueError, match="plan was built for sliding_window=8"):
        kernels.paged_attention_decode(torch.cat(qs), kc, vc, bt, lens, 0.3, backend="torch", plan=plan,
                                       sliding_window=4)


@pytest.mark.parametrize("name", ["cpu", "triton"])
def test_kernels_without_a_window_refuse_it_by_name_and_auto_runs_torch(name):
    kc = torch.zeros(4, 16, 2, 64)
    with pytest.raises(ValueError, match=f"backend='{name}' does not support a sliding window"):
        dispatch.choose_backend(name, kc, kc, sliding_window=32)
    chosen = dispatch.choose_backend("auto", kc, kc, sliding_window=32)
    assert chosen.name == "torch"
    assert "sliding window" in chosen.skipped["cpu"]
