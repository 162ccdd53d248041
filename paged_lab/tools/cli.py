"""Command line: ``python -m paged_lab {kv, simulate, generate, bench}``."""

from __future__ import annotations

import argparse
import sys


def final_block_tables(events) -> dict:
    """seq_id -> (block table, tokens) at the moment it finished, read from the event
    log's ``free`` events."""
    tables = {}
    for ev in events:
        if ev.kind == "free":
            tables[ev.seq_id] = (list(ev.block_ids), ev.num_tokens)
    return tables


def _generate(args) -> int:
    import torch

    from paged_lab.engine import LLM, SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    # bad sampling arguments fail here, before the model is loaded
    params = SamplingParams(n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_tokens=args.max_tokens, seed=args.seed, stop=args.stop or None)
    llm = LLM(args.model, dtype=args.dtype, block_size=args.block_size, num_kv_blocks=args.num_kv_blocks,
              kv_cache_dtype=args.kv_cache_dtype,
              enable_prefix_caching=not args.no_prefix_caching)
    prompts = args.prompt
    if args.chat:
        tok = llm.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True)
                   for p in prompts]
    outs = llm.generate(prompts, params, use_tqdm=not args.quiet)
    for out, shown in zip(outs, args.prompt):
        for c in out.outputs:
            label = f" [{c.index}]" if len(out.outputs) > 1 else ""
            print(f"--- {shown!r}{label} ({len(c.token_ids)} tokens, finish_reason={c.finish_reason})")
            print(c.text)
    if args.show_blocks:
        st = llm.stats()
        print(f"\nKV pool: {st['num_blocks']} blocks x {st['block_size']} tokens; "
              f"prefix cache hits {st['prefix_cache_hits']}/{st['prefix_cache_queries']} tokens; "
              f"{st['num_steps']} steps, {st['num_preemptions']} preemptions, {st['num_cow']} copy-on-write")
        from paged_lab.tools.bench import attention_summary

        print(f"attention backend: {attention_summary(st)}")
        for sid, (table, n) in final_block_tables(st["events"]).items():
            print(f"seq {sid!s:>6}: {n:>4} tokens in blocks {table}")
    return 0


def _bench(args) -> int:
    from paged_lab.tools.bench import METHODS, format_report, run_bench

    if args.vs_vllm:
        return _bench_vllm(args)
    methods = tuple(args.methods.split(",")) if args.methods else METHODS
    report = run_bench(args.model, repeats=args.repeats or 1, batch_size=args.batch_size or 8,
                       threads=args.threads, methods=methods, num_requests=args.requests, num_long=args.long,
                       long_tokens=args.long_tokens, progress=not args.quiet, enforce_eager=not args.compile,
                       cpu_prepack=True)  # the engine at its fastest on a CPU (the report says so)
    print(format_report(report))
    return 0


def _bench_vllm(args) -> int:
    """``bench --vs-vllm``: paged_lab against vLLM's CPU build (``paged_lab.tools.bench_vllm``), per dtype."""
    from paged_lab.tools.bench_vllm import VLLM_BLOCK_SIZE, main_race

    if args.methods:
        raise ValueError("--vs-vllm races paged_lab and vLLM only: --methods does not apply")
    return main_race(args.dtype.split(","), model_name=args.model, repeats=args.repeats or 5,
                     max_num_seqs=args.batch_size or 32, block_size=args.block_size or VLLM_BLOCK_SIZE,
                     threads=args.threads, num_requests=args.requests, num_long=args.long,
                     long_tokens=args.long_tokens, vllm_python=args.vllm_python, progress=not args.quiet)


def _kv(args) -> int:
    from paged_lab.kv_math import (
        GB,
        dtype_bytes,
        get_spec,
        human_bytes,
        list_specs,
        num_kv_blocks,
        plan_capacity,
    )

    if args.list:
        print("\n".join(list_specs()))
        return 0
    try:
        spec = get_spec(args.model)
    except KeyError as e:  # unknown name: the message lists the known ones
        raise ValueError(e.args[0]) from None
    per_token = spec.kv_bytes_per_token(args.dtype)
    print(f"{spec.name}: {spec.num_layers} layers, {spec.num_heads} query heads, {spec.num_kv_heads} KV "
          f"heads ({spec.attention_kind}), head_dim {spec.head_dim}")
    width = dtype_bytes(args.dtype)
    formula = f"2 x {spec.num_layers} x {spec.num_kv_heads} x {spec.head_dim} x {width} B"
    if spec.is_mla:  # one latent per layer and token
        formula = f"{spec.num_layers} x ({spec.kv_lora_rank} + {spec.qk_rope_head_dim}) x {width} B"
    print(f"KV per token ({args.dtype}): {formula} = {per_token:,} B "
          f"({human_bytes(per_token)}); as MHA: {human_bytes(spec.kv_bytes_per_token_mha(args.dtype))}")
    if spec.num_sliding_layers:
        context_bytes = spec.kv_bytes_for_context(args.context, args.dtype)
        print(f"{spec.num_sliding_layers} of {spec.num_layers} layers keep only the last "
              f"{spec.sliding_window:,} tokens: {args.context:,} tokens take {human_bytes(context_bytes)}, "
              f"not {human_bytes(args.context * per_token)}")
    plan = plan_capacity(spec, args.gpu_gb * GB, args.context, args.dtype)
    blocks = (num_kv_blocks(spec, plan.kv_budget_bytes, args.block_size, args.dtype) if plan.kv_budget_bytes
              else 0)
    # with sliding-window layers a block of every layer is not what a token costs: no one block count
    in_blocks = "" if spec.num_sliding_layers else f" = {blocks:,} blocks of {args.block_size}"
    print(f"{args.gpu_gb:g} GB GPU: weights {plan.weight_bytes / GB:.1f} GB, KV budget "
          f"{plan.kv_budget_bytes / GB:.1f} GB = {plan.max_tokens:,} tokens{in_blocks} = "
          f"{plan.max_seqs:,} sequences of {args.context:,} tokens")
    return 0


def _simulate(args) -> int:
    from paged_lab.memory.contiguous import ContiguousAllocator
    from paged_lab.sim import workloads
    from paged_lab.sim.simulate import paged, simulate

    make = {"long_tail": workloads.long_tail, "uniform": workloads.uniform, "fixed": workloads.fixed,
            "shared_prefix": workloads.shared_prefix}[args.workload]
    workload = make(args.requests, seed=args.seed) if args.workload != "fixed" else make(args.requests)
    rows = []
    for allocator_name in args.allocators.split(","):
        if allocator_name == "paged":
            alloc = paged(args.num_blocks, args.block_size, enable_prefix_caching=args.prefix_caching)
        elif allocator_name == "contiguous":
            alloc = ContiguousAllocator(args.num_blocks * args.block_size, args.max_seq_len)
        else:
            raise ValueError(f"--allocators: unknown allocator {allocator_name!r}; use paged "
                             "and/or contiguous")
        res = simulate(workload, alloc, {"max_num_seqs": args.max_num_seqs, "mode": args.mode,
                                         "preemption": args.preemption})
        rows.append((allocator_name, res.summary))
    print(f"workload {args.workload}: {args.requests} requests (seed {args.seed}); pool "
          f"{args.num_blocks * args.block_size:,} slots; {args.mode} batching, "
          f"max_num_seqs={args.max_num_seqs}")
    keys = ["makespan", "tokens_per_step", "mean_latency", "p95_latency", "num_preemptions", "peak_running",
            "utilization", "num_rejected"]
    print(f"{'allocator':<11}" + "".join(f"{k:>17}" for k in keys))
    for name, summary in rows:
        cells = "".join(f"{summary[k]:>17.3f}" if isinstance(summary[k], float) else f"{summary[k]:>17}"
                        for k in keys)
        print(f"{name:<11}{cells}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m paged_lab",
                                description="paged-lab: paged KV-cache serving, hands on")
    sub = p.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kv", help="KV-cache size math and capacity for a catalogue model")
    k.add_argument("model", nargs="?", default="llama-3.2-1b", help="catalogue name (see --list)")
    k.add_argument("--dtype", default="bfloat16", help="float32, bfloat16, float16 or fp8")
    k.add_argument("--context", type=int, default=4096, help="tokens per sequence for the capacity line")
    k.add_argument("--gpu-gb", type=float, default=80, help="GPU memory in GB")
    k.add_argument("--block-size", type=int, default=16)
    k.add_argument("--list", action="store_true", help="list the catalogue")
    k.set_defaults(func=_kv)

    s = sub.add_parser("simulate", help="run the Scheduler and allocators on a synthetic workload, no model")
    s.add_argument("--workload", default="long_tail", choices=["long_tail", "uniform", "fixed",
                                                               "shared_prefix"])
    s.add_argument("--requests", type=int, default=200)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--allocators", default="paged,contiguous", help="comma-separated: paged, contiguous")
    s.add_argument("--num-blocks", type=int, default=2048)
    s.add_argument("--block-size", type=int, default=16)
    s.add_argument("--max-seq-len", type=int, default=2048, help="the contiguous allocator's reservation")
    s.add_argument("--max-num-seqs", type=int, default=64)
    s.add_argument("--mode", default="continuous", choices=["continuous", "static"])
    s.add_argument("--preemption", default="recompute", choices=["recompute", "swap"])
    s.add_argument("--prefix-caching", action="store_true")
    s.set_defaults(func=_simulate)

    g = sub.add_parser("generate", help="generate text with the paged engine")
    g.add_argument("prompt", nargs="+", help="one or more prompts (batched together)")
    g.add_argument("--model", default="smollm2-135m", help="load_model name, hub id or local dir")
    g.add_argument("--dtype", default="float32")
    g.add_argument("--max-tokens", type=int, default=32)
    g.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"],
                   help="the KV pool's dtype: auto (the model's) or fp8 (vLLM's names)")
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--num-kv-blocks", type=int, default=None,
                   help="KV pool size in blocks (default: 512 MiB)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--n", type=int, default=1, help="completions per prompt (fork + copy-on-write)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--chat", action="store_true", help="wrap each prompt in the model's chat template")
    g.add_argument("--no-prefix-caching", action="store_true")
    g.add_argument("--show-blocks", action="store_true",
                   help="print each sequence's block table and pool stats")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=_generate)

    b = sub.add_parser("bench", help="paged_lab vs transformers static batching and generate_batch (or vLLM)")
    b.add_argument("--model", default="smollm2-135m")
    b.add_argument("--repeats", type=int, default=None,
                   help="timed runs per method (medians are reported); default 1, with --vs-vllm 5")
    b.add_argument("--batch-size", type=int, default=None,
                   help="max_num_seqs / static batch / max requests per batch; default 8, with --vs-vllm 32")
    b.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    b.add_argument("--requests", type=int, default=32)
    b.add_argument("--long", type=int, default=4, help="requests with long outputs")
    b.add_argument("--long-tokens", type=int, default=128)
    b.add_argument("--methods", default=None, help="comma-separated subset of "
                                                   "paged_lab,hf_static,hf_generate_batch")
    mode = b.add_mutually_exclusive_group()
    mode.add_argument("--compile", dest="compile", action="store_true", default=True,
                      help="(the default) paged_lab compiles its decode steps first "
                           "(LLM(enforce_eager=False), CPU fp32): about 2-3 minutes of start-up, "
                           "outside the timed runs")
    mode.add_argument("--eager", dest="compile", action="store_false",
                      help="paged_lab runs every step eagerly (LLM's own default): no start-up wait")
    b.add_argument("--quiet", action="store_true")
    v = b.add_argument_group("paged_lab vs vLLM (make bench-vllm; docs/benchmarks.md)")
    v.add_argument("--vs-vllm", action="store_true",
                   help="race vLLM's CPU build instead (LLM.generate in the vLLM venv, run as a subprocess): "
                        "same workload and settings, both eager (--compile does not apply), prefix caching "
                        "off, runs interleaved")
    v.add_argument("--dtype", default="float32,bfloat16",
                   help="--vs-vllm: comma-separated dtypes, raced in turn")
    v.add_argument("--block-size", type=int, default=None,
                   help="--vs-vllm: KV block size of both engines (default 128, vLLM's CPU default)")
    v.add_argument("--vllm-python", default=None,
                   help="--vs-vllm: the vLLM venv's python (default $VLLM_VENV/bin/python, else "
                        "~/.cache/paged_lab/vllm-venv/bin/python: make vllm-venv)")
    b.set_defaults(func=_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # bad input: one clear line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
