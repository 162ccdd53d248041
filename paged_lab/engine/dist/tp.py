"""Tensor parallelism on the CPU: N ranks, each holding a slice of every layer and its own KV heads.

``LLM(..., tensor_parallel_size=N)`` splits the model as vLLM does (``vllm/model_executor/layers/linear.py``):

- q/k/v and gate/up are **column parallel** (``QKVParallelLinear``, ``MergedColumnParallelLinear``): rank r
  computes its own output columns, i.e. its own attention heads and its own slice of the MLP;
- o and down are **row parallel** (``RowParallelLinear``): rank r multiplies its slice of the inputs, and
  one all-reduce sums the N partial results, so after attention and after the MLP every rank holds the
  whole hidden state again. Two all-reduces per layer, nothing else is exchanged.

Each rank's attention reads only its own KV heads, so each rank's KV pool holds only those heads
(``max(1, num_kv_heads // N)`` of them: a model with fewer KV heads than ranks replicates them, as vLLM's
``QKVParallelLinear`` does). There is **one** Scheduler and **one** BlockManager, in rank 0 (the caller's
process): it schedules a step and sends the step's batch, block tables included, to every worker; every
rank writes its heads' K and V into blocks with the same ids. The embedding and the LM head are
replicated (vLLM splits the vocabulary too, ``VocabParallelEmbedding``/``ParallelLMHead``; here rank 0
alone computes the logits).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch
import torch.distributed as dist

from paged_lab.engine.dist.workers import WorkerError, Workers
from paged_lab.engine.attention import PagedAttention
from paged_lab.engine.kv_cache import KVCache
from paged_lab.engine.llama import LayerWeights, Linear, PagedLlama
from paged_lab.kv_math import ModelSpec

CONFIG_FIELDS = ("num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim", "rms_norm_eps",
                 "max_position_embeddings", "hidden_act", "rope_parameters", "rope_scaling", "rope_theta")


def rank_spec(spec: ModelSpec, tp: int) -> ModelSpec:
    """The model as one rank's KV pool sees it: ``max(1, num_kv_heads // tp)`` KV heads (vLLM's
    ``ModelConfig.get_num_kv_heads``, ``vllm/config/model.py``)."""
    return spec if tp == 1 else dataclasses.replace(spec, num_kv_heads=max(1, spec.num_kv_heads // tp))


def check_tensor_parallel(tp: int, nq: int, nkv: int, intermediate_size: int) -> None:
    """The sizes a split must divide, as vLLM requires them (``divide()`` in ``QKVParallelLinear``)."""
    if nq % tp:
        raise ValueError(f"tensor_parallel_size={tp} must divide the {nq} attention heads")
    if nkv % tp and tp % nkv:
        raise ValueError(f"tensor_parallel_size={tp} must divide the {nkv} KV heads or be a multiple of it")
    if intermediate_size % tp:
        raise ValueError(f"tensor_parallel_size={tp} must divide intermediate_size={intermediate_size}")


def head_ranges(num_heads: int, num_kv_heads: int, tp: int, rank: int) -> tuple[range, range]:
    """(query heads, KV heads) of ``rank``. Fewer KV heads than ranks: each is on tp // num_kv_heads ranks."""
    q = num_heads // tp
    if num_kv_heads >= tp:
        kv = num_kv_heads // tp
        return range(rank * q, (rank + 1) * q), range(rank * kv, (rank + 1) * kv)
    replicas = tp // num_kv_heads
    return range(rank * q, (rank + 1) * q), range(rank // replicas, rank // replicas + 1)


class RowParallelLinear:
    """A row-parallel projection: this rank's slice of the inputs times its slice of the weight, then one
    all-reduce (sum) over the group, so every rank gets the full output (vLLM's ``RowParallelLinear``
    with ``reduce_results=True``; its bias is added by rank 0 only, so it is added once)."""

    def __init__(self, linear: Linear, group):
        self.linear, self.group = linear, group

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)  # [num_tokens, hidden]: this rank's partial sum
        dist.all_reduce(y, group=self.group)
        return y


def shard_layer(w: LayerWeights, heads: tuple[range, range], hd: int, tp: int, rank: int) -> dict:
    """Rank ``rank``'s slices of one layer's weights (contiguous tensors): rows of q/k/v/gate/up (columns
    of the output), columns of o/down (rows of the input)."""
    (q, k, v), (qb, kb, vb) = w.qkv.weights, w.qkv.biases
    (gate, up), down = w.gate_up.weights, w.down.weights[0]
    qh, kvh = heads
    qs, ks = slice(qh.start * hd, qh.stop * hd), slice(kvh.start * hd, kvh.stop * hd)
    inter = gate.shape[0] // tp
    ms = slice(rank * inter, (rank + 1) * inter)

    def rows(t, s):
        return None if t is None else t[s].contiguous()

    o_bias = w.o.biases[0] if rank == 0 else None
    return {"input_norm": w.input_norm, "post_norm": w.post_norm,
            "qkv": ([rows(q, qs), rows(k, ks), rows(v, ks)], [rows(qb, qs), rows(kb, ks), rows(vb, ks)]),
            "o": ([w.o.weights[0][:, qs].contiguous()], [o_bias]),
            "gate_up": ([rows(gate, ms), rows(up, ms)], [None, None]),
            "down": ([down[:, ms].contiguous()], [w.down.biases[0] if rank == 0 else None])}


def shard_model(full: PagedLlama, tp: int, rank: int) -> dict:
    """Everything rank ``rank`` needs to build its runner (tensors and a plain config, pickled to it)."""
    heads = head_ranges(full.num_heads, full.num_kv_heads, tp, rank)
    cfg = {f: getattr(full.config, f, None) for f in CONFIG_FIELDS}
    cfg.update(num_attention_heads=len(heads[0]), num_key_value_heads=len(heads[1]), head_dim=full.head_dim)
    return {"config": cfg, "embed": full.embed, "final_norm": full.final_norm,
            "layers": [shard_layer(w, heads, full.head_dim, tp, rank) for w in full.layers]}


def build_runner(shard: dict, group, lm_head: Linear | None = None, cls=PagedLlama) -> PagedLlama:
    """A runner over one rank's shard: a ``PagedLlama`` that sees only its heads, whose o and down
    projections all-reduce over ``group`` (None: a whole model, nothing to reduce)."""

    def row(parts):
        return Linear(*parts) if group is None else RowParallelLinear(Linear(*parts), group)

    layers = [LayerWeights(input_norm=s["input_norm"], qkv=Linear(*s["qkv"]), o=row(s["o"]),
                           post_norm=s["post_norm"], gate_up=Linear(*s["gate_up"]), down=row(s["down"]))
              for s in shard["layers"]]
    head = lm_head if lm_head is not None else Linear([shard["embed"]], [None])  # (workers: no logits)
    return cls(SimpleNamespace(**shard["config"]), shard["embed"], layers, shard["final_norm"], head)


class DriverRunner(PagedLlama):
    """Rank 0's runner: before its own forward it sends the step (the batch, block tables and slot
    mapping included) to every worker, which runs the same forward over its shard; the all-reduces keep
    the ranks in step. ``workers``: the other ranks (``dist.workers.Workers``)."""

    workers: Workers

    def forward(self, input_ids, positions, kv_caches, meta, attention=None, kv_scales=None):
        self.workers.broadcast("step", input_ids, positions, meta)
        try:
            return super().forward(input_ids, positions, kv_caches, meta, attention, kv_scales)
        except RuntimeError as err:  # a peer died or failed mid-collective: stop them all, say which
            if isinstance(err, WorkerError):
                raise
            raise self.workers.fail(self.workers.cause(f"a collective failed: {err}")) from err

    def pool_info(self, kv: KVCache) -> list[dict]:
        """Every rank's KV pool: rank, its KV heads, shape and bytes (rank 0's is ``kv``)."""
        mine = {"rank": 0, "shape": tuple(kv.data.shape), "bytes": kv.bytes, "kv_heads": list(self.kv_heads)}
        return [mine, *self.workers.call("pool_info")]


def serve(rank: int, group, shard: dict, pool: dict, kv_heads: list):
    """A worker's handler (``workers.worker_main``): build the runner and the KV pool, then run steps."""
    runner = build_runner(shard, group)
    spec = SimpleNamespace(num_layers=len(shard["layers"]), num_kv_heads=len(kv_heads),
                           head_dim=shard["config"]["head_dim"])
    kv = KVCache(spec, pool["num_blocks"], pool["block_size"], pool["dtype"])
    attend = PagedAttention(pool["backend"], like=kv.layers[0], num_heads=runner.num_heads)

    def handle(op, *payload):
        if op == "step":
            input_ids, positions, meta = payload
            runner.forward(input_ids, positions, kv.layers, meta, attention=attend,
                           kv_scales=kv.scales if kv.quantized else None)
            return None
        if op == "pool_info":
            return {"rank": rank, "shape": tuple(kv.data.shape), "bytes": kv.bytes, "kv_heads": kv_heads}
        raise ValueError(f"unknown op {op!r}")

    return handle


def start(full: PagedLlama, tp: int, kv: KVCache, cache_dtype: str, backend: str) -> DriverRunner:
    """Split ``full`` over ``tp`` ranks: start ranks 1..tp-1 (each with its shard and a pool like ``kv``,
    which is rank 0's: same blocks, ``cache_dtype``) and return rank 0's runner."""
    pool = {"num_blocks": kv.num_blocks, "block_size": kv.block_size, "dtype": cache_dtype,
            "backend": backend}
    shards = [shard_model(full, tp, r) for r in range(tp)]
    heads = [list(head_ranges(full.num_heads, full.num_kv_heads, tp, r)[1]) for r in range(tp)]
    workers = Workers.start(serve, tp, rank_args=lambda r: (shards[r], pool, heads[r]))
    runner = build_runner(shards[0], workers.group, lm_head=full.lm_head, cls=DriverRunner)
    runner.workers, runner.kv_heads = workers, heads[0]
    return runner

