"""Compile the Triton kernels for real NVIDIA GPUs without one, and read what they need.

``triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", cc, 32))`` lowers a
kernel to PTX and runs the ``ptxas`` shipped inside the triton wheel, so a CPU machine can check what
only the compiler checks (types across branches, dot shapes, bf16 on the native path) and what the
compiled kernel needs: registers per thread, spilled bytes (the local stack frame, read from the cubin
with the wheel's ``cuobjdump``) and shared memory (Triton's metadata). None of it says how *fast* the
kernels are: that needs a GPU (``scripts/gpu_check.py``).

The constexprs come from :func:`~paged_lab.kernels.triton_paged.decode_launch` and its siblings, the
functions the launchers call at launch time, with the target's compute capability: one copy of that logic;
the block sizes and head dims compiled are the kernels' own (``triton_paged.TRITON_BLOCK_SIZES``...).
This is an instrument of the tests (``tests/test_kernels_triton.py``) and of ``docs/benchmarks.md``'s
table, not part of the kernels: nothing at run time imports it.

The process must have imported triton with ``TRITON_INTERPRET`` unset or 0 (the kernels must be
decorated as compiled functions), which is why ``tests/test_kernels_triton.py`` runs :func:`main` in a
fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from itertools import cycle

# T4; A100; RTX 30xx / A10 (sm_89, RTX 40xx / L4, has the same limits); H100 / H200
TARGETS = (75, 80, 86, 90)
# The shared memory one block may use on each target (CUDA's opt-in maximum per block): T4 (sm_75)
# 64 KiB; A100 (sm_80) 163 KiB; RTX 30xx/A10 (sm_86) and RTX 40xx/L4/L40 (sm_89) 99 KiB; H100/H200 227 KiB.
SMEM_PER_BLOCK = {75: 65536, 80: 166912, 86: 101376, 89: 101376, 90: 232448}
DTYPES = ("float32", "float16", "bfloat16")
GROUPS = (1, 3, 4, 8)  # query heads per KV head: MHA, SmolLM2, Llama-3.2-1B / 8B ...
MAX_REGS = 255  # per thread, every target
# per thread (stack frame): half decode at head_dim 128 spills up to 96 B; the review found 8.3-8.8 KB
MAX_SPILL_BYTES = 128
_TRITON_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Config:
    """One kernel launch to compile: which kernel, for which GPU, with which shapes."""

    kernel: str  # store_kv | decode | decode_split | prefill (decode_split also compiles the merge)
    cc: int
    dtype: str
    block_size: int
    head_dim: int
    group: int = 1
    num_kv_heads: int = 2
    max_query_len: int = 512  # prefill: long enough for the largest query tile


@dataclass(frozen=True)
class Resources:
    kernel: str  # the Triton kernel's name (_decode_kernel ...)
    cc: int
    dtype: str
    constexprs: str
    regs: int
    spill_bytes: int
    shared_bytes: int
    shared_limit: int

    def problems(self) -> list[str]:
        out = []
        if self.regs > MAX_REGS:
            out.append(f"{self.regs} registers per thread > {MAX_REGS}")
        if self.spill_bytes > MAX_SPILL_BYTES:
            out.append(f"{self.spill_bytes} bytes of spilled registers (stack frame) > {MAX_SPILL_BYTES}")
        if self.shared_bytes > self.shared_limit:
            out.append(f"{self.shared_bytes} B shared memory > "
                       f"sm_{self.cc}'s {self.shared_limit} B per block")
        return out


def config_grid(targets=TARGETS) -> list[Config]:
    """Every kernel, dtype, block size, head dim and GQA group at least once per target, and for each
    (target, dtype) the decode and prefill shapes that need the most (head_dim 128, the largest TILE):
    not the full product, which would take an hour to compile on two cores."""
    from paged_lab.kernels.triton_paged import TRITON_BLOCK_SIZES as BLOCK_SIZES
    from paged_lab.kernels.triton_paged import TRITON_HEAD_DIMS as HEAD_DIMS

    grid = []
    for cc in targets:
        big_blocks, groups = cycle((64, 128, 256)), cycle(GROUPS)
        for i, dtype in enumerate(DTYPES):
            kind = "decode_split" if i % 2 else "decode"
            grid.append(Config(kind, cc, dtype, next(big_blocks), 128, next(groups)))
            grid.append(Config("prefill", cc, dtype, next(big_blocks), 128, next(groups)))
            grid.append(Config("store_kv", cc, dtype, BLOCK_SIZES[i], HEAD_DIMS[i % 2],
                               num_kv_heads=(1, 3, 8)[i]))
        # the small blocks (TILE = 16 or 32) at head_dim 64, the other kernel variants
        grid.append(Config("decode", cc, DTYPES[cc % 3], 8, 64, next(groups)))
        grid.append(Config("decode_split", cc, DTYPES[(cc + 1) % 3], 32, 64, next(groups)))
        grid.append(Config("prefill", cc, DTYPES[(cc + 2) % 3], 16, 64, 3, max_query_len=7))
    return grid


def launches(cfg: Config) -> list[tuple[str, object]]:
    """(kernel name, Launch) pairs for a config, from the same functions the wrappers call."""
    import torch

    from paged_lab.kernels import triton_paged as T

    dtype = getattr(torch, cfg.dtype)
    num_heads = cfg.group * cfg.num_kv_heads
    if cfg.kernel == "store_kv":
        return [("_store_kv_kernel", T.store_kv_launch(7, cfg.num_kv_heads, cfg.head_dim, cfg.block_size))]
    if cfg.kernel == "prefill":
        launch = T.prefill_launch(2, cfg.max_query_len, num_heads, cfg.num_kv_heads, cfg.head_dim,
                                  cfg.block_size,
                                  dtype, cfg.cc)  # fmt: skip
        return [("_prefill_kernel", launch)]
    splits = 4 if cfg.kernel == "decode_split" else 1
    decode, merge, _ = T.decode_launch(2, num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.block_size, 64,
                                       dtype,
                                       cfg.cc, splits)  # fmt: skip
    return [("_decode_kernel", decode)] + ([("_merge_splits_kernel", merge)] if merge else [])


def _signature(fn, constexprs: dict, dtype: str, split: bool) -> dict:
    t = _TRITON_DTYPE[dtype]
    ptr = {n: "*" + t for n in ("q_ptr", "k_cache_ptr", "v_cache_ptr", "k_ptr", "v_ptr", "out_ptr")}
    if split:  # the split decode writes float32 partial outputs
        ptr["out_ptr"] = "*fp32"
    ptr.update(block_tables_ptr="*i32", context_lens_ptr="*i32", query_start_loc_ptr="*i32",
               slot_mapping_ptr="*i32", lse_ptr="*fp32", part_ptr="*fp32", qk_scale="fp32")  # fmt: skip
    return {a: "constexpr" if a in constexprs else ptr.get(a, "i32") for a in fn.arg_names}


def _stack_and_regs(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, stack frame bytes) from ``cuobjdump --dump-resource-usage``."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
    fields = dict(kv.split(":", 1) for kv in text.split("Resource usage:")[-1].split() if ":" in kv)
    return int(fields["REG"]), int(fields["STACK"])


def compile_one(name: str, launch, cfg: Config) -> Resources:
    """Compile one kernel for ``sm_{cfg.cc}``; raises with the kernel, target and constexprs named."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from paged_lab.kernels import triton_paged

    fn = getattr(triton_paged, name)
    sig = _signature(fn, launch.constexprs, cfg.dtype, split=bool(launch.constexprs.get("SPLIT")))
    try:
        kernel = compile(ASTSource(fn, sig, constexprs=launch.constexprs),
                         target=GPUTarget("cuda", cfg.cc, 32),
                         options=launch.options)  # fmt: skip
        regs, stack = _stack_and_regs(kernel.asm["cubin"])
    except Exception as e:
        raise RuntimeError(f"{name} for sm_{cfg.cc}, {cfg.dtype}, constexprs {launch.constexprs}, "
                           f"options {launch.options}: "
                           f"{type(e).__name__}: {str(e)[-1500:]}") from e  # fmt: skip
    consts = ", ".join(f"{k}={v}" for k, v in launch.constexprs.items())
    return Resources(name, cfg.cc, cfg.dtype, consts, regs, stack, int(kernel.metadata.shared),
                     SMEM_PER_BLOCK[cfg.cc])  # fmt: skip


def compile_config(cfg: Config) -> list[dict]:
    return [asdict(compile_one(name, launch, cfg)) for name, launch in launches(cfg)]


def main(argv=None) -> int:
    """``python -m paged_lab.tools.aot [--jobs N] [--targets 75,90]``: print one JSON row per kernel."""
    import argparse
    from concurrent.futures import ProcessPoolExecutor

    ap = argparse.ArgumentParser(description="compile every Triton kernel for NVIDIA targets, without a GPU")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--targets", default=",".join(map(str, TARGETS)))
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("set TRITON_INTERPRET=0: the kernels must be decorated as compiled functions", file=sys.stderr)
        return 2
    grid = config_grid(tuple(int(t) for t in args.targets.split(",")))
    failed = 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(cfg, pool.submit(compile_config, cfg)) for cfg in grid]
        for cfg, fut in futures:
            try:
                for row in fut.result():
                    print(json.dumps(row), flush=True)
            except Exception as e:
                failed += 1
                print(json.dumps({"error": str(e), "config": asdict(cfg)}), flush=True)
    return 1 if failed else 0


def markdown_table(rows: list[dict]) -> str:
    """The rows as the table in docs/benchmarks.md."""
    lines = ["| kernel | target | dtype | constexprs | registers | spilled B | shared B (limit) |",
             "|---|---|---|---|---:|---:|---:|"]  # fmt: skip
    for r in sorted(rows, key=lambda r: (r["kernel"], r["cc"], r["dtype"], r["constexprs"])):
        lines.append(f"| {r['kernel'].strip('_')} | sm_{r['cc']} | {r['dtype']} | {r['constexprs']} | "
                     f"{r['regs']} | {r['spill_bytes']} | "
                     f"{r['shared_bytes']:,} ({r['shared_limit']:,}) |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
