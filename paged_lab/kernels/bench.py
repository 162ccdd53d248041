"""Measure paged decode against attention over a contiguous cache (notebook 06, benchmarks/kernel_bench.py).

What is compared, for one decode step of ``batch`` sequences of ``context_len`` tokens:
- ``triton``: :func:`paged_lab.kernels.paged_attention_decode` over a shuffled paged cache;
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` over the same K/V laid out
  contiguously (``[batch, kv_heads, context_len, head_dim]``), the no-paging baseline;
- ``flashinfer``: FlashInfer's paged decode on the same paged cache, when the package is installed.

Achieved bandwidth = bytes of K and V read (``2 x tokens x kv_heads x head_dim x dtype bytes``)
/ median time; ``pct_peak`` divides it by the GPU's datasheet HBM bandwidth (``PEAK_GBS``, or
``peak_gbs=`` when the GPU is not listed: then no percentage is reported rather than a guess).
Nothing here produces numbers without running on the device it names.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from paged_lab.kernels.dispatch import paged_attention_decode

# Datasheet peak memory bandwidth, GB/s (10^9 B/s), by a substring of torch.cuda.get_device_name().
PEAK_GBS = {
    "H200": 4800, "H100 NVL": 3900, "H100 PCIe": 2000, "H100": 3350, "GH200": 4000,
    "A100-SXM4-80GB": 2039, "A100 80GB PCIe": 1935, "A100-PCIE-40GB": 1555, "A100-SXM4-40GB": 1555,
    "L40S": 864, "L40": 864, "L4": 300, "A10G": 600, "A10": 600, "T4": 320, "V100": 900,
    "RTX 4090": 1008, "RTX 3090": 936,
}  # fmt: skip


def peak_gbs(device) -> float | None:
    """Datasheet HBM bandwidth of a CUDA device, or None when it is not in :data:`PEAK_GBS`."""
    if torch.device(device).type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key in sorted(PEAK_GBS, key=len, reverse=True):  # most specific name first
        if key in name:
            return float(PEAK_GBS[key])
    return None


def kv_bytes_read(batch: int, context_len: int, num_kv_heads: int, head_dim: int, dtype) -> int:
    """Bytes of K and V one decode step must read: every cached token, once."""
    return 2 * batch * context_len * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def median_ms(fn, device="cuda", warmup: int = 3, iters: int = 20) -> float:
    """Median wall time of ``fn()`` in ms (CUDA events on a GPU, perf_counter elsewhere)."""
    for _ in range(warmup):
        fn()
    times = []
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def make_decode_inputs(batch, context_len, block_size, num_heads, num_kv_heads, head_dim, dtype, device, seed=0):
    """A shuffled paged cache holding ``batch`` sequences, plus the same K/V contiguous for SDPA."""
    g = torch.Generator(device=device).manual_seed(seed)
    blocks_per_seq = -(-context_len // block_size)
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
    nbytes = kv_bytes_read(batch, context_len, num_kv_heads, head_dim, dtype)
    row = dict(device=torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu",
               dtype=str(dtype).replace("torch.", ""), batch=batch, context_len=context_len, block_size=block_size,
               num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, backend=backend,
               max_abs_err=err, kv_bytes=nbytes)  # fmt: skip
    row["paged_ms"] = median_ms(paged, device, iters=iters)
    row["sdpa_ms"] = median_ms(sdpa, device, iters=iters)
    fi = _flashinfer_decode(q, k_cache, v_cache, bt, context_len) if torch.device(device).type == "cuda" else None
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
