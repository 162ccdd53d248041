"""Paged attention kernels: read K and V through the block table.

    from paged_lab.kernels import store_kv, paged_attention_decode, paged_attention_prefill, paged_attention

- :mod:`~paged_lab.kernels.reference`: the readable torch truth (gather through the table, then attention);
- :mod:`~paged_lab.kernels.torch_paged`: the same math vectorized over sequences (``backend="torch"``);
- :mod:`~paged_lab.kernels.cpu`: the CPU fast path, a room of its own: decode and prefill in C (AVX-512,
  built on first use; ``"cpu"``), and the C layer ops and packed matmuls the engine's forward takes from it;
- :mod:`~paged_lab.kernels.triton_paged`: Triton kernels (store_kv, decode with split-KV, prefill;
  ``"triton"``), their supported sizes and launch sizing per GPU target, and a check against the
  reference (``python -m paged_lab.kernels.triton_paged``);
- :mod:`~paged_lab.kernels.checks`: the argument checks every entry point runs before any launch;
- :mod:`~paged_lab.kernels.dispatch`: the backend table (every backend has the reference's functions
  and signatures), the choice among its backends (``backend="auto" | "triton" | "cpu" | "torch" |
  "reference"``, :func:`choose_backend`), one call path and its one fallback rule;
- :mod:`~paged_lab.kernels.stepwise` and :mod:`~paged_lab.kernels.tradeoff`: notebook 06's steps in
  torch (online softmax, log-sum-exp merge) and the block-size trade-off, the numbers its figures draw.

Triton is imported lazily, on the first ``backend="triton"`` call (or ``"auto"`` on CUDA). On a machine
without CUDA, importing this package sets ``TRITON_INTERPRET=1`` (unless already set) so that the
same kernels run under Triton's interpreter.
"""

from paged_lab.kernels._interpret import default_interpreter_env

default_interpreter_env()

from paged_lab.kernels import reference, torch_paged  # noqa: E402
from paged_lab.kernels.dispatch import (  # noqa: E402
    BACKEND_TABLE,
    BACKENDS,
    ChosenBackend,
    KernelStats,
    choose_backend,
    paged_attention,
    paged_attention_decode,
    paged_attention_prefill,
    resolve_backend,
    store_and_decode,
    store_kv,
    uses_plan,
)

__all__ = [
    "BACKEND_TABLE",
    "BACKENDS",
    "ChosenBackend",
    "KernelStats",
    "choose_backend",
    "paged_attention",
    "paged_attention_decode",
    "paged_attention_prefill",
    "reference",
    "resolve_backend",
    "store_and_decode",
    "store_kv",
    "torch_paged",
    "uses_plan",
]
