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
matmuls of skinny shapes that reach less than the square matmul's rate. ``tools.decode_steps``
measures a real engine's decode steps beside this prediction.

(The simulator's ``sim.timing.StepTime`` is not this model: a fixed illustrative cost per step and per
token, so that notebook 05's latency curves read in seconds; it does not depend on a model or a machine.)
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
    matrices), best of ``repeats`` after one warm-up each: ``2 x (repeats + 1)`` operations in all."""
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
