"""Dispatch: backend choice, argument checks before any launch, and the interpreter guard."""

import os
import subprocess
import sys

import pytest
import torch

from paged_lab.kernels import (
    BACKENDS,
    paged_attention,
    paged_attention_decode,
    paged_attention_prefill,
    resolve_backend,
    store_and_decode,
    store_kv,
)
from paged_lab.kernels.synthetic import random_paged_kv


@pytest.fixture
def kv():
    return random_paged_kv([5, 20], block_size=8, num_kv_heads=3, head_dim=64, seed=0)


def _decode_args(kv, **over):
    args = dict(
        q=torch.randn(2, 9, 64),
        k_cache=kv.k_cache,
        v_cache=kv.v_cache,
        block_tables=kv.block_tables,
        context_lens=kv.context_lens,
        scale=0.125,
    )
    args.update(over)
    return args


def test_auto_is_torch_on_cpu_and_unknown_backend_is_named(kv):
    """On a CPU "auto" is the C kernels where they can run (a backend named "cpu"), else torch."""
    from paged_lab.kernels.cpu import attention as cpu_attention

    assert set(BACKENDS) == {"auto", "triton", "cpu", "torch", "reference"}
    if not torch.cuda.is_available():
        assert resolve_backend("auto", kv.k_cache) == ("cpu" if cpu_attention.available() else "torch")
    with pytest.raises(ValueError, match="backend must be one of"):
        paged_attention_decode(**_decode_args(kv), backend="cuda")


def test_paged_attention_dispatches_decode_and_prefill(kv):
    q = torch.randn(2, 9, 64)
    args = (kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    torch.testing.assert_close(paged_attention(q, *args),
                               paged_attention_decode(q, *args, backend="reference"))
    qsl = torch.tensor([0, 1, 2], dtype=torch.int32)
    torch.testing.assert_close(
        paged_attention(q, *args, query_start_loc=qsl),
        paged_attention_prefill(q, *args[:4], qsl, 0.125, backend="reference"),
    )


@pytest.mark.parametrize(
    ("over", "exc", "match"),
    [
        (dict(q=torch.randn(2, 9)), ValueError, r"q must have 3 dims"),
        (dict(q=torch.randn(2, 8, 64)), ValueError,
         r"num_heads 8 must be a multiple of the cache num_kv_heads 3"),
        (dict(q=torch.randn(2, 9, 32)), ValueError, r"head_dim 32 must equal the cache head_dim 64"),
        (dict(q=torch.randn(2, 9, 64).half()), TypeError,
         r"q dtype torch.float16 must equal the cache dtype"),
        (dict(q=torch.randn(2, 9, 64).double()), TypeError, r"k_cache dtype must be one of|q dtype"),
        (dict(block_tables=torch.zeros(2, 3)), TypeError,
         r"block_tables dtype must be one of \(int32, int64\)"),
        (dict(block_tables=torch.zeros(3, 3, dtype=torch.int32)), ValueError,
         r"both must equal num_seqs = 2"),
        (dict(context_lens=torch.tensor([0, 3], dtype=torch.int32)), ValueError,
         r"context_lens must be >= 1"),
        (dict(context_lens=torch.tensor([5, 25], dtype=torch.int32)), ValueError,
         r"exceeds what block_tables"),
        (dict(scale=0.0), ValueError, r"scale must be a positive float"),
    ],
)
def test_decode_rejects_bad_arguments_naming_them(kv, over, exc, match):
    with pytest.raises(exc, match=match):
        paged_attention_decode(**_decode_args(kv, **over), backend="torch")


def test_decode_rejects_out_of_range_block_ids_and_mismatched_caches(kv):
    bad = kv.block_tables.clone()
    bad[1, 2] = kv.k_cache.shape[0]  # one past the pool, inside the used part of the row
    with pytest.raises(ValueError, match=r"block_tables entries in use must be in \[0, num_blocks=\d+\)"):
        paged_attention_decode(**_decode_args(kv, block_tables=bad))
    with pytest.raises(ValueError, match="v_cache shape"):
        paged_attention_decode(**_decode_args(kv, v_cache=kv.v_cache[:, :4]))
    # Entries past the context are padding and may hold anything: no error.
    pad = kv.block_tables.clone()
    pad[0, 1:] = -1
    assert torch.isfinite(paged_attention_decode(**_decode_args(kv, block_tables=pad))).all()


def test_prefill_rejects_bad_query_start_loc(kv):
    q = torch.randn(6, 9, 64)
    args = (kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens)
    with pytest.raises(ValueError, match="must start at 0 and end at num_tokens = 6"):
        paged_attention_prefill(q, *args, torch.tensor([0, 2, 5], dtype=torch.int32), 0.125)
    with pytest.raises(ValueError, match=r"sequence 0: query length 6 exceeds context_lens\[0\] = 5"):
        paged_attention_prefill(q, *args, torch.tensor([0, 6, 6], dtype=torch.int32), 0.125)
    with pytest.raises(ValueError, match="non-decreasing"):
        paged_attention_prefill(q, *args, torch.tensor([0, 7, 6], dtype=torch.int32), 0.125)


def test_store_kv_rejects_bad_shapes_and_slots(kv):
    k = torch.randn(2, 3, 64)
    with pytest.raises(ValueError, match=r"k must be \[num_tokens, num_kv_heads=3, head_dim=64\]"):
        store_kv(torch.randn(2, 2, 64), k, kv.k_cache, kv.v_cache, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="slot_mapping has 3 entries but k has 2 tokens"):
        store_kv(k, k, kv.k_cache, kv.v_cache, torch.tensor([0, 1, 2]))
    num_slots = kv.k_cache.shape[0] * 8
    before = kv.k_cache.clone()
    with pytest.raises(ValueError, match=f"must be < num_blocks x block_size = {num_slots}"):
        store_kv(k, k, kv.k_cache, kv.v_cache, torch.tensor([0, num_slots]))
    assert torch.equal(before.nan_to_num(), kv.k_cache.nan_to_num())  # nothing written on error


def test_triton_backend_names_the_unsupported_block_size_and_head_dim():
    small = random_paged_kv([5], block_size=4, num_kv_heads=1, head_dim=64)
    q = torch.randn(1, 2, 64)
    with pytest.raises(ValueError,
                       match=r"does not support block_size 4 \(the Triton kernels support \(8, 16"):
        paged_attention_decode(q, small.k_cache, small.v_cache, small.block_tables, small.context_lens, 0.1,
                               "triton")
    odd = random_paged_kv([5], block_size=8, num_kv_heads=1, head_dim=32)
    with pytest.raises(ValueError, match=r"head_dim 32 \(the Triton kernels support \(64, 128\)\)"):
        paged_attention_decode(torch.randn(1, 2, 32), odd.k_cache, odd.v_cache, odd.block_tables,
                               odd.context_lens,
                               0.1, "triton")  # fmt: skip
    # the reference handles both
    out = paged_attention_decode(q, small.k_cache, small.v_cache, small.block_tables, small.context_lens, 0.1)
    assert out.shape == (1, 2, 64)


_GUARD = """
import triton  # imported BEFORE paged_lab.kernels, with the interpreter explicitly off
import torch
from paged_lab.kernels import paged_attention_decode
from paged_lab.kernels.synthetic import random_paged_kv
kv = random_paged_kv([5], 8, 1, 64)
try:
    paged_attention_decode(torch.randn(1, 1, 64), kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens,
                           0.1, backend="triton")
except RuntimeError as e:
    print("ERR", e)
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the guard is for CPU-only machines")
def test_triton_on_cpu_without_interpreter_raises_a_clear_error():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    res = subprocess.run([sys.executable, "-c", _GUARD], capture_output=True, text=True, env=env, timeout=120)
    assert "ERR backend='triton' on CPU tensors needs Triton's interpreter" in res.stdout, res.stderr[-2000:]
    assert "TRITON_INTERPRET=1" in res.stdout


def test_importing_paged_lab_does_not_import_triton():
    code = "import sys, paged_lab, paged_lab.kernels; print('triton' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "False", res.stderr[-2000:]


def _breaks(monkeypatch, name, op, message="no kernel image for this GPU"):
    """Make backend ``name``'s ``op`` raise, as a launch on an untested GPU would."""
    import dataclasses

    from paged_lab.kernels import dispatch

    def broken(*args, **kwargs):
        raise RuntimeError(message)

    table = dict(dispatch.BACKEND_TABLE)
    table[name] = dataclasses.replace(table[name], **{op: broken})
    monkeypatch.setattr(dispatch, "BACKEND_TABLE", table)


def test_under_auto_a_failing_backend_falls_back_per_call_and_is_counted(kv, monkeypatch, caplog):
    """Under "auto" a backend that raises is logged and counted, and that call runs on the next one;
    the next call tries it again (it is not switched off for the session). A named backend raises."""
    from paged_lab.kernels import KernelStats, dispatch

    first = resolve_backend("auto", kv.k_cache, kv.v_cache, torch.randn(2, 9, 64))
    if first == "torch":  # nothing to fall back from on this machine: make "auto" list the reference first
        monkeypatch.setattr(dispatch, "_candidates",
                            lambda b, kc, vc, q=None, sliding_window=None:
                            ["reference", "torch"] if b == "auto" else [b])
        first = "reference"
    args = _decode_args(kv)
    want = paged_attention_decode(**args, backend="torch")
    _breaks(monkeypatch, first, "decode")
    stats = KernelStats()
    with caplog.at_level("WARNING", logger="paged_lab.kernels"):
        for _ in range(3):
            torch.testing.assert_close(paged_attention_decode(**args, stats=stats), want)
    assert stats.failures[first] == 3 and stats.calls["torch"] == 3  # tried every call, not switched off
    assert "no kernel image" in stats.last_error[first]
    # logged once, counted always
    assert sum("no kernel image" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(RuntimeError, match="no kernel image"):
        paged_attention_decode(**args, backend=first)


def test_a_named_backend_that_cannot_take_the_tensors_says_why(kv):
    with pytest.raises(ValueError, match="backend='cpu' does not support"):
        paged_attention_decode(**_decode_args(kv, k_cache=kv.k_cache.half(), v_cache=kv.v_cache.half(),
                                              # fp16: not taken
                                              q=torch.randn(2, 9, 64).half()), backend="cpu")


def test_triton_backend_rejects_a_cache_whose_head_dim_is_not_contiguous(kv):
    # [num_blocks, block_size, kv_heads, d] built from a [.., d, kv_heads] tensor: right shape, wrong layout
    k_t = kv.k_cache.transpose(2, 3).contiguous().transpose(2, 3)
    v_t = kv.v_cache.transpose(2, 3).contiguous().transpose(2, 3)
    with pytest.raises(ValueError, match=r"cache strides .* need head_dim contiguous"):
        paged_attention_decode(**_decode_args(kv, k_cache=k_t, v_cache=v_t), backend="triton")
    torch.manual_seed(0)
    out = paged_attention_decode(**_decode_args(kv, k_cache=k_t, v_cache=v_t, q=torch.randn(2, 9, 64)),
                                 backend="torch")
    torch.manual_seed(0)
    ref = paged_attention_decode(**_decode_args(kv, q=torch.randn(2, 9, 64)), backend="torch")
    torch.testing.assert_close(out, ref)  # the torch path reads any layout


def _backends_here():
    """Every backend that can run on this machine (Triton through its interpreter on a CPU)."""
    import importlib.util

    from paged_lab.kernels.cpu import attention as cpu_attention

    names = ["auto", "torch", "reference"]
    if cpu_attention.available():
        names.append("cpu")
    if importlib.util.find_spec("triton") is not None:
        names.append("triton")
    return names


@pytest.mark.parametrize("backend", _backends_here())
def test_a_dense_but_not_contiguous_q_gets_the_same_attention_on_every_backend(backend):
    """q as a transposed view (dense, every element once, but not row-major): each backend must read q
    by its strides or copy it, and hand back rows in the order of q's first dimension. The C kernels once
    wrote packed rows into ``empty_like(q)``, which had q's strides (max error 1.3-2.0).
    Block size 8 and head_dim 64 so that the Triton interpreter takes it too; the tolerance only has to
    tell a layout bug (errors near 1) from rounding."""
    kv = random_paged_kv([5, 20], block_size=8, num_kv_heads=2, head_dim=64, seed=11)
    args = (kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens)
    g = torch.Generator().manual_seed(12)
    q = torch.randn(4, 2, 64, generator=g).transpose(0, 1)  # [num_seqs=2, heads=4, d], strides (64, 128, 1)
    assert not q.is_contiguous()
    got = paged_attention_decode(q, *args, 0.125, backend=backend)
    torch.testing.assert_close(got, paged_attention_decode(q.contiguous(), *args, 0.125, backend="reference"),
                               atol=1e-5, rtol=1e-5)
    # store_and_decode (the C kernels' fused path): store the last token's K/V again, then attend
    last = kv.context_lens.long() - 1
    slots = kv.block_tables.long().gather(1, (last // 8)[:, None]).squeeze(1) * 8 + last % 8
    k, v = kv.k_cache.view(-1, 2, 64)[slots].clone(), kv.v_cache.view(-1, 2, 64)[slots].clone()
    got = store_and_decode(q, k, v, kv.k_cache.clone(), kv.v_cache.clone(), slots, kv.block_tables,
                           kv.context_lens,
                           0.125, backend=backend)
    torch.testing.assert_close(got, paged_attention_decode(q.contiguous(), *args, 0.125, backend="reference"),
                               atol=1e-5, rtol=1e-5)
    qp = torch.randn(4, 7, 64, generator=g).transpose(0, 1)  # [num_tokens=3+4, heads, d]
    qsl = torch.tensor([0, 3, 7], dtype=torch.int32)  # the last 3 tokens of seq 0, the last 4 of seq 1
    assert not qp.is_contiguous()
    got = paged_attention_prefill(qp, *args, qsl, 0.125, backend=backend)
    torch.testing.assert_close(got, paged_attention_prefill(qp.contiguous(), *args, qsl, 0.125,
                                                            backend="reference"),
                               atol=1e-5, rtol=1e-5)
