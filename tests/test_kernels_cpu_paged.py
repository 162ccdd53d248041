"""The C attention kernels (kernels.cpu.attention) against the readable reference, and their fallbacks."""

import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_lab.kernels import (
    paged_attention_decode,
    paged_attention_prefill,
    reference,
    store_kv,
)
from paged_lab.kernels.cpu import attention as cpu_attention
from paged_lab.kernels.cpu import build
from paged_lab.kernels.synthetic import random_paged_kv

needs_kernel = pytest.mark.skipif(not cpu_attention.available(), reason=f"{cpu_attention.why_unavailable()}")


# ------------------------------------------------------------- how close an fp32 kernel must come
# A C kernel and the fp32 reference round differently (other summation orders, FMA, a hand-written
# exp), so comparing them with a bare atol flakes: 2.03e-6 against atol=2e-6 once, where the C kernel
# was the more accurate of the two. Both are measured instead against the same attention in float64,
# which is exact to ~1e-16 at these sizes, and the kernel's error must be within
#
#     2 * err(fp32 reference)  +  2 * u * max|v| * (sqrt(ctx) + sqrt(head_dim)),   u = 2**-24.
#
# - 2 * err(fp32 reference): the kernel does the same fp32 operations as the reference, in another
#   order, so its error should be of the same size; the factor 2 leaves room for the order (measured
#   over 800 random cases: the C kernel's error is a median 0.8x the reference's, up to 2.5x where the
#   reference happened to land unusually close).
# - the second term is the floor for those lucky cases: the rounding every fp32 attention makes.
#   An output is a weighted sum of ctx values (size <= max|v|) and each weight comes from a
#   head_dim-term dot product; n roundings of relative size u, of either sign, add up like a random
#   walk, to about sqrt(n) * u times the size of what is summed (for the dot products this takes
#   scaled scores of order one, as these tests draw them; sharper scores make the reference's own
#   error, the first term, grow the same way). Factor 2: margin.
# Over 4,000 random decode and prefill cases the largest error / bound was 0.11. The bound is about
# 1e-5 at head_dim 128 and context 40: a wrong row, mask or block (errors of 1e-2..1) fails by far,
# and so does an exp cut to 4 Taylor terms (relative error 4e-5). The kernel's own exp was measured
# against the true exp: at most 7.9e-8 relative (under one fp32 ulp) over [-90, 0].
U = 2.0**-24  # fp32 unit roundoff


def _attention_f64(q, k_cache, v_cache, tables, lens, qsl, scale):
    """The reference's attention in float64, one sequence at a time -> (out [rows, H, d] float64,
    max |v| over the values it read, the longest context). Sequence i's query rows are
    ``qsl[i]:qsl[i + 1]``, the last positions of its context (a decode: one row each)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    vmax = 0.0
    for i in range(tables.shape[0]):
        a, b, n = int(qsl[i]), int(qsl[i + 1]), int(lens[i])
        k, v = reference.gather_kv(k_cache, v_cache, tables[i], n)  # [n, kv_heads, d]
        group = q.shape[1] // k.shape[1]
        k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q[a:b].double(), k) * scale
        q_pos = n - (b - a) + torch.arange(b - a)[:, None]  # causal: query j sits at position n - q_len + j
        scores = scores.masked_fill(torch.arange(n)[None, :] > q_pos, float("-inf"))
        out[a:b] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), v)
        vmax = max(vmax, float(v.abs().max()))
    return out, vmax, int(lens.max())


def _assert_fp32_accurate(got, ref32, q, k_cache, v_cache, tables, lens, qsl, scale=0.125) -> float:
    """Assert ``got`` (an fp32 kernel's attention) is within the bound above; ``ref32``: the fp32
    reference's output for the same call. Returns error / bound (for the many-seed runs)."""
    exact, vmax, ctx = _attention_f64(q, k_cache, v_cache, tables, lens, qsl, scale)
    err = float((got.double() - exact).abs().max())
    ref_err = float((ref32.double() - exact).abs().max())
    bound = 2 * ref_err + 2 * U * vmax * (math.sqrt(ctx) + math.sqrt(q.shape[-1]))
    assert err <= bound, (f"max error vs float64 {err:.3g} > bound {bound:.3g} (the fp32 reference's error "
                          f"{ref_err:.3g}, max|v| {vmax:.3g}, context {ctx}, head_dim {q.shape[-1]})")
    return err / bound


def _decode_qsl(num_seqs: int) -> torch.Tensor:
    return torch.arange(num_seqs + 1)  # a decode is a prefill of one query token per sequence


def _slots_of_last_tokens(kv) -> torch.Tensor:
    last = kv.context_lens.long() - 1
    bs = kv.block_size
    return kv.block_tables.long().gather(1, (last // bs)[:, None]).squeeze(1) * bs + last % bs


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(1, 70), min_size=1, max_size=5), block_size=st.sampled_from([1, 3, 16]),
       num_kv_heads=st.sampled_from([1, 2, 3]), group=st.sampled_from([1, 3, 4, 5, 12]),
       head_dim=st.sampled_from([16, 48, 64, 128]), seed=st.integers(0, 2**16))
def test_store_and_decode_matches_reference_store_then_decode(lens, block_size, num_kv_heads, group, head_dim,
                                                              seed):
    """Every shape the kernel takes: compiled-in (group, head_dim) pairs and the runtime-sized path
    (group 5 or 12 at head_dim 128, head_dim 48); the unused slots hold NaN, which must not leak in."""
    kv = random_paged_kv(lens, block_size=block_size, num_kv_heads=num_kv_heads, head_dim=head_dim, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    S, H = len(lens), num_kv_heads * group
    q = torch.randn(S, H, head_dim, generator=g)  # [num_seqs, heads, d]
    k, v = (torch.randn(S, num_kv_heads, head_dim, generator=g),
            torch.randn(S, num_kv_heads, head_dim, generator=g))
    slots = _slots_of_last_tokens(kv)
    want_k, want_v = kv.k_cache.clone(), kv.v_cache.clone()
    reference.store_kv(k, v, want_k, want_v, slots)
    want = reference.paged_attention_decode(q, want_k, want_v, kv.block_tables, kv.context_lens, 0.125)
    got_k, got_v = kv.k_cache.clone(), kv.v_cache.clone()
    assert cpu_attention.usable(q, got_k, got_v)
    got = cpu_attention.decode(q, k, v, got_k, got_v, slots, kv.block_tables, kv.context_lens, 0.125)
    assert not got.isnan().any()
    _assert_fp32_accurate(got, want, q, want_k, want_v, kv.block_tables, kv.context_lens, _decode_qsl(S))
    exact = dict(atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(got_k, want_k, **exact)
    torch.testing.assert_close(got_v, want_v, **exact)


@needs_kernel
def test_negative_slots_are_not_stored_and_no_slots_store_nothing():
    kv = random_paged_kv([5, 9], block_size=4, num_kv_heads=2, head_dim=64, seed=3)
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 64, generator=g), torch.randn(2, 2, 64, generator=g),
               torch.randn(2, 2, 64, generator=g))
    slots = _slots_of_last_tokens(kv)
    slots[0] = -1
    got_k, got_v = kv.k_cache.clone(), kv.v_cache.clone()
    cpu_attention.decode(q, k, v, got_k, got_v, slots, kv.block_tables, kv.context_lens, 0.125)
    want_k, want_v = kv.k_cache.clone(), kv.v_cache.clone()
    store_kv(k, v, want_k, want_v, slots, backend="reference")
    exact = dict(atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(got_k, want_k, **exact)
    torch.testing.assert_close(got_v, want_v, **exact)
    untouched_k = kv.k_cache.clone()
    cpu_attention.decode(q, None, None, untouched_k, kv.v_cache.clone(), None, kv.block_tables,
                                kv.context_lens, 0.125)
    torch.testing.assert_close(untouched_k, kv.k_cache, **exact)


@needs_kernel
def test_decode_reads_the_fused_qkv_outputs_views_in_place():
    """q, k and v as the engine hands them over: column slices of one [S, (H + 2 KVH) d] projection output,
    their rows strided. The kernel reads them where they are and gives exactly what contiguous copies
    give, caches included; a layout it cannot read (heads not side by side) is copied first."""
    kv = random_paged_kv([5, 30, 17], block_size=16, num_kv_heads=3, head_dim=64, seed=11)
    qkv = torch.randn(3, (9 + 2 * 3) * 64, generator=torch.Generator().manual_seed(12))
    q, k, v = (t.view(3, -1, 64) for t in qkv.split_with_sizes([9 * 64, 3 * 64, 3 * 64], dim=-1))
    assert not q.is_contiguous() and cpu_attention._packed_heads(q).data_ptr() == q.data_ptr()  # no copy
    slots = _slots_of_last_tokens(kv)
    runs = []
    for args in ((q, k, v), (q.contiguous(), k.contiguous(), v.contiguous()),
                 (q.transpose(0, 1).contiguous().transpose(0, 1), k, v)):  # heads apart: copied
        kc, vc = kv.k_cache.clone(), kv.v_cache.clone()
        out = cpu_attention.decode(*args, kc, vc, slots, kv.block_tables, kv.context_lens, 0.125)
        runs.append((out, kc, vc))
    exact = dict(atol=0, rtol=0, equal_nan=True)
    for out, kc, vc in runs[1:]:
        torch.testing.assert_close(runs[0][0], out, **exact)
        torch.testing.assert_close(runs[0][1], kc, **exact)
        torch.testing.assert_close(runs[0][2], vc, **exact)


@needs_kernel
def test_one_long_context_spans_many_softmax_chunks():
    """4,000 tokens: the exp/sum loop runs 250 vector chunks; scores span a wide range."""
    kv = random_paged_kv([4000, 17], block_size=16, num_kv_heads=3, head_dim=64, seed=5)
    q = torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(6)) * 4  # sharper softmax
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    got = cpu_attention.decode(q, None, None, kv.k_cache, kv.v_cache, None, kv.block_tables,
                                      kv.context_lens, 0.125)
    _assert_fp32_accurate(got, paged_attention_decode(*args, backend="reference"), *args[:5], _decode_qsl(2))


@st.composite
def _prompts(draw):
    """(context lengths, query lengths): each query the last q_len <= len tokens of its context."""
    lens = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    return lens, [draw(st.integers(1, n)) for n in lens]


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(prompts=_prompts(), block_size=st.sampled_from([1, 4, 16]), num_kv_heads=st.sampled_from([1, 3]),
       group=st.sampled_from([1, 3, 5]), head_dim=st.sampled_from([32, 64, 128]), seed=st.integers(0, 2**16))
def test_prefill_matches_reference_for_whole_and_chunked_prompts(prompts, block_size, num_kv_heads, group,
                                                                 head_dim, seed):
    """Query tokens are the last q_len positions of each context (a whole prompt when q_len == len, a
    chunk or a prompt after cached blocks otherwise): causal over the paged context."""
    lens, q_lens = prompts
    kv = random_paged_kv(lens, block_size=block_size, num_kv_heads=num_kv_heads, head_dim=head_dim, seed=seed)
    qsl = torch.tensor([0] + [sum(q_lens[: i + 1]) for i in range(len(q_lens))], dtype=torch.int32)
    q = torch.randn(sum(q_lens), num_kv_heads * group, head_dim,
                    generator=torch.Generator().manual_seed(seed))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, 0.125)
    assert cpu_attention.usable(q, kv.k_cache, kv.v_cache)
    got = cpu_attention.prefill(q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, 0.125)
    assert not got.isnan().any()
    _assert_fp32_accurate(got, paged_attention_prefill(*args, backend="reference"), *args[:5], qsl)


@needs_kernel
def test_the_cpu_and_torch_backends_give_the_same_prefill():
    kv = random_paged_kv([5, 12, 20], block_size=4, num_kv_heads=2, head_dim=64, seed=3)
    qsl = torch.tensor([0, 5, 8, 14], dtype=torch.int32)  # a whole prompt, then chunks that start mid-block
    q = torch.randn(14, 8, 64, generator=torch.Generator().manual_seed(4))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, 0.125)
    ref32 = paged_attention_prefill(*args, backend="reference")
    for backend in ("cpu", "torch"):  # each as close to the exact attention as fp32 allows: so to each other
        _assert_fp32_accurate(paged_attention_prefill(*args, backend=backend), ref32, *args[:5], qsl)


@needs_kernel
def test_the_cpu_and_torch_backends_give_the_same_decode():
    kv = random_paged_kv([1, 7, 16, 40], block_size=8, num_kv_heads=3, head_dim=64, seed=1)
    q = torch.randn(4, 9, 64, generator=torch.Generator().manual_seed(2))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    ref32 = paged_attention_decode(*args, backend="reference")
    for backend in ("cpu", "torch"):
        _assert_fp32_accurate(paged_attention_decode(*args, backend=backend), ref32, *args[:5],
                              _decode_qsl(4))


def test_shapes_and_dtypes_it_does_not_take_are_not_usable():
    kv = random_paged_kv([5], block_size=4, num_kv_heads=2, head_dim=8, seed=1)
    q = torch.randn(1, 4, 8)
    assert not cpu_attention.usable(q, kv.k_cache, kv.v_cache)  # head_dim 8: not a multiple of 16
    big = random_paged_kv([5], block_size=4, num_kv_heads=1, head_dim=272, seed=1)
    assert not cpu_attention.usable(torch.randn(1, 2, 272), big.k_cache, big.v_cache)  # over 256
    kv = random_paged_kv([5], block_size=4, num_kv_heads=2, head_dim=64, seed=1, dtype=torch.float16)
    assert not cpu_attention.usable(q.new_zeros(1, 4, 64, dtype=torch.float16), kv.k_cache, kv.v_cache)
    # the torch backend then runs its own code: still right
    q = torch.randn(1, 4, 64, generator=torch.Generator().manual_seed(0)).half()
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    torch.testing.assert_close(paged_attention_decode(*args, backend="torch").float(),
                               paged_attention_decode(*args, backend="reference").float(), atol=2e-2,
                               rtol=2e-2)
    kv = random_paged_kv([5], block_size=4, num_kv_heads=2, head_dim=64, seed=1, dtype=torch.bfloat16)
    assert not cpu_attention.usable(torch.zeros(1, 4, 64), kv.k_cache, kv.v_cache)  # fp32 q over a bf16 cache


@needs_kernel
def test_a_bf16_cache_is_read_in_place_and_attended_in_fp32():
    """bf16 caches (an engine with dtype="bfloat16"): each element is widened to fp32 exactly as it is read
    and the output rounded to bf16 once, so the result is the fp32 attention of the bf16 values."""
    kv = random_paged_kv([5, 19, 33], block_size=8, num_kv_heads=2, head_dim=64, seed=4, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 6, 64, generator=g).bfloat16()
    assert cpu_attention.usable(q, kv.k_cache, kv.v_cache)
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    got = paged_attention_decode(*args, backend="cpu")
    assert got.dtype == torch.bfloat16
    want = paged_attention_decode(q.float(), kv.k_cache.float(), kv.v_cache.float(), *args[3:],
                                  backend="reference")
    torch.testing.assert_close(got.float(), want, atol=0, rtol=2 ** -7)  # fp32 math, one bf16 rounding
    qp = torch.randn(3 + 4, 6, 64, generator=g).bfloat16()  # prefill: the last 1, 2 and 4 tokens of each
    qsl = torch.tensor([0, 1, 3, 7], dtype=torch.int32)
    got = paged_attention_prefill(qp, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, 0.125,
                                  backend="cpu")
    want = paged_attention_prefill(qp.float(), kv.k_cache.float(), kv.v_cache.float(), kv.block_tables,
                                   kv.context_lens, qsl, 0.125, backend="reference")
    torch.testing.assert_close(got.float(), want, atol=0, rtol=2 ** -7)


_WHY = """
from paged_lab.kernels.cpu import attention as cpu_attention
print(cpu_attention.available(), cpu_attention.why_unavailable())
"""


@pytest.mark.parametrize("env, expect", [({"PAGED_LAB_CPU_KERNELS": "0"}, "PAGED_LAB_CPU_KERNELS=0"),
                                         ({"CC": "/bin/false"}, "could not build"),
                                         ({"PAGED_LAB_CACHE": "/proc/no-such-folder"},
                                          "could not build or load")])
def test_without_the_kernel_it_says_why(tmp_path, env, expect):
    if ("PAGED_LAB_CPU_KERNELS" not in env
            and not torch.backends.cpu.get_cpu_capability().startswith("AVX512")):
        pytest.skip("no AVX-512: the compiler is never tried")
    full = {**os.environ, "PAGED_LAB_CACHE": str(tmp_path), **env}
    res = subprocess.run([sys.executable, "-c", _WHY], capture_output=True, text=True, env=full, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("False") and expect in res.stdout, res.stdout


# ----------------------------------------------------------------- the cached library is verified
_LOAD = """
import json
from paged_lab.kernels.cpu import attention as cpu_attention
print(json.dumps([cpu_attention.available(), cpu_attention.why_unavailable()]))
"""

_DROPPED = r"""
#include <stdio.h>
/* a library that runs code when loaded, and exports what cpu.attention looks up */
__attribute__((constructor)) static void run_at_load(void) {
    FILE *f = fopen("%s", "w");
    if (f) fclose(f);
}
int paged_decode(void) { return -1; }
int paged_prefill(void) { return -1; }
"""


def test_a_library_swapped_into_the_cache_is_rebuilt_not_loaded(tmp_path):
    """Another shared library written over the cached .so (same path, same owner and mode, the sidecar
    left alone) must not be loaded: its bytes no longer match the sha256 written at build time, so the
    library is rebuilt. Loading it would run its constructor, which leaves a marker file."""
    import json
    import shutil

    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        pytest.skip("no AVX-512: nothing is built or loaded")
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    env = {**os.environ, "PAGED_LAB_CACHE": str(tmp_path / "cache")}

    def load():
        res = subprocess.run([sys.executable, "-c", _LOAD], capture_output=True, text=True, env=env,
                             timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(res.stdout)

    assert load() == [True, None]
    [lib] = (tmp_path / "cache" / "kernels").glob("*.so")
    built = lib.read_bytes()
    marker = tmp_path / "the dropped library ran"
    (tmp_path / "dropped.c").write_text(_DROPPED % marker)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "dropped.so"), str(tmp_path / "dropped.c")],
                   check=True, capture_output=True)
    shutil.copyfile(tmp_path / "dropped.so", lib)  # over the cached file: its owner and mode stay
    assert lib.read_bytes() != built
    assert load() == [True, None]
    assert not marker.exists(), "the library dropped into the cache was loaded (its constructor ran)"
    digest = lib.with_name(lib.name + ".sha256").read_text().strip()
    assert build._sha256(lib) == digest != build._sha256(tmp_path / "dropped.so")  # rebuilt


def test_a_cache_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    """No library is loaded from a folder someone else owns
    (here: this process pretends to be another uid)."""
    folder = tmp_path / "kernels"
    assert build._private_folder(folder) is None
    assert folder.stat().st_mode & 0o777 == 0o700  # created closed to others
    monkeypatch.setattr(os, "getuid", lambda: folder.stat().st_uid + 1)
    why = build._private_folder(folder)
    assert (why is not None and f"belongs to uid {folder.stat().st_uid}, not this user" in why
            and "PAGED_LAB_CACHE" in why)


def test_only_a_closed_file_matching_its_sidecar_counts_as_our_build(tmp_path):
    """The rules of build._is_our_build, file by file; and a folder of ours that others could write
    in is closed to 0700 (what was dropped in meanwhile then fails these rules)."""
    folder = tmp_path / "kernels"
    folder.mkdir(mode=0o775)
    os.chmod(folder, 0o775)  # whatever the umask: group-writable
    assert build._private_folder(folder) is None and folder.stat().st_mode & 0o777 == 0o700
    lib, digest = folder / "k.so", folder / "k.so.sha256"
    lib.write_bytes(b"a library")
    assert not build._is_our_build(lib, digest)  # no sidecar
    digest.write_text(build._sha256(lib) + "\n")
    os.chmod(lib, 0o700)
    os.chmod(digest, 0o600)
    assert build._is_our_build(lib, digest)
    os.chmod(lib, 0o770)
    assert not build._is_our_build(lib, digest)  # group-writable
    os.chmod(lib, 0o700)
    lib.write_bytes(b"another library")
    assert not build._is_our_build(lib, digest)  # the bytes changed since the build
    link = folder / "link.so"
    link.symlink_to(lib)
    digest.write_text(build._sha256(lib) + "\n")
    assert build._is_our_build(lib, digest)
    assert not build._is_our_build(link, digest)  # a link: where it points may change after the check
