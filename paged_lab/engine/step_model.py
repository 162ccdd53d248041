"""Predict the step time: bytes moved and FLOPs, against the machine's bandwidth and matmul speed.

One engine step reads every weight once (whatever the batch size), reads each scheduled sequence's
K and V (its context), and multiplies: about 2 FLOPs per weight per token, plus the attention's
4 x layers x heads x head_dim FLOPs per query token per context token. A step cannot be faster than
the slower of the two (the roofline):

    predicted = max(bytes / bandwidth, flops / matmul_flops)

``probe_machine`` measures the two rates in a fraction of a second: a large tensor copy and a square
matmul. That links notebook 01's bytes per token, notebook 06's bandwidth and notebook 07's step
times. What the model leaves out is what it misses: Python and kernel-launch overhead per layer
(it dominates small batches on a CPU), caches (small working sets run faster than the probe's), and
matmuls of skinny shapes that reach less than the square matmul's rate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from paged_lab._checks import check_int
from paged_lab.kv_math import ModelSpec, dtype_bytes


@dataclass(frozen=True)
class MachineProbe:
    """What ``probe_machine`` measured on ``device``."""

    device: str
    bandwidth: float  # bytes/s: a large copy (bytes read + bytes written) / its time
    matmul_flops: float  # FLOP/s: 2 n^3 / the time of an n x n matmul


def _best_seconds(fn, repeats: int, device: torch.device) -> float:
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best


def probe_machine(device: str | torch.device = "cpu", dtype=torch.float32, copy_mib: int = 128,
                  matmul_n: int = 1024, repeats: int = 5) -> MachineProbe:
    """Measure memory bandwidth (copy ``copy_mib`` MiB) and matmul throughput (``matmul_n``^2 square
    matrices), best of ``repeats`` after one warm-up each. Well under a second on a laptop CPU."""
    mib, n = check_int("copy_mib", copy_mib, minimum=1), check_int("matmul_n", matmul_n, minimum=16)
    repeats = check_int("repeats", repeats, minimum=1)
    dev = torch.device(device)
    src = torch.ones(mib * 2**20 // torch.empty((), dtype=dtype).element_size(), dtype=dtype, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: page the buffers in
    copy_s = _best_seconds(lambda: dst.copy_(src), repeats, dev)
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    a @ b
    mm_s = _best_seconds(lambda: a @ b, repeats, dev)
    return MachineProbe(str(dev), 2 * src.nbytes / copy_s, 2 * n**3 / mm_s)


@dataclass(frozen=True)
class StepCost:
    """What one step moves and computes."""

    weight_bytes: int  # every weight, read once per step
    kv_bytes: int  # K and V of every scheduled sequence's context
    flops: float

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes


def step_cost(spec: ModelSpec, num_tokens: int, context_tokens: int, dtype="float32") -> StepCost:
    """The bytes and FLOPs of a step computing ``num_tokens`` query tokens over ``context_tokens``
    tokens of context in all (the sum of the scheduled sequences' context lengths; for a decode step,
    each query token attends to its own sequence's context)."""
    num_tokens = check_int("num_tokens", num_tokens, minimum=1)
    context_tokens = check_int("context_tokens", context_tokens, minimum=0)
    nbytes = dtype_bytes(dtype)
    attn_flops = 4 * spec.num_layers * spec.num_heads * spec.head_dim * context_tokens  # QK^T and PV
    return StepCost(weight_bytes=spec.num_params * nbytes,
                    kv_bytes=context_tokens * spec.kv_bytes_per_token(dtype),
                    flops=2.0 * spec.num_params * num_tokens + attn_flops)


def predict_step_seconds(cost: StepCost, probe: MachineProbe) -> float:
    """The roofline: the slower of moving the bytes and doing the FLOPs."""
    return max(cost.bytes / probe.bandwidth, cost.flops / probe.matmul_flops)


def measure_decode_steps(llm, probe: MachineProbe, batch_sizes=(1, 4, 16), context_lens=(16, 128),
                         max_tokens: int = 6, rounds: int = 3, progress: bool = True) -> list[dict]:
    """Run ``llm`` on synthetic prompts for each (batch size, context length) and read its own step
    timeline: the median of its pure decode steps, beside the roofline's prediction for them.

    Each shape runs ``rounds`` times, the shapes taking turns (1, 4, 16, 1, 4, 16, ...). Why: when
    other work shares the machine for a few seconds, it then slows a step of every shape alike, and
    the comparison between shapes (is 8 sequences far from 8x one?) still holds. A progress bar counts
    the runs (``progress=False``: none)."""
    from statistics import median

    from tqdm.auto import tqdm

    from paged_lab.engine.params import SamplingParams

    sp = SamplingParams(temperature=0, max_tokens=check_int("max_tokens", max_tokens, minimum=2),
                        ignore_eos=True)
    shapes = [(ctx, bs) for ctx in context_lens for bs in batch_sizes]
    decodes: dict[tuple[int, int], list[dict]] = {shape: [] for shape in shapes}
    rounds = check_int("rounds", rounds, minimum=1)
    with tqdm(total=rounds * len(shapes), desc="decode steps", unit="run", disable=not progress) as bar:
        for _ in range(rounds):
            for ctx, bs in shapes:
                bar.set_postfix_str(f"{bs} seqs x {ctx} tokens")
                start = llm.scheduler.step_count  # (the timeline keeps the latest rows: select by step)
                # distinct prompts (no prefix-cache hits), token ids well inside any vocabulary
                llm.generate([{"prompt_token_ids": [1 + (7 * i + 13 * j) % 997 for j in range(ctx)]}
                              for i in range(bs)],
                             sp, use_tqdm=False)
                decodes[ctx, bs] += [t for t in llm.timeline
                                     if t["step"] > start and t["num_prefill"] == 0 and t["num_decode"] == bs]
                bar.update(1)
    rows = []
    for ctx, bs in shapes:
        steps = decodes[ctx, bs]
        per_run = len(steps) // rounds
        mid = steps[per_run // 2]  # the middle decode step of a run: its bytes and FLOPs
        cost = step_cost(llm.spec, mid["num_batched_tokens"], mid["num_context_tokens"], llm.dtype)
        rows.append({"batch_size": bs, "context_len": ctx, "measured_s": median(t["seconds"] for t in steps),
                     "predicted_s": predict_step_seconds(cost, probe), "bytes": cost.bytes,
                     "flops": cost.flops})
    return rows
