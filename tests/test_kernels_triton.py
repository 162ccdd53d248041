"""The Triton kernels against the torch reference, under Triton's interpreter on CPU.

The interpreter costs milliseconds per tile iteration, so shapes stay small: a few sequences,
contexts up to a few blocks. Every cache has NaN in its unused slots and -1 in the unused tail of
each block-table row, so a kernel that reads past ``context_len`` (on loads or scores) fails.
"""

import importlib.util

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_lab.kernels import TRITON_BLOCK_SIZES, paged_attention_decode, paged_attention_prefill, store_kv
from paged_lab.kernels.synthetic import random_paged_kv

# find_spec, not importorskip: importing triton here, before paged_lab.kernels set TRITON_INTERPRET,
# would decorate triton's own helpers as compiled functions and break the interpreter.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}  # abs and rel, vs the fp32-math reference
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _qsl(q_lens):
    return torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)


def _check(out, ref, dtype):
    assert out.dtype == ref.dtype == dtype and out.shape == ref.shape
    assert torch.isfinite(out.float()).all(), "NaN/inf in the output: an unused slot leaked in"
    torch.testing.assert_close(out.float(), ref.float(), atol=TOL[dtype], rtol=TOL[dtype])


def _decode(lens, block_size, num_kv_heads, group, head_dim, dtype, num_splits, seed=0):
    kv = random_paged_kv(lens, block_size, num_kv_heads, head_dim, dtype=dtype, table_pad=-1, seed=seed)
    q = torch.randn(len(lens), num_kv_heads * group, head_dim, generator=torch.Generator().manual_seed(seed + 1))
    args = (q.to(dtype), kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, head_dim**-0.5)
    out = paged_attention_decode(*args, backend="triton", num_splits=num_splits)
    _check(out, paged_attention_decode(*args, backend="reference"), dtype)


def _prefill(lens, q_lens, block_size, num_kv_heads, group, head_dim, dtype, seed=0):
    kv = random_paged_kv(lens, block_size, num_kv_heads, head_dim, dtype=dtype, table_pad=-1, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(sum(q_lens), num_kv_heads * group, head_dim, generator=gen).to(dtype)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, _qsl(q_lens), head_dim**-0.5)
    _check(paged_attention_prefill(*args, backend="triton"), paged_attention_prefill(*args, backend="reference"), dtype)


# ------------------------------------------------------------------------------------------ store
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_kv_heads", [1, 3])
def test_store_kv_triton_writes_the_same_cache_as_the_reference(dtype, num_kv_heads):
    shape = (6, 16, num_kv_heads, 64)
    k, v = torch.randn(9, num_kv_heads, 64).to(dtype), torch.randn(9, num_kv_heads, 64).to(dtype)
    slots = torch.randperm(6 * 16)[:9].to(torch.int32)
    slots[4] = -1  # padding token: skipped
    caches = []
    for backend in ("reference", "triton"):
        k_cache, v_cache = torch.full(shape, 7.0, dtype=dtype), torch.full(shape, 7.0, dtype=dtype)
        store_kv(k, v, k_cache, v_cache, slots, backend=backend)
        caches.append((k_cache, v_cache))
    assert torch.equal(caches[0][0], caches[1][0]) and torch.equal(caches[0][1], caches[1][1])
    assert (caches[1][0] != 7.0).any()


# ------------------------------------------------------------------------- every block size, cheap
@pytest.mark.parametrize("block_size", TRITON_BLOCK_SIZES)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_every_block_size_one_token_exact_and_partial_blocks(block_size, num_splits):
    lens = [1, block_size, block_size + 3, 2 * block_size]  # single token, exact multiples, partial last block
    _decode(lens, block_size, 1, 3, 64, torch.float32, num_splits, seed=block_size)


@pytest.mark.parametrize("block_size", TRITON_BLOCK_SIZES)
def test_prefill_every_block_size_chunks_start_mid_block(block_size):
    h = block_size // 2
    lens = [block_size + h, 3, block_size]  # seq 0: a chunk starting mid-block after a cached prefix
    q_lens = [block_size // 2 + 5, 3, 1]
    _prefill(lens, q_lens, block_size, 1, 3, 64, torch.float32, seed=block_size)


def test_split_and_unsplit_decode_agree_on_a_long_context():
    kv = random_paged_kv([700, 90], 32, 1, 64, table_pad=-1, seed=4)
    q = torch.randn(2, 4, 64)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    one = paged_attention_decode(*args, backend="triton", num_splits=1)
    many = paged_attention_decode(*args, backend="triton", num_splits=5)  # seq 1 leaves later splits empty
    torch.testing.assert_close(one, many, atol=1e-5, rtol=1e-5)
    _check(many, paged_attention_decode(*args, backend="reference"), torch.float32)


# ----------------------------------------------------------------------- hypothesis: mixed shapes
def _context_len(block_size):
    """1, an exact multiple of the block size, or a partial last block (small enough for the interpreter)."""
    return st.one_of(
        st.just(1),
        st.integers(1, 3).map(lambda n: n * block_size),
        st.integers(2, 2 * block_size + 40).filter(lambda n: n % block_size),
    ).map(lambda n: min(n, 300))


@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    block_size=st.sampled_from(TRITON_BLOCK_SIZES),
    group=st.sampled_from([1, 3, 4, 8]),
    num_kv_heads=st.integers(1, 2),
    head_dim=st.sampled_from([64, 128]),
    dtype=st.sampled_from(DTYPES),
    num_splits=st.sampled_from([1, 2, 4, None]),
    seed=st.integers(0, 2**16),
)
def test_decode_matches_reference(data, block_size, group, num_kv_heads, head_dim, dtype, num_splits, seed):
    lens = data.draw(st.lists(_context_len(block_size), min_size=1, max_size=3), label="context_lens")
    _decode(lens, block_size, num_kv_heads, group, head_dim, dtype, num_splits, seed)


@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    block_size=st.sampled_from(TRITON_BLOCK_SIZES),
    group=st.sampled_from([1, 3, 4, 8]),
    head_dim=st.sampled_from([64, 128]),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_prefill_matches_reference(data, block_size, group, head_dim, dtype, seed):
    lens = data.draw(st.lists(_context_len(block_size), min_size=1, max_size=3), label="context_lens")
    q_lens = [data.draw(st.integers(1, min(n, 40)), label="query_len") for n in lens]
    _prefill(lens, q_lens, block_size, 1, group, head_dim, dtype, seed)


def test_int64_tables_and_strided_q_views_are_read_correctly():
    """The engine may pass int64 index tensors and q as a view into a fused projection."""
    kv = random_paged_kv([20, 9], 16, 2, 64, table_pad=-1, seed=7)
    fused = torch.randn(2, 3 * 8, 64)  # e.g. [num_seqs, q + k + v heads, d]; q is heads 0..7
    q = fused[:, :8]
    assert not q.is_contiguous()
    bt, lens = kv.block_tables.long(), kv.context_lens.long()
    out = paged_attention_decode(q, kv.k_cache, kv.v_cache, bt, lens, 0.125, backend="triton", num_splits=2)
    _check(out, paged_attention_decode(q.contiguous(), kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens,
                                       0.125, backend="reference"), torch.float32)  # fmt: skip
    qp = torch.randn(12, 24, 64)[:, 8:16]  # 7 + 5 query tokens, strided
    qsl = torch.tensor([0, 7, 12])
    pre = paged_attention_prefill(qp, kv.k_cache, kv.v_cache, bt, lens, qsl, 0.125, backend="triton")
    _check(pre, paged_attention_prefill(qp, kv.k_cache, kv.v_cache, bt, lens, qsl, 0.125, backend="reference"),
           torch.float32)  # fmt: skip


# ------------------------------------------------------------- the GPU code path compiles, without a GPU
_AOT = """
import os, sys
os.environ["TRITON_INTERPRET"] = "0"  # decorate as compiled kernels (this process never launches one)
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile
from paged_lab.kernels import triton_paged as T

def build(fn, types, consts, arch):
    sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}
    compile(ASTSource(fn, sig, constexprs=consts), target=GPUTarget("cuda", arch, 32))

for arch in (80, 90):
    for dt in ("bf16", "fp32"):
        p = {n: "*" + dt for n in ("q_ptr", "k_cache_ptr", "v_cache_ptr", "k_ptr", "v_ptr")}
        p.update(block_tables_ptr="*i32", context_lens_ptr="*i32", query_start_loc_ptr="*i32",
                 slot_mapping_ptr="*i32", lse_ptr="*fp32", part_ptr="*fp32", qk_scale="fp32")
        f32 = dt == "fp32"
        for split in (False, True):
            build(T._decode_kernel, {**p, "out_ptr": "*fp32" if split else "*" + dt},
                  dict(GROUP=3, GROUP_PAD=16, HEAD_DIM=128, BLOCK_SIZE=8, TILE=16, SPLIT=split, F32=f32), arch)
        build(T._prefill_kernel, {**p, "out_ptr": "*" + dt},
              dict(GROUP=3, GROUP_PAD=4, BLOCK_Q=16, HEAD_DIM=64, BLOCK_SIZE=256, TILE=64, F32=f32), arch)
        build(T._merge_splits_kernel, {**p, "out_ptr": "*" + dt}, dict(SPLITS_PAD=8, HEAD_DIM=128), arch)
        build(T._store_kv_kernel, p, dict(NUM_KV_HEADS=3, HEADS_PAD=4, HEAD_DIM=64, BLOCK_SIZE=16), arch)
print("COMPILED")
"""


@pytest.mark.slow
def test_kernels_compile_for_sm80_and_sm90_without_a_gpu():
    """The interpreter does not check what only the compiler checks (types across branches, dot shapes,
    bf16 on the native path): compile every kernel ahead of time for A100/H100 targets, in a fresh process."""
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("triton.backends.nvidia") is None:
        pytest.skip("this triton build has no NVIDIA backend")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    res = subprocess.run([sys.executable, "-c", _AOT], capture_output=True, text=True, env=env, timeout=300)
    assert "COMPILED" in res.stdout, res.stderr[-3000:]
