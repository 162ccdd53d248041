"""More than one worker: tensor parallelism (``tp``), the processes and their group (``workers``), KV that
moves from a prefill worker to a decode worker (``handoff``), and the sizes that go with them (``sizing``).

The engine reaches this room through three names: ``check_args`` and ``rank_spec`` (what one rank's pool
holds) and ``start_tensor_parallel`` (rank 0's runner, with the other ranks started)."""

from __future__ import annotations

from paged_lab._checks import check_int
from paged_lab.kv_math import ModelSpec


def check_args(tensor_parallel_size, enforce_eager: bool, parallel_sampling: str) -> int:
    """``tensor_parallel_size``, checked against the options a tensor-parallel engine does not take."""
    tp = check_int("tensor_parallel_size", tensor_parallel_size, minimum=1)
    if tp > 1 and not enforce_eager:
        raise ValueError("tensor_parallel_size > 1 runs eagerly: pass enforce_eager=True (the compiled "
                         "decode graph holds the whole model)")
    if tp > 1 and parallel_sampling != "prefix":
        raise ValueError("tensor_parallel_size > 1 takes parallel_sampling='prefix' (vLLM V1's): 'fork' "
                         "copies blocks on write, which the workers' pools are not sent")
    return tp


def rank_spec(spec: ModelSpec, tp: int) -> ModelSpec:
    """The model as one rank's KV pool sees it (``tp.rank_spec``)."""
    from paged_lab.engine.dist.tp import rank_spec as _rank_spec

    return _rank_spec(spec, tp)


def start_tensor_parallel(full, tp: int, kv, cache_dtype: str, backend: str, hybrid: bool):
    """Rank 0's runner over ``tp`` ranks (``tp.start``), after the model's sizes are checked."""
    from paged_lab.engine.dist import tp as _tp

    if hybrid:
        raise ValueError("tensor_parallel_size > 1 does not take a model with sliding-window layer groups")
    intermediate = full.layers[0].gate_up.weights[0].shape[0]  # the gate's rows
    _tp.check_tensor_parallel(tp, full.num_heads, full.num_kv_heads, intermediate)
    return _tp.start(full, tp, kv, cache_dtype, backend)
