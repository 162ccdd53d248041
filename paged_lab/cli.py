"""Command line: ``python -m paged_lab generate "..."`` and ``python -m paged_lab bench``."""

from __future__ import annotations

import argparse
import sys


def final_block_tables(events) -> dict:
    """seq_id -> (block table, tokens) at the moment it finished, read from the event log's ``free`` events."""
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
              enable_prefix_caching=not args.no_prefix_caching)
    prompts = args.prompt
    if args.chat:
        tok = llm.tokenizer
        prompts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
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
        for sid, (table, n) in final_block_tables(st["events"]).items():
            print(f"seq {sid!s:>6}: {n:>4} tokens in blocks {table}")
    return 0


def _bench(args) -> int:
    from paged_lab.bench import METHODS, format_report, run_bench

    methods = tuple(args.methods.split(",")) if args.methods else METHODS
    report = run_bench(args.model, repeats=args.repeats, batch_size=args.batch_size, threads=args.threads,
                       methods=methods, num_requests=args.requests, num_long=args.long,
                       long_tokens=args.long_tokens, progress=not args.quiet)
    print(format_report(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m paged_lab", description="paged-lab: paged KV-cache serving, hands on")
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text with the paged engine")
    g.add_argument("prompt", nargs="+", help="one or more prompts (batched together)")
    g.add_argument("--model", default="smollm2-135m", help="load_model name, hub id or local dir")
    g.add_argument("--dtype", default="float32")
    g.add_argument("--max-tokens", type=int, default=32)
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--num-kv-blocks", type=int, default=None, help="KV pool size in blocks (default: 512 MiB)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--n", type=int, default=1, help="completions per prompt (fork + copy-on-write)")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--chat", action="store_true", help="wrap each prompt in the model's chat template")
    g.add_argument("--no-prefix-caching", action="store_true")
    g.add_argument("--show-blocks", action="store_true", help="print each sequence's block table and pool stats")
    g.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(func=_generate)

    b = sub.add_parser("bench", help="paged_lab vs transformers static batching and generate_batch")
    b.add_argument("--model", default="smollm2-135m")
    b.add_argument("--repeats", type=int, default=1, help="timed runs per method (medians are reported)")
    b.add_argument("--batch-size", type=int, default=8, help="max_num_seqs / static batch / max requests per batch")
    b.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    b.add_argument("--requests", type=int, default=32)
    b.add_argument("--long", type=int, default=4, help="requests with long outputs")
    b.add_argument("--long-tokens", type=int, default=128)
    b.add_argument("--methods", default=None, help="comma-separated subset of paged_lab,hf_static,hf_generate_batch")
    b.add_argument("--quiet", action="store_true")
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
