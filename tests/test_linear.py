"""engine.linear: the oneDNN-prepacked matmul computes F.linear (fp32, up to summation order)."""

import pytest
import torch
import torch.nn.functional as F

from paged_lab.engine.linear import Linear, can_prepack

needs_onednn = pytest.mark.skipif(not can_prepack(torch.zeros(1, 1)), reason="torch built without mkldnn")


def _weights(seed: int, sizes, in_features: int = 48, bias: bool = False):
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(n, in_features, generator=g) for n in sizes]
    bs = [torch.randn(n, generator=g) if bias else None for n in sizes]
    return ws, bs


def test_plain_linear_is_exactly_f_linear_and_never_copies():
    ws, bs = _weights(0, [16, 8], bias=True)
    lin = Linear(ws, bs)
    x = torch.randn(5, 48)  # [M, in_features]
    q, k = lin.parts(x)
    assert torch.equal(q, F.linear(x, ws[0], bs[0])) and torch.equal(k, F.linear(x, ws[1], bs[1]))
    assert lin.packed is None and lin.weights[0] is ws[0] and lin.out_features == 24
    assert torch.equal(lin(x), torch.cat([q, k], dim=-1))


@needs_onednn
@pytest.mark.parametrize("sizes,bias", [([40], False), ([40], True), ([24, 8, 8], False), ([24, 8, 8], True),
                                        ([32, 32], False)])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8, 37])  # 1-3 rows are padded to PACKED_MIN_ROWS
def test_prepacked_parts_match_f_linear(sizes, bias, rows):
    ws, bs = _weights(1, sizes, bias=bias)
    if bias and len(sizes) > 1:
        bs[1] = None  # a stacked projection where only some parts have a bias
    lin = Linear(ws, bs, prepack=True, batch_hint=8)
    assert lin.packed is not None
    x = torch.randn(rows, 48, generator=torch.Generator().manual_seed(rows))
    parts = lin.parts(x)
    assert [p.shape for p in parts] == [(rows, n) for n in sizes]
    for p, w, b in zip(parts, ws, bs):
        torch.testing.assert_close(p, F.linear(x, w, b), atol=1e-5, rtol=1e-5)
    # the stacked copy is made once; the model's tensors are left as they were
    assert all(w.layout == torch.strided for w in lin.weights)


@needs_onednn
def test_prepacked_rows_do_not_depend_on_the_batch():
    """Each row's result is the same whatever else is in the batch (so batch composition cannot change
    greedy tokens through the matmuls)."""
    ws, _ = _weights(2, [96])
    lin = Linear(ws, prepack=True, batch_hint=8)
    x = torch.randn(9, 48)
    full = lin(x)
    for r in (0, 4, 8):
        assert torch.equal(lin(x[r:r + 1]), full[r:r + 1])


def test_prepack_refuses_what_onednn_cannot_take():
    with pytest.raises(ValueError, match="prepack=True needs a CPU float32/bfloat16 weight"):
        Linear(torch.zeros(4, 4, dtype=torch.float64), prepack=True)
    with pytest.raises(ValueError, match="biases: 1 entries for 2 weights"):
        Linear([torch.zeros(4, 4), torch.zeros(4, 4)], [None])
