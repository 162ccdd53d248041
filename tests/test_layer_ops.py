"""kernels.cpu.layer_ops (RMSNorm, RoPE, SiLU(gate) * up in C) against the torch code they replace in
engine.llama: fp32 to rounding (RoPE to the bit), bf16 to the bit (rounded where torch rounds)."""

import pytest
import torch
import torch.nn.functional as F

from paged_lab.engine.llama import TORCH_OPS
from paged_lab.kernels.cpu import fast_path
from paged_lab.kernels.cpu import layer_ops as cpu_layer_ops

CPU_OPS = fast_path.with_c_layer_ops(TORCH_OPS)  # what the model runs on a CPU (kernels.cpu.fast_path)

pytestmark = pytest.mark.skipif(not cpu_layer_ops.usable(torch.zeros(1)),
                                reason="the C layer ops do not run here (no AVX-512 or no C compiler)")
DTYPES = [torch.float32, torch.bfloat16]


def _rand(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _torch_rms_norm(x, w, eps):
    if x.dtype == torch.float32:
        return F.rms_norm(x, w.shape, w, eps)
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
# a tail of 8; many rows: threads
@pytest.mark.parametrize("rows,n", [(1, 576), (4, 576), (3, 40), (300, 576)])
def test_rms_norm_is_the_torch_formula(dtype, rows, n):
    x, w = _rand(rows, n, dtype=dtype), _rand(n, dtype=dtype, seed=1)
    got, want = cpu_layer_ops.rms_norm(x, w, 1e-5), _torch_rms_norm(x, w, 1e-5)
    if dtype == torch.bfloat16:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, atol=2e-6, rtol=2e-6)  # the mean's summation order
    assert torch.equal(CPU_OPS.rms_norm(x, w, 1e-5), got)  # what the model runs on a CPU


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 4, 300])
def test_rope_in_place_on_the_q_k_slices_is_the_torch_formula_to_the_bit(dtype, rows):
    qkv = _rand(rows, 9 * 64 + 2 * 3 * 64, dtype=dtype)
    q, k, v = qkv.split([9 * 64, 3 * 64, 3 * 64], dim=-1)  # strided views, as the fused projection gives
    q, k = q.view(rows, 9, 64), k.view(rows, 3, 64)
    cos, sin = _rand(rows, 1, 64, dtype=dtype, seed=1), _rand(rows, 1, 64, dtype=dtype, seed=2)
    want_q, want_k = q * cos + q.roll(32, -1) * sin, k * cos + k.roll(32, -1) * sin
    v_before = v.clone()
    assert cpu_layer_ops.rope_usable(q, k, cos)
    got_q, got_k = CPU_OPS.rope(q, k, cos, sin)
    assert got_q.data_ptr() == q.data_ptr() and torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    assert torch.equal(v, v_before)  # v, beside them in the same rows, untouched
    assert not cpu_layer_ops.rope_usable(q[..., :48], k[..., :48], cos[..., :48])  # half of 48 is not 16k


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 4, 300])
def test_silu_mul_of_the_fused_gate_up_output(dtype, rows):
    gu = _rand(rows, 2 * 1536, dtype=dtype) * 4  # well into both tails of SiLU
    got, want = cpu_layer_ops.silu_mul(gu[:, :1536], gu[:, 1536:]), F.silu(gu[:, :1536]) * gu[:, 1536:]
    # gate and up as tensors of their own (the two F.linear outputs of a long fp32 prefill): the same values
    assert torch.equal(cpu_layer_ops.silu_mul(gu[:, :1536].contiguous(), gu[:, 1536:].contiguous()), got)
    if dtype == torch.bfloat16:
        assert (got != want).float().mean() < 0.01  # e^x's last bit may move a rounding, rarely
        torch.testing.assert_close(got.float(), want.float(), atol=0, rtol=2 ** -7)
    else:
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_silu_mul_refuses_gate_and_up_it_cannot_read():
    gu = _rand(4, 2 * 64, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"gate \(4, 64\).*up \(4, 32\)"):
        cpu_layer_ops.silu_mul(gu[:, :64], gu[:, 64:96])
    with pytest.raises(ValueError, match="each row contiguous"):
        cpu_layer_ops.silu_mul(gu[:, :64], gu[:, ::2])  # every other column: not one run per row


def test_inside_a_compile_trace_the_torch_ops_run(monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not cpu_layer_ops.usable(torch.zeros(2, 2))
