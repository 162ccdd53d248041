"""Measure paged decode against attention over a contiguous cache (notebook 06, benchmarks/kernel_bench.py).

What is compared, for one decode step of ``batch`` sequences of ``context_len`` tokens:
- ``triton``: :func:`paged_lab.kernels.paged_attention_decode` over a shuffled paged cache;
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` over the same K/V laid out
  contiguously (``[batch, kv_heads, context_len, head_dim]``), the no-paging baseline;
- ``flashinfer``: FlashInfer's paged decode on the same paged cache, when the package is installed.

Achieved bandwidth = bytes of K and V read from HBM (``2 x tokens x kv_heads x head_dim x dtype bytes``)
/ median time; ``pct_peak`` divides it by the GPU's datasheet HBM bandwidth (``PEAK_GBS``, looked up by
the exact GPU name, or ``peak_gbs=`` when the GPU is not listed: then no percentage is reported rather
than a guess). Nothing here produces numbers without running on the device it names.

How a GPU launch is timed (:func:`cuda_time_ms`): before every repetition the L2 cache is flushed (a
write of twice its size), so the K/V bytes really come from HBM (an H200's 50 MB L2 would otherwise hold
a small case and report over 100% of peak); then the GPU is kept busy (``torch.cuda._sleep``) while
Python enqueues the call, so the CUDA events around it time the kernels, not the dispatch checks and
the launch overhead. :func:`hbm_bytes` is what the bandwidth divides by. These GPU code paths have not
been run in this project's CI (there is no GPU there); the CPU tests check the arithmetic around them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from paged_lab.kernels import paged_attention_decode
from paged_lab.kv_math import cdiv

# Datasheet peak memory bandwidth, GB/s (10^9 B/s), by the GPU's name as torch.cuda.get_device_name()
# gives it, less the vendor prefix ("NVIDIA ", "Tesla ", "GeForce "): matched exactly, so "A100-..."
# can never fall through to "A10".
PEAK_GBS = {
    "H200": 4800, "H200 NVL": 4800, "H100 80GB HBM3": 3350, "H100 SXM5 80GB": 3350, "H100 NVL": 3900,
    "H100 PCIe": 2000, "GH200 480GB": 4000,
    "A100-SXM4-80GB": 2039, "A100 80GB PCIe": 1935, "A100-PCIE-40GB": 1555, "A100-SXM4-40GB": 1555,
    "L40S": 864, "L40": 864, "L4": 300, "A10G": 600, "A10": 600, "T4": 320,
    "V100-SXM2-16GB": 900, "V100-SXM2-32GB": 900, "V100-PCIE-16GB": 900, "V100-PCIE-32GB": 900,
    "RTX 4090": 1008, "RTX 3090": 936,
}  # fmt: skip
_VENDOR_PREFIXES = ("NVIDIA ", "Tesla ", "GeForce ")


def gpu_model(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``"A100-SXM4-80GB"``, ``"Tesla T4"`` -> ``"T4"``: the key of
    :data:`PEAK_GBS`."""
    name = name.strip()
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):].strip(), True
    return name


def peak_gbs_for_name(name: str) -> float | None:
    """Datasheet HBM bandwidth for a GPU name, or None when it is not listed (no guessing by substring)."""
    gbs = PEAK_GBS.get(gpu_model(name))
    return None if gbs is None else float(gbs)


def peak_gbs(device) -> float | None:
    """Datasheet HBM bandwidth of a CUDA device, or None when it is not in :data:`PEAK_GBS`."""
    if torch.device(device).type != "cuda":
        return None
    return peak_gbs_for_name(torch.cuda.get_device_name(device))


def hbm_bytes(kv_bytes: int, l2_bytes: int, l2_flushed: bool) -> int:
    """Bytes that must come from HBM: all of them after an L2 flush; without one, a working set up to
    the L2's size may already sit there from the previous repetition, so that part is not counted."""
    if kv_bytes < 0 or l2_bytes < 0:
        raise ValueError(f"kv_bytes and l2_bytes must be >= 0, got {kv_bytes} and {l2_bytes}")
    return kv_bytes if l2_flushed else max(0, kv_bytes - l2_bytes)


def l2_cache_bytes(device) -> int:
    """The device's L2 size (0 off CUDA, or when torch does not report it)."""
    if torch.device(device).type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)


def kv_bytes_read(batch: int, context_len: int, num_kv_heads: int, head_dim: int, dtype) -> int:
    """Bytes of K and V one decode step must read: every cached token, once."""
    return 2 * batch * context_len * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def median_ms(fn, device="cuda", warmup: int = 3, iters: int = 20) -> float:
    """Median wall time of ``fn()`` in ms (:func:`cuda_time_ms` on a GPU, perf_counter elsewhere)."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if torch.device(device).type == "cuda":
        return cuda_time_ms(fn, device, warmup=warmup, iters=iters)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def cuda_time_ms(fn, device="cuda", warmup: int = 3, iters: int = 20, flush_l2: bool = True,
                 sleep_cycles: int = 2_000_000) -> float:  # fmt: skip
    """Median GPU time of ``fn()`` in ms: L2 flushed before each repetition (``flush_l2``), and the GPU
    kept busy for ``sleep_cycles`` clock cycles (about 1 ms) before the start event, so that Python's
    time to enqueue ``fn`` is hidden and the events time the kernels only. Not measured in CI (no GPU)."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    device = torch.device(device)
    flush = (torch.empty(max(2 * l2_cache_bytes(device), 2**20), dtype=torch.uint8, device=device)
             if flush_l2 else None)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()  # evicts the K/V of the previous repetition from L2
        if hasattr(torch.cuda, "_sleep"):  # a private torch helper: skip it where a version lacks it
            torch.cuda._sleep(sleep_cycles)  # the GPU waits here while the CPU enqueues the events and fn
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def make_decode_inputs(batch, context_len, block_size, num_heads, num_kv_heads, head_dim, dtype, device,
                       seed=0):
    """A shuffled paged cache holding ``batch`` sequences, plus the same K/V contiguous for SDPA."""
    g = torch.Generator(device=device).manual_seed(seed)
    blocks_per_seq = cdiv(context_len, block_size)
    num_blocks = batch * blocks_per_seq
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    v_cache = torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    perm = torch.randperm(num_blocks, generator=g, device=device)
    block_tables = perm.view(batch, blocks_per_seq).to(torch.int32)  # non-contiguous pages
    context_lens = torch.full((batch,), context_len, dtype=torch.int32, device=device)
    q = torch.randn((batch, num_heads, head_dim), generator=g, device=device, dtype=torch.float32).to(dtype)
    # contiguous copy: [batch, kv_heads, context_len, head_dim]
    k_contig = k_cache[block_tables.long()].flatten(1, 2)[:, :context_len].transpose(1, 2).contiguous()
    v_contig = v_cache[block_tables.long()].flatten(1, 2)[:, :context_len].transpose(1, 2).contiguous()
    return q, k_cache, v_cache, block_tables, context_lens, k_contig, v_contig


def _sdpa_decode(qs, k_contig, v_contig, scale):
    """SDPA decode on the contiguous cache, reading the KV heads once (``enable_gqa``) where torch has it."""
    try:
        F.scaled_dot_product_attention(qs[:1], k_contig[:1], v_contig[:1], scale=scale, enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(qs, k_contig, v_contig, scale=scale, enable_gqa=True)
    except (TypeError, RuntimeError):  # older torch: expand the KV heads (outside the timing)
        group = qs.shape[1] // k_contig.shape[1]
        ks, vs = k_contig.repeat_interleave(group, 1), v_contig.repeat_interleave(group, 1)
        return lambda: F.scaled_dot_product_attention(qs, ks, vs, scale=scale)


def _flashinfer_decode(q, k_cache, v_cache, block_tables, context_len):
    """A callable running FlashInfer's paged decode on the same cache, or None when unavailable."""
    try:
        import flashinfer
    except ImportError:
        return None
    try:
        return _flashinfer_plan(flashinfer, q, k_cache, v_cache, block_tables, context_len)
    except Exception as e:  # API drift across FlashInfer versions: report, do not guess
        print(f"FlashInfer installed but not usable here ({type(e).__name__}: {e}); skipping it")
        return None


def _flashinfer_plan(flashinfer, q, k_cache, v_cache, block_tables, context_len):
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    per_seq = block_tables.shape[1]
    indptr = torch.arange(0, (batch + 1) * per_seq, per_seq, dtype=torch.int32, device=q.device)
    indices = block_tables.flatten().contiguous()
    last = context_len - (per_seq - 1) * block_size
    last_page_len = torch.full((batch,), last, dtype=torch.int32, device=q.device)
    workspace = torch.empty(128 * 2**20, dtype=torch.uint8, device=q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(indptr, indices, last_page_len, num_heads, num_kv_heads, head_dim, block_size,
                 q_data_type=q.dtype, kv_data_type=k_cache.dtype)  # fmt: skip
    return lambda: wrapper.run(q, (k_cache, v_cache))


def bench_decode(batch, context_len, block_size, num_heads=32, num_kv_heads=8, head_dim=128,
                 dtype=torch.bfloat16, device="cuda", backend="triton", iters=20) -> dict:  # fmt: skip
    """Time one decode configuration; returns a result row (times in ms, bandwidth in GB/s)."""
    q, k_cache, v_cache, bt, lens, k_contig, v_contig = make_decode_inputs(
        batch, context_len, block_size, num_heads, num_kv_heads, head_dim, dtype, device
    )
    scale = head_dim**-0.5
    paged = lambda: paged_attention_decode(q, k_cache, v_cache, bt, lens, scale, backend=backend)
    qs = q.unsqueeze(2)  # [batch, heads, 1, d]
    sdpa = _sdpa_decode(qs, k_contig, v_contig, scale)
    # correctness first: the paged kernel must agree with the contiguous baseline
    ref = sdpa()[:, :, 0].float()
    err = (paged().float() - ref).abs().max().item()
    nbytes = hbm_bytes(kv_bytes_read(batch, context_len, num_kv_heads, head_dim, dtype),
                       l2_cache_bytes(device),
                       l2_flushed=True)  # median_ms -> cuda_time_ms flushes L2 before every repetition
    row = dict(device=torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu",
               dtype=str(dtype).replace("torch.", ""), batch=batch, context_len=context_len,
               block_size=block_size,
               num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, backend=backend,
               max_abs_err=err, kv_bytes=nbytes)  # fmt: skip
    row["paged_ms"] = median_ms(paged, device, iters=iters)
    row["sdpa_ms"] = median_ms(sdpa, device, iters=iters)
    fi = (_flashinfer_decode(q, k_cache, v_cache, bt, context_len)
          if torch.device(device).type == "cuda" else None)
    row["flashinfer_ms"] = median_ms(fi, device, iters=iters) if fi is not None else None
    row["gbs"] = nbytes / (row["paged_ms"] * 1e-3) / 1e9
    peak = peak_gbs(device)
    row["peak_gbs"] = peak
    row["pct_peak"] = 100 * row["gbs"] / peak if peak else None
    row["vs_sdpa"] = row["paged_ms"] / row["sdpa_ms"]
    return row


def sweep(context_lens: Iterable[int] = (512, 1024, 2048, 4096), batches: Iterable[int] = (1, 8, 32, 64),
          block_sizes: Iterable[int] = (16, 32, 128), progress: bool = True, **kw) -> list[dict]:  # fmt: skip
    """:func:`bench_decode` over the product of the three grids (a progress bar over configurations)."""
    configs = [(b, n, bs) for n in context_lens for b in batches for bs in block_sizes]
    try:
        from tqdm.auto import tqdm

        it = tqdm(configs, desc="decode configs", disable=not progress)
    except ImportError:
        it = configs
    rows = []
    for b, n, bs in it:
        rows.append(bench_decode(b, n, bs, **kw))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return rows
