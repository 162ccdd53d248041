"""kernels.cpu.linear: the packed matmuls (the C panel matmul, oneDNN) compute F.linear (fp32, up to summation
order; bf16 up to its rounding)."""

import pytest
import torch
import torch.nn.functional as F

from paged_lab.engine.llama import Linear
from paged_lab.kernels.cpu import gemm
from paged_lab.kernels.cpu.linear import PackedLinear, can_prepack

needs_onednn = pytest.mark.skipif(not can_prepack(torch.zeros(1, 1)), reason="torch built without mkldnn")
needs_c_matmul = pytest.mark.skipif(gemm.why_unusable(torch.zeros(16, 1)) is not None,
                                    reason=f"{gemm.why_unusable(torch.zeros(16, 1))}")


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
    assert not hasattr(lin, "packed") and lin.weights[0] is ws[0] and lin.out_features == 24
    assert torch.equal(lin(x), torch.cat([q, k], dim=-1))


@needs_onednn
@pytest.mark.parametrize("sizes,bias", [([40], False), ([40], True), ([24, 8, 8], False), ([24, 8, 8], True),
                                        ([32, 32], False)])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8, 37])  # 1-3 rows are padded to PACKED_MIN_ROWS
def test_prepacked_parts_match_f_linear(sizes, bias, rows):
    ws, bs = _weights(1, sizes, bias=bias)
    if bias and len(sizes) > 1:
        bs[1] = None  # a stacked projection where only some parts have a bias
    lin = PackedLinear(ws, bs, batch_hint=8)
    assert lin.is_prepacked
    # 40 outputs are not whole panels of 16: oneDNN; the others go to the C matmul where it runs
    assert (lin.panels is None) == (gemm.why_unusable(torch.cat(ws)) is not None)
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
    lin = PackedLinear(ws, batch_hint=8)
    x = torch.randn(9, 48)
    full = lin(x)
    for r in (0, 4, 8):
        assert torch.equal(lin(x[r:r + 1]), full[r:r + 1])


def test_prepack_refuses_what_onednn_cannot_take():
    with pytest.raises(ValueError, match="prepack=True needs a CPU float32/bfloat16 weight"):
        PackedLinear(torch.zeros(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="biases: 1 entries for 2 weights"):
        PackedLinear([torch.zeros(4, 4), torch.zeros(4, 4)], [None])


@needs_c_matmul
@pytest.mark.parametrize("rows", [1, 5, 8, 9, 16, 37, gemm.MAX_ROWS[torch.float32],
                                  gemm.MAX_ROWS[torch.float32] + 1])
def test_the_c_matmul_computes_f_linear_up_to_its_rows_and_f_linear_runs_past_them(rows):
    ws, bs = _weights(3, [48, 16, 32], in_features=40, bias=True)  # 6 panels; K not a multiple of 16
    lin = PackedLinear(ws, bs)
    assert lin.panels is not None and lin.packed is None  # fp32: no oneDNN copy beside the panels
    x = torch.randn(rows, 40, generator=torch.Generator().manual_seed(rows))
    for p, w, b in zip(lin.parts(x), ws, bs):
        torch.testing.assert_close(p, F.linear(x, w, b), atol=1e-5, rtol=1e-5)
    if rows > gemm.MAX_ROWS[torch.float32]:  # a prefill: F.linear on the model's own tensors, exactly
        assert torch.equal(lin.parts(x)[0], F.linear(x, ws[0], bs[0]))


@needs_c_matmul
def test_the_c_matmul_packs_panels_of_16_outputs_and_refuses_what_it_cannot_take():
    w = torch.arange(32 * 3, dtype=torch.float32).reshape(32, 3)
    panels = gemm.pack(w)
    assert panels.shape == (2, 3, 16) and torch.equal(panels[1, 2], w[16:32, 2])  # panel 1, input 2
    assert "multiple of 16" in gemm.why_unusable(torch.zeros(40, 8))
    assert "float32 or bfloat16" in gemm.why_unusable(torch.zeros(16, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="x has 4 features but the packed weight takes 3"):
        gemm.matmul(torch.zeros(2, 4), panels)
    assert gemm.matmul(torch.zeros(0, 3), panels).shape == (0, 32)


@needs_c_matmul
def test_several_weights_pack_into_their_own_panels_as_if_stacked():
    """q/k/v packed one after the other, each straight into its panels, equal the panels of the stacked
    weight (no stacked copy is made); a part whose outputs are not a multiple of 16 is refused."""
    ws = [torch.randn(n, 24, generator=torch.Generator().manual_seed(n)) for n in (48, 16, 32)]
    assert torch.equal(gemm.pack(ws), gemm.pack(torch.cat(ws)))
    lin = PackedLinear([torch.zeros(8, 24), torch.zeros(8, 24)])  # 16 stacked, 8 each: oneDNN
    assert lin.panels is None and lin.packed is not None


@needs_c_matmul
def test_bf16_panels_sum_in_fp32_and_round_once():
    """bf16 weights are widened exactly and summed in fp32: the result is the fp32 product rounded to bf16
    once (to within one bf16 step where the fp32 sums differ in order); prefills run oneDNN's copy."""
    ws, _ = _weights(4, [64], in_features=200)
    w16 = ws[0].bfloat16()
    lin = PackedLinear(w16)
    assert lin.panels is not None and lin.packed is not None and lin.panels.dtype == torch.bfloat16
    for rows in (1, 3, gemm.MAX_ROWS[torch.bfloat16], 9):  # the C loop, then oneDNN
        x = torch.randn(rows, 200, generator=torch.Generator().manual_seed(rows)).bfloat16()
        got = lin(x)
        want = F.linear(x.float(), w16.float())
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want, atol=0, rtol=2 ** -7)  # one bf16 rounding
    x = torch.randn(2, 200).bfloat16()
    torch.testing.assert_close(gemm.matmul(x, lin.panels).float(), F.linear(x.float(), w16.float()),
                               atol=0, rtol=2 ** -7)


def test_panels_start_on_a_2mb_boundary_advised_into_huge_pages(monkeypatch):
    """Every whole 2 MB of a packed weight is advised into huge pages (MADV_HUGEPAGE) before it is written,
    from a 2 MB boundary; the values are the panels' all the same. A weight under 2 MB is a plain tensor."""
    advised = []

    class Libc:
        def madvise(self, addr, length, advice):
            advised.append((addr.value, length.value, advice))
            return 0

    monkeypatch.setattr(gemm, "_libc", Libc())
    w = torch.randn(3 * 1024, 576)  # 7 MB in fp32: three whole 2 MB pages and a tail
    panels = gemm.pack(w)
    assert panels.is_contiguous() and panels.shape == (3 * 1024 // 16, 576, 16)
    assert torch.equal(panels, w.reshape(-1, 16, 576).transpose(1, 2))
    assert advised == [(panels.data_ptr(), 3 * gemm.HUGE_PAGE, gemm.MADV_HUGEPAGE)]
    assert panels.data_ptr() % gemm.HUGE_PAGE == 0
    w_small = torch.randn(64, 576)  # 147 KB: no advice
    small = gemm.pack(w_small)
    assert len(advised) == 1 and torch.equal(small, w_small.reshape(-1, 16, 576).transpose(1, 2))
