"""KV that moves: a prefill worker computes a prompt's KV blocks, a decode engine receives and decodes.

Disaggregated serving runs prefills and decodes on different GPUs, so that a long prefill never stalls
the decodes of other requests. vLLM does it with a KV connector (``kv_transfer_config``; the
``NixlConnector`` registered in ``vllm/distributed/kv_transfer/kv_connector/factory.py``): the decode
instance's scheduler asks the connector how many prompt tokens it can load (``get_num_new_matched_tokens``
in ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py``: all of them), allocates its own
blocks for them, the connector reads the prefill instance's blocks into those, and once they have arrived
the scheduler caches them and computes only the prompt's last token again, to sample the next one
(``_update_waiting_for_remote_kv`` in ``vllm/v1/core/sched/scheduler.py``).

Here the same steps over ``torch.distributed`` (gloo's point-to-point ``send``/``recv`` on the
process group; NIXL moves GPU memory over RDMA or NVLink):

    worker = PrefillWorker.start(llm)                         # rank 1: the model's weights, its own pool
    outputs, moved = disaggregated_generate(llm, worker, prompts, params)

1. the prefill worker allocates blocks in its own BlockManager, runs the prompt through the model, and
   ``send``s the K and V of its full blocks (every layer) to rank 0;
2. the decode engine (rank 0, an ordinary ``LLM``) allocates its own blocks for the prompt, writes what it
   received into them through its block table and caches them (``BlockManager.cache_blocks``);
3. ``generate()`` then finds those blocks as a prefix hit and computes only what did not travel: the
   tokens of a last, partly filled block and the last prompt token. (vLLM loads every prompt token, the
   partial block's too, and recomputes only the last one; here only full blocks travel, because only they
   can enter the prefix cache: a simplification that costs the decode side at most ``block_size`` tokens.)

The handoff needs the decode engine's prefix caching on. Its blocks wait in the prefix cache until the
request is admitted; a pool so full that they are evicted first only costs a recompute, never a wrong token.
"""

from __future__ import annotations

import torch

from paged_lab.engine.dist import tp as tp_mod
from paged_lab.engine.dist.workers import WorkerError, Workers
from paged_lab.engine.attention import AttentionMetadata, PagedAttention
from paged_lab.engine.kv_cache import KVCache
from paged_lab.memory import BlockManager


def prefill_metadata(table: list[int], num_tokens: int, block_size: int) -> AttentionMetadata:
    """One whole-prompt prefill of ``num_tokens`` tokens into the blocks of ``table``."""
    slots = [table[i // block_size] * block_size + i % block_size for i in range(num_tokens)]
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots), block_tables=torch.tensor([table], dtype=torch.int32),
        context_lens=torch.tensor([num_tokens], dtype=torch.int32),
        query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32), is_decode=False,
        max_query_len=num_tokens, max_context_len=num_tokens)


def serve_prefill(rank: int, group, shard: dict, pool: dict):
    """The prefill worker's handler (``workers.worker_main``): a whole model, its own pool and manager."""
    runner = tp_mod.build_runner(shard, None)
    kv = KVCache(runner, pool["num_blocks"], pool["block_size"], pool["dtype"])
    attend = PagedAttention(pool["backend"], like=kv.layers[0], num_heads=runner.num_heads)
    bm = BlockManager(pool["num_blocks"], pool["block_size"], record_events=False)

    def handle(op, request_id, prompt_ids):
        if op != "prefill":
            raise ValueError(f"unknown op {op!r}")
        n, bs = len(prompt_ids), pool["block_size"]
        table = bm.allocate(request_id, prompt_ids)  # this worker's own blocks
        try:
            runner.forward(torch.tensor(prompt_ids), torch.arange(n), kv.layers,
                           prefill_metadata(table, n, bs), attention=attend)
            full = table[: n // bs]  # only full blocks travel
            blocks = kv.data[:, :, full].contiguous()  # [layers, 2 (K, V), full, bs, kv_heads, head_dim]
            if full:
                group.send([blocks], 0, 0).wait()  # (to rank 0, tag 0: the group's own send)
        finally:
            bm.free(request_id)
        return {"request_id": request_id, "prefill_blocks": table, "sent_blocks": len(full),
                "bytes": blocks.numel() * blocks.element_size()}

    return handle


class PrefillWorker:
    """Rank 1 of a two-rank group: a prefill-only copy of ``llm``'s model, with a pool of its own."""

    def __init__(self, workers: Workers, block_size: int):
        self.workers, self.block_size = workers, block_size

    @classmethod
    def start(cls, llm, num_kv_blocks: int = 256) -> PrefillWorker:
        """Spawn the prefill worker for decode engine ``llm`` (same model, block size and cache dtype)."""
        if not llm.enable_prefix_caching:
            raise ValueError("the decode engine needs enable_prefix_caching=True: the KV it receives "
                             "waits in its prefix cache until the request is admitted")
        pool = {"num_blocks": num_kv_blocks, "block_size": llm.block_size, "dtype": llm.cache_dtype,
                "backend": llm.attention_backend}
        shard = tp_mod.shard_model(llm.runner, 1, 0)
        return cls(Workers.start(serve_prefill, 2, rank_args=lambda r: (shard, pool)), llm.block_size)

    def prefill(self, request_id: str, prompt_ids: list[int], like: KVCache) -> tuple[torch.Tensor, dict]:
        """Have the worker prefill ``prompt_ids``; receive its full blocks' K and V (shaped as ``like``'s
        blocks) and its report."""
        self.workers.broadcast("prefill", request_id, list(prompt_ids))
        shape = (*like.data.shape[:2], len(prompt_ids) // self.block_size, *like.data.shape[3:])
        blocks = torch.empty(shape, dtype=like.data.dtype)
        try:
            if blocks.numel():  # (a prompt shorter than a block sends nothing)
                self.workers.group.recv([blocks], 1, 0).wait()  # (from rank 1, tag 0)
        except RuntimeError as err:
            if isinstance(err, WorkerError):
                raise
            raise self.workers.fail(self.workers.cause(f"receiving the KV failed: {err}")) from err
        (report,) = self.workers.collect("reply", timeout=60.0)
        return blocks, report

    def stop(self) -> None:
        self.workers.stop()


def receive(llm, request_id: str, prompt_ids: list[int], blocks: torch.Tensor) -> list[int]:
    """Write received blocks into ``llm``'s own: allocate a table for the prompt, copy ``blocks`` into its
    first full blocks (past any it already had cached), offer them to the prefix cache and let the table
    go, so that the request finds them as a hit. Returns the block ids written."""
    bm, bs = llm.block_manager, llm.block_size
    table = bm.allocate(request_id, prompt_ids, num_tokens_to_cache=0)  # this engine's own blocks
    have = bm.num_cached_tokens(request_id) // bs  # full blocks it already had cached
    written = table[have: blocks.shape[2]]
    llm.kv.data[:, :, torch.tensor(written, dtype=torch.long)] = blocks[:, :, have:]
    bm.cache_blocks(request_id, blocks.shape[2] * bs)
    bm.free(request_id)
    return written


def disaggregated_generate(llm, worker: PrefillWorker, prompts, sampling_params):
    """Prefill every prompt on ``worker``, hand its KV to ``llm`` and decode there. Returns (outputs, one
    report per prompt: the blocks each side used and the bytes that moved)."""
    prepared = llm.inputs.process(prompts, sampling_params)
    reports = []
    for i, (_, ids, _) in enumerate(prepared):
        blocks, report = worker.prefill(f"handoff-{i}", ids, llm.kv)
        report["decode_blocks"] = receive(llm, f"handoff-{i}", ids, blocks)
        reports.append(report)
    prompts = [{"prompt_token_ids": ids} for _, ids, _ in prepared]
    return llm.generate(prompts, [sp for _, _, sp in prepared], use_tqdm=False), reports
