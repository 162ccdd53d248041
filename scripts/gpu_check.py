"""The one prepared GPU check: kernels, bandwidth, token identity and throughput on a CUDA machine.

Runs with whatever torch, triton and transformers the machine's python already has; installs and
downloads nothing (the model is ``random:llama-3.2-1b``: Llama-3.2-1B's shapes, seeded random weights).
About 3 minutes on one H200 (measured 2026-12-04, docs/benchmarks.md). Four parts, each also
runnable alone with ``--only``:

- ``kernels``: every Triton kernel compiled on this GPU against the torch reference (decode unsplit and
  split, prefill, store_kv; fp32/fp16/bf16; the dispatch's block sizes; GQA 1/3/4/8; head dims 64/128);
- ``bandwidth``: ``benchmarks/kernel_bench.py`` at 1K/4K/16K contexts, batch 1/8/32/64, block sizes
  16/32/64: achieved HBM bandwidth as a share of the datasheet peak, and the time against torch SDPA on
  a contiguous cache;
- ``identity``: the engine on random Llama-3.2-1B in bf16 (fp16 without bf16 tensor cores), greedy, 8
  prompts, against transformers: equal until the first near-tie (``paged_lab.tools.gpu.compare_greedy``);
- ``throughput``: the engine's tokens/s against transformers static batching, 64 skewed requests.

Writes ``report.md`` and ``results.csv`` to ``--out``, naming the GPU and each figure's command. On a
machine without CUDA it exits at once (status 2) with a message, measuring nothing.

    python scripts/gpu_check.py --out gpu_check_out
    python scripts/gpu_check.py --out gpu_check_out --only kernels,identity
"""

from __future__ import annotations

import argparse
import csv
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PARTS = ("kernels", "bandwidth", "identity", "throughput")
ROOT = Path(__file__).resolve().parents[1]
NO_GPU = ("gpu_check.py needs a CUDA GPU and none is visible here (torch.cuda.is_available() is False): "
          "nothing was run or measured. Run it on a GPU machine; "
          "on this one, `make test` checks the code.")  # fmt: skip
TARGETS = {  # what issue 15 asks for
    "bandwidth": ">= 70% of peak HBM bandwidth at 4,096-token contexts with batch >= 32",
    "vs_sdpa": "decode <= 1.25x torch SDPA on a contiguous cache",
    "throughput": "engine >= 3x transformers static batching",
}
PROMPTS = [
    "The capital of France is", "def fibonacci(n):\n    if n < 2:", "Paged attention stores the KV cache in",
    "Once upon a time", "1, 2, 3, 4,", "The quick brown fox", "import torch\nx = torch.",
    "A block table maps",
]  # fmt: skip


@dataclass
class Result:
    part: str
    metric: str
    value: float | str
    unit: str = ""
    target: str = ""
    met: bool | None = None
    command: str = ""


# ------------------------------------------------------------------------------------------ CLI
def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    bad = sorted(set(parts) - set(PARTS))
    if bad or not parts:
        raise argparse.ArgumentTypeError(f"--only takes a comma-separated subset of {PARTS}, got {text!r}")
    return parts


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for report.md and results.csv")
    ap.add_argument("--only", type=_parts, default=list(PARTS), help=f"comma-separated subset of {PARTS}")
    ap.add_argument("--model", default="random:llama-3.2-1b",
                    help="model for identity/throughput (a random: name downloads nothing)")  # fmt: skip
    ap.add_argument("--requests", type=int, default=64, help="throughput: requests in the skewed workload")
    args = ap.parse_args(argv)
    if args.requests < 8:
        ap.error(f"--requests must be >= 8 (the workload has 8 long requests), got {args.requests}")
    return args


def _cmd(args, part: str) -> str:
    return f"python scripts/gpu_check.py --out {args.out} --only {part}" + (
        f" --model {args.model}" if args.model != "random:llama-3.2-1b" else "")


# ---------------------------------------------------------------------------------------- parts
def check_kernels(args) -> list[Result]:
    """Every kernel on this GPU against the torch reference; one row per (kernel, dtype), worst error."""
    import torch

    from paged_lab.kernels import store_kv
    from paged_lab.kernels.dispatch import paged_attention_decode, paged_attention_prefill
    from paged_lab.kernels.synthetic import random_paged_kv
    from paged_lab.kernels.triton_paged import TRITON_BLOCK_SIZES

    tol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
    worst: dict[tuple[str, str], float] = {}
    failures = []
    groups, head_dims = (1, 3, 4, 8), (64, 128)
    for dtype in tol:
        for i, block_size in enumerate(TRITON_BLOCK_SIZES):
            group, head_dim = groups[i % 4], head_dims[i % 2]
            lens = [1, block_size + 3, 3 * block_size, 1500]
            kv = random_paged_kv(lens, block_size, 2, head_dim, dtype=dtype, device="cuda", table_pad=-1,
                                 seed=i)
            g = torch.Generator().manual_seed(i)
            q = torch.randn(len(lens), 2 * group, head_dim, generator=g).to(dtype).cuda()
            args_ = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, head_dim**-0.5)
            ref = paged_attention_decode(*args_, backend="reference").float()
            for kind, splits in (("decode", 1), ("decode_split", 4)):
                out = paged_attention_decode(*args_, backend="triton", num_splits=splits).float()
                _record(worst, failures, kind, dtype, (out - ref).abs().max().item(), tol[dtype], block_size,
                        group)
            q_lens = [1, block_size, 2 * block_size, 100]
            qp = torch.randn(sum(q_lens), 2 * group, head_dim, generator=g).to(dtype).cuda()
            qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32,
                               device="cuda")
            pargs = (qp, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, head_dim**-0.5)
            err = (paged_attention_prefill(*pargs, backend="triton").float()
                   - paged_attention_prefill(*pargs, backend="reference").float()
                   ).abs().max().item()  # fmt: skip
            _record(worst, failures, "prefill", dtype, err, tol[dtype], block_size, group)
            k, v = torch.randn(2, 9, 2, head_dim, generator=g).to(dtype).cuda()
            slots = torch.randperm(kv.k_cache.shape[0] * block_size, generator=g)[:9].to(torch.int32).cuda()
            caches = [(kv.k_cache.clone(), kv.v_cache.clone()) for _ in range(2)]
            for backend, (kc, vc) in zip(("reference", "triton"), caches):
                store_kv(k, v, kc, vc, slots, backend=backend)
            same = torch.equal(caches[0][0].nan_to_num(), caches[1][0].nan_to_num())
            _record(worst, failures, "store_kv", dtype, 0.0 if same else float("inf"), 0.0, block_size, group)
    results = []
    for (kind, dt), err in worst.items():
        limit = 0.0 if kind == "store_kv" else tol[dt]
        results.append(Result("kernels",
                              f"{kind} {str(dt).replace('torch.', '')}: max abs error vs reference", err,
                              target=f"<= {limit}", met=err <= limit,
                              command=_cmd(args, "kernels")))  # fmt: skip
    results.append(Result("kernels", "failing configurations", len(failures), target="0", met=not failures,
                          command=_cmd(args, "kernels")))  # fmt: skip
    for f in failures[:20]:
        print("FAIL", f)
    return results


def _record(worst, failures, kind, dtype, err, tol, block_size, group):
    key = (kind, dtype)
    worst[key] = max(worst.get(key, 0.0), err)
    if not err <= tol:
        failures.append(f"{kind} {dtype} block {block_size} group {group}: max error {err:.3g} > {tol}")


def check_bandwidth(args) -> list[Result]:
    out = args.out / "kernel_bench"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "kernel_bench.py"), "--out", str(out), "--context-lens",
           "1024,4096,16384", "--batches", "1,8,32,64", "--block-sizes", "16,32,64", "--iters",
           "30"]  # fmt: skip
    shown = "python benchmarks/kernel_bench.py " + " ".join(cmd[2:])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    (args.out / "kernel_bench.log").write_text(proc.stdout + proc.stderr)
    rows = _read_csv(out / "decode.csv")
    if not rows:
        return [Result("bandwidth", "kernel_bench.py failed", proc.returncode, command=shown, met=False)]
    return bandwidth_results(rows, shown)


def bandwidth_results(rows: list[dict], command: str) -> list[Result]:
    """The targets from kernel_bench's CSV rows (strings, as read back)."""
    def num(r, k):
        return float(r[k]) if r.get(k) not in (None, "", "None") else None

    big = [r for r in rows if int(r["context_len"]) == 4096 and int(r["batch"]) >= 32]
    out = []
    if big:
        best = max(big, key=lambda r: num(r, "gbs"))
        pct = num(best, "pct_peak")
        out.append(Result("bandwidth",
                          f"best share of peak HBM bandwidth, ctx 4096, batch >= 32 (batch {best['batch']}, "
                          f"block {best['block_size']}; {num(best, 'gbs'):.0f} GB/s)",
                          "n/a" if pct is None else round(pct, 1),
                          "%", TARGETS["bandwidth"], None if pct is None else pct >= 70,
                          command))  # fmt: skip
    worst = max(rows, key=lambda r: num(r, "vs_sdpa"))
    ratio = num(worst, "vs_sdpa")
    out.append(Result("bandwidth",
                      f"worst paged / SDPA time (ctx {worst['context_len']}, batch {worst['batch']}, "
                      f"block {worst['block_size']})", round(ratio, 3), "x", TARGETS["vs_sdpa"],
                      ratio <= 1.25, command))  # fmt: skip
    errs = max(num(r, "max_abs_err") for r in rows)
    out.append(Result("bandwidth", "max abs error vs SDPA over the sweep", errs, target="<= 5e-2",
                      met=errs <= 5e-2,
                      command=command))  # fmt: skip
    return out


def _read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _load(args):
    from paged_lab.models import load_model
    from paged_lab.tools.gpu import model_dtype

    dtype = model_dtype("cuda")
    model, tok, spec = load_model(args.model, dtype=dtype, device="cuda", progress=False)
    return model, tok, spec, dtype


def check_identity(args, loaded) -> list[Result]:
    """Greedy tokens against transformers in the GPU's serving dtype (bf16/fp16, where random weights give
    many near-ties) and again in float32 with TF32 off (few near-ties: most tokens are compared)."""
    model, tok, _, dtype = loaded
    results = _identity(args, model, tok, dtype)
    del model
    import torch

    torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    from paged_lab.models import load_model

    model32, tok32, _ = load_model(args.model, dtype="float32", device="cuda", progress=False)
    results += _identity(args, model32, tok32, "float32")
    del model32
    torch.cuda.empty_cache()
    return results


def _identity(args, model, tok, dtype) -> list[Result]:
    from paged_lab.engine import LLM, SamplingParams
    from paged_lab.kernels import resolve_backend
    from paged_lab.tools.gpu import NEAR_TIE_MARGIN, compare_greedy, hf_greedy

    llm = LLM(model, tokenizer=tok, dtype=dtype, num_kv_blocks=1024, attention_backend="auto")
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True),
                        use_tqdm=False)
    margin = NEAR_TIE_MARGIN[dtype]
    matches = []
    for p, o in zip(PROMPTS, outs):
        ref, gaps = hf_greedy(model, tok(p).input_ids, 32, pad_token_id=tok.eos_token_id)
        ours = o.outputs[0].token_ids[:len(ref)]  # transformers stops at EOS; the engine ignores it here
        matches.append(compare_greedy(ours, ref, gaps, margin))
    cmd = _cmd(args, "identity")
    backend = resolve_backend(llm.attention_backend, *llm.kv.layers[0])
    return [
        Result("identity", f"{dtype}: prompts whose greedy tokens equal transformers' until the first "
               f"near-tie (margin {margin} on the logits; attention {backend})",
               sum(m.equal for m in matches),
               f"of {len(PROMPTS)}",
               f"{len(PROMPTS)} of {len(PROMPTS)}", all(m.equal for m in matches), cmd),  # fmt: skip
        Result("identity", f"{dtype}: tokens compared (before near-ties) out of 8 x 32",
               sum(m.compared for m in matches),
               command=cmd),  # fmt: skip
    ]


def check_throughput(args, loaded) -> list[Result]:
    from paged_lab.tools import bench

    model, tok, spec, dtype = loaded
    report = bench.run_bench(repeats=2, batch_size=16, num_requests=args.requests, num_long=8,
                             long_tokens=256, methods=("paged_lab", "hf_static"), progress=False,
                             loaded=(model, tok, spec))  # fmt: skip
    print(bench.format_report(report))
    ratio = report.ratio("paged_lab", "hf_static")
    cmd = _cmd(args, "throughput")
    return [
        Result("throughput",
               f"engine tok/s ({args.model}, {dtype}, {args.requests} skewed requests, batch 16)",
               round(report.median_tokens_per_s("paged_lab"), 1), "tok/s", command=cmd),  # fmt: skip
        Result("throughput", "transformers static batching tok/s",
               round(report.median_tokens_per_s("hf_static"), 1),
               "tok/s", command=cmd),  # fmt: skip
        Result("throughput", "engine / static batching", round(ratio, 2), "x", TARGETS["throughput"],
               ratio >= 3, cmd),
    ]


# -------------------------------------------------------------------------------------- report
def environment() -> dict:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "transformers"):
        try:
            env[name] = __import__(name).__version__
        except Exception as e:  # report, do not fail
            env[name] = f"unavailable ({type(e).__name__})"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        env["gpu"] = (f"{torch.cuda.get_device_name()} "
                      f"(sm_{major}{minor}, {torch.cuda.device_count()} visible)")
    return env


def write_report(results: list[Result], env: dict, out: Path, seconds: float) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "results.csv", out / "report.md"
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*Result.__dataclass_fields__, "gpu"])
        w.writeheader()
        for r in results:
            w.writerow({**asdict(r), "gpu": env.get("gpu", "none")})
    lines = [f"# GPU check: {env.get('gpu', 'no GPU')}", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in env.items() if k != "gpu")
             + f". Took {seconds:.0f} s.", "",
             "| part | figure | value | target | met | command |", "|---|---|---:|---|---|---|"]  # fmt: skip
    for r in results:
        met = "" if r.met is None else ("yes" if r.met else "**NO**")
        value = f"{r.value:.3g}" if isinstance(r.value, float) else str(r.value)
        lines.append(f"| {r.part} | {r.metric} | {value} {r.unit} | {r.target} | {met} | `{r.command}` |")
    md_path.write_text("\n".join(lines) + "\n")
    return md_path, csv_path


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        return 2
    import paged_lab  # noqa: F401  (before triton: decides compiled vs interpreted kernels)

    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)  # the parts write their logs there before the report
    env = environment()
    print(f"GPU check on {env['gpu']}: {', '.join(args.only)}")
    results: list[Result] = []
    runs = {"kernels": check_kernels, "bandwidth": check_bandwidth}
    loaded = None
    for part in args.only:
        t = time.perf_counter()
        try:
            if part in runs:
                results += runs[part](args)
            else:
                loaded = loaded or _load(args)
                results += (check_identity if part == "identity" else check_throughput)(args, loaded)
        except Exception as e:  # one part failing must not lose the others' figures
            results.append(Result(part, f"failed: {type(e).__name__}: {str(e)[:300]}", "error", met=False,
                                  command=_cmd(args, part)))  # fmt: skip
        print(f"{part}: {time.perf_counter() - t:.0f} s")
    md, csv_path = write_report(results, env, args.out, time.perf_counter() - start)
    print(md.read_text())
    print(f"wrote {md} and {csv_path}")
    return 0 if all(r.met is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
