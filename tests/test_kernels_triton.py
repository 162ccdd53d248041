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

from paged_lab.kernels import paged_attention_decode, paged_attention_prefill, store_kv
from paged_lab.kernels.synthetic import random_paged_kv

# find_spec, not importorskip: importing triton here, before paged_lab.kernels set TRITON_INTERPRET,
# would decorate triton's own helpers as compiled functions and break the interpreter. (conftest.py
# imported paged_lab.kernels first, so triton_paged below loads under the interpreter on a CPU.)
HAS_TRITON = importlib.util.find_spec("triton") is not None
pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
if HAS_TRITON:
    from paged_lab.kernels.triton_paged import TRITON_BLOCK_SIZES
else:
    TRITON_BLOCK_SIZES = ()

# abs and rel, vs the fp32-math reference
TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _qsl(q_lens):
    return torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)


def _check(out, ref, dtype):
    assert out.dtype == ref.dtype == dtype and out.shape == ref.shape
    assert torch.isfinite(out.float()).all(), "NaN/inf in the output: an unused slot leaked in"
    torch.testing.assert_close(out.float(), ref.float(), atol=TOL[dtype], rtol=TOL[dtype])


def _decode(lens, block_size, num_kv_heads, group, head_dim, dtype, num_splits, seed=0):
    kv = random_paged_kv(lens, block_size, num_kv_heads, head_dim, dtype=dtype, table_pad=-1, seed=seed)
    q = torch.randn(len(lens), num_kv_heads * group, head_dim,
                    generator=torch.Generator().manual_seed(seed + 1))
    args = (q.to(dtype), kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, head_dim**-0.5)
    out = paged_attention_decode(*args, backend="triton", num_splits=num_splits)
    _check(out, paged_attention_decode(*args, backend="reference"), dtype)


def _prefill(lens, q_lens, block_size, num_kv_heads, group, head_dim, dtype, seed=0):
    kv = random_paged_kv(lens, block_size, num_kv_heads, head_dim, dtype=dtype, table_pad=-1, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(sum(q_lens), num_kv_heads * group, head_dim, generator=gen).to(dtype)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, _qsl(q_lens), head_dim**-0.5)
    _check(paged_attention_prefill(*args, backend="triton"),
           paged_attention_prefill(*args, backend="reference"), dtype)


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
    # single token, exact multiples, partial last block
    lens = [1, block_size, block_size + 3, 2 * block_size]
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
    _check(out, paged_attention_decode(q.contiguous(), kv.k_cache, kv.v_cache, kv.block_tables,
                                       kv.context_lens,
                                       0.125, backend="reference"), torch.float32)  # fmt: skip
    qp = torch.randn(12, 24, 64)[:, 8:16]  # 7 + 5 query tokens, strided
    qsl = torch.tensor([0, 7, 12])
    pre = paged_attention_prefill(qp, kv.k_cache, kv.v_cache, bt, lens, qsl, 0.125, backend="triton")
    _check(pre, paged_attention_prefill(qp, kv.k_cache, kv.v_cache, bt, lens, qsl, 0.125,
                                        backend="reference"),
           torch.float32)  # fmt: skip


def test_head_dim_strided_q_gets_a_contiguous_out():
    """A q whose head_dim stride is not 1 (a transposed view) must not hand its strides to `out`:
    the kernels write `out` as if head_dim were contiguous (the old empty_like(q) gave NaN here)."""
    kv = random_paged_kv([20, 9], 16, 2, 64, table_pad=-1, seed=8)
    qt = torch.randn(2, 64, 4).transpose(1, 2)  # [num_seqs, heads, head_dim] with head_dim stride 4
    assert qt.stride(2) != 1
    args = (kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens)
    out = paged_attention_decode(qt, *args, 0.125, backend="triton", num_splits=1)
    assert out.is_contiguous()
    _check(out, paged_attention_decode(qt.contiguous(), *args, 0.125, backend="reference"), torch.float32)
    qp = torch.randn(12, 64, 4).transpose(1, 2)  # 7 + 5 query tokens
    qsl = torch.tensor([0, 7, 12], dtype=torch.int32)
    pre = paged_attention_prefill(qp, *args, qsl, 0.125, backend="triton")
    assert pre.is_contiguous()
    _check(pre, paged_attention_prefill(qp.contiguous(), *args, qsl, 0.125, backend="reference"),
           torch.float32)


# --------------------------------------------------------------- launch parameters per GPU target
def test_every_target_gets_tiles_that_the_cross_compile_checks():
    """The wrappers' launch parameters are pure functions of (shapes, dtype, compute capability)."""
    from paged_lab.kernels import triton_paged as T

    # bf16 on a T4 (sm_75, no bf16 tensor cores): the kernels take the fp32-tile path, not native bf16 dots
    assert T.compute_in_f32(torch.bfloat16, 75) and not T.compute_in_f32(torch.bfloat16, 80)
    assert not T.compute_in_f32(torch.float16, 75)
    assert T.compute_in_f32(torch.float32, 90)  # IEEE fp32 dots, not TF32
    # fp32 tiles stop at 32 positions everywhere; half tiles at 64 from sm_80, 32 on sm_75
    assert [T.tile_for(256, True, cc) for cc in (75, 80, 90)] == [32, 32, 32]
    assert [T.tile_for(256, False, cc) for cc in (75, 80, 90)] == [32, 64, 64]
    assert T.tile_for(8, False, 90) == 16  # tl.dot needs 16 rows: two 8-token blocks share a tile
    decode, merge, tiles_per_split = T.decode_launch(3, 32, 8, 128, 16, 40, torch.bfloat16, 75, num_splits=4)
    assert decode.constexprs["F32"] and decode.grid == (3, 8, 4) and merge.grid == (3, 32)
    assert tiles_per_split * 4 >= 40 * 16 // decode.constexprs["TILE"]
    pre = T.prefill_launch(2, 100, 32, 8, 128, 16, torch.float16, 80)
    assert pre.constexprs["BLOCK_Q"] * pre.constexprs["GROUP_PAD"] == 32  # rows x head_dim <= 4096


def test_a_gpu_older_than_sm75_is_refused_with_a_reason(monkeypatch):
    from paged_lab.kernels import triton_paged as T

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    why = T.unsupported_reason(torch.float16, torch.device("cuda", 0))
    assert "sm_70" in why and "sm_75" in why
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    # T4 bf16: the fp32-tile path
    assert T.unsupported_reason(torch.bfloat16, torch.device("cuda", 0)) is None
    assert T.unsupported_reason(torch.bfloat16, torch.device("cpu")) is None


def test_small_fp32_tiles_under_the_interpreter_match_the_reference(monkeypatch):
    """What a T4 runs (fp32, TILE 32 over 128-token blocks; prefill rows 16 at head_dim 128), under the
    interpreter: patch the target the launch functions see."""
    from paged_lab.kernels import triton_paged as T

    monkeypatch.setattr(T, "INTERPRETER_CC", 75)
    assert T.tile_for(128, False, None) == 32
    _decode([130, 40], 128, 1, 4, 128, torch.float32, 2, seed=3)
    _prefill([130, 40], [70, 40], 128, 1, 4, 128, torch.float32, seed=3)


# ------------------------------------------------------------- the GPU code path compiles, without a GPU
@pytest.mark.slow
def test_kernels_compile_for_sm75_to_sm90_within_registers_spills_and_shared_memory():
    """The interpreter does not check what only the compiler checks (types across branches, dot shapes,
    bf16 on the native path), nor what a GPU has room for. Compile every kernel ahead of time for
    T4/A100/RTX-30xx/H100 targets, in a fresh process, with the launch parameters the wrappers use
    (``paged_lab.tools.aot``), and check registers, spills and shared memory against each target.
    About 10 minutes on two busy cores the first time; Triton's cache (~/.triton/cache) makes reruns fast."""
    import json
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("triton.backends.nvidia") is None:
        pytest.skip("this triton build has no NVIDIA backend")
    from paged_lab.tools import aot

    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    res = subprocess.run([sys.executable, "-m", "paged_lab.tools.aot", "--jobs", "2"], capture_output=True,
                         text=True, env=env, timeout=1800)  # fmt: skip
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    errors = [r["error"] for r in rows if "error" in r]
    assert not errors, "\n".join(errors)[:5000]
    assert res.returncode == 0, res.stderr[-3000:]
    done = {(r["kernel"], r["cc"], r["dtype"]) for r in rows}
    for cc in aot.TARGETS:
        for dtype in aot.DTYPES:
            for kernel in ("_decode_kernel", "_prefill_kernel", "_store_kv_kernel"):
                assert (kernel, cc, dtype) in done, f"{kernel} was not compiled for sm_{cc} {dtype}"
        assert any(k == "_merge_splits_kernel" and c == cc for k, c, _ in done)
    problems = []
    for r in rows:
        for p in aot.Resources(**r).problems():
            problems.append(f"{r['kernel']} sm_{r['cc']} {r['dtype']} [{r['constexprs']}]: {p}")
    assert not problems, "\n".join(problems)


def test_the_compile_grid_covers_every_value_per_target():
    from paged_lab.kernels.triton_paged import TRITON_HEAD_DIMS
    from paged_lab.tools import aot

    grid = aot.config_grid()
    for cc in aot.TARGETS:
        mine = [c for c in grid if c.cc == cc]
        assert {c.block_size for c in mine} == set(TRITON_BLOCK_SIZES)
        assert {c.head_dim for c in mine} == set(TRITON_HEAD_DIMS)
        assert {c.group for c in mine if c.kernel != "store_kv"} >= set(aot.GROUPS)
        assert {c.kernel for c in mine} == {"store_kv", "decode", "decode_split", "prefill"}
        for dtype in aot.DTYPES:  # the most demanding shapes, per dtype: head_dim 128 at the largest TILE
            assert any(c.dtype == dtype and c.kernel.startswith("decode") and c.head_dim == 128
                       and c.block_size >= 64 for c in mine)  # fmt: skip
            assert any(c.dtype == dtype and c.kernel == "prefill" and c.head_dim == 128 and c.block_size >= 64
                       for c in mine)  # fmt: skip
    assert len(grid) < 80  # not the full product


def test_the_files_own_check_against_the_reference_passes():
    """``python -m paged_lab.kernels.triton_paged`` runs this: each kernel against the reference."""
    from paged_lab.kernels import triton_paged as T

    err = T.check_against_reference("cuda" if torch.cuda.is_available() else "cpu")
    assert set(err) == {"decode, 1 split(s)", "decode, 3 split(s)", "prefill", "store_kv"}
    assert max(err.values()) < TOL[torch.float32], err
