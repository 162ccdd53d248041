"""The quiz of notebook 07 · The paged engine on a real model. The numbers are the engine's runs; the
prefix-cache answer is computed here by a BlockManager with the engine's block size."""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.kv_math import cdiv
from paged_lab.memory import BlockManager


def quiz(*, common: int, prompt_lens: list[int], cache_block_size: int, preemptions: int, n: int,
         robot_len: int, block_size: int, copies: int, work_tokens: list[int], batch: int, static_slots: int,
         useful: int) -> Quiz:
    """``common``: the prompt tokens the museum visitors share; ``prompt_lens``: their prompt lengths
    (section 3, blocks of ``cache_block_size``); ``preemptions``: section 4's; ``n``, ``robot_len``,
    ``block_size``, ``copies``: section 1's parallel sampling; ``work_tokens``: the benchmark's
    ``max_tokens`` per request, in batches of ``batch``; ``static_slots`` for ``useful`` tokens."""
    bs = cache_block_size
    cache = BlockManager(num_blocks=2 * -(-sum(prompt_lens[:2]) // bs), block_size=bs,
                         enable_prefix_caching=True)
    shared = list(range(common))
    cache.allocate("first", shared + [10_000 + i for i in range(prompt_lens[0] - common)])
    cache.allocate("later", shared + [20_000 + i for i in range(prompt_lens[1] - common)])
    hit = cache.num_cached_tokens("later")
    same = [max(work_tokens)] * len(work_tokens)
    same_slots = sum(batch * max(same[i:i + batch]) for i in range(0, len(same), batch))

    return Quiz([
        NumberQuestion(
            f"The museum visitors' prompts share their first {common} tokens (the system prompt inside the "
            f"chat template), and the engine uses blocks of {bs}. How many prompt tokens does each later "
            "visitor read from the cache?",
            answer=hit, source=BlockManager.num_cached_tokens,
            explanation=f"Only whole blocks are hashed and shared: {common} // {bs} × {bs} = {hit}. The "
                        f"other {common - hit} shared tokens sit in a block that also holds the visitor's "
                        "own question, so each visitor computes them.",
            too_low=f"Every full block of the shared {common} tokens is found by its hash: count how many "
                    f"whole blocks of {bs} they fill.",
            too_high=f"Only full blocks are cached, and a block is full only if all {bs} of its tokens are "
                     "shared.",
            mistakes=distinct_mistakes(hit, [
                (common, f"All {common} are shared, but only whole blocks are hashed: the block that holds "
                         "the last shared tokens also holds the visitor's own question, so it is computed."),
                (common - 1, "The last prompt token is always computed, but that is the visitor's own last "
                             "token, not one of the shared ones. What counts here is whole blocks."),
                (cdiv(common, bs) * bs, "That rounds up: the last block the visitors share is only partly "
                                        "shared, and a partly shared block is not reused."),
                (0, "The first visitor computes everything; the later ones find its full "
                    "blocks by their hash."),
            ]),
        ),
        Question(
            f"Under memory pressure the engine preempted {preemptions} times (prefix caching off). Why must "
            "a preempted request recompute its generated tokens too, not only its prompt?",
            [Choice("Only prompt blocks can ever be freed",
                    "Every block a request holds is freed when it is preempted or finishes, the blocks of "
                    "its generated tokens included: that is exactly why those must be computed again."),
             Choice("The sampler must draw its tokens again",
                    "The tokens are not drawn again: the engine keeps the ids it generated and computes only "
                    "their K and V again. That is why the output is identical to a roomy pool's."),
             Choice("Preemption frees all its blocks, the output tokens' K and V included",
                    "The next token attends to every earlier one, so their K and V are prefilled again, from "
                    "the token ids the engine kept: that is why the tokens stay identical. vLLM V1 only ever "
                    "recomputes (V0 could also swap to CPU memory), and with prefix caching on, a preempted "
                    "request finds its own freed full blocks again, which makes recompute cheap."),
             Choice("The model's weights are moved out to make room for the other requests' K and V",
                    "The weights stay where they are for the whole run: preemption frees only the request's "
                    "KV blocks. Those blocks held its generated tokens' K and V too.")],
            answer=2,
            design="V0+V1",
        ),
        Question(
            f"With n = {n} and the paper's fork (parallel_sampling=\"fork\"), the engine prefills the "
            f"{robot_len}-token prompt once and forks. When is a block copied?",
            [Choice("When a child first writes into the shared, partly filled last block",
                    f"{robot_len} tokens in blocks of {block_size} leave the last block partly filled; in a "
                    f"fork run the first {n - 1} samples to write into it copy it and the last writes in "
                    f"place ({copies} copies counted in section 1). Full blocks stay shared. vLLM V1 does "
                    "not fork: it runs n requests sharing the prompt's full blocks through prefix caching."),
             Choice("At the fork: every child copies all the prompt's blocks",
                    "A fork copies no block: each child gets a copy of the block table, and every shared "
                    "block's refcount goes up. A copy waits for a write into a shared block."),
             Choice("Never: the children only read the prompt, and reading shares without copying",
                    "Reading shares, but the samples also write: each one's first token goes into the "
                    f"prompt's last block, partly filled and shared, so section 1 counted {copies} copies.")],
            answer=0,
            design="V0",
        ),
        Question(
            f"Static batching computed {static_slots} token slots for {useful} useful tokens, counting "
            "output slots as the cell above does (every request runs to its max_tokens). If all "
            f"{len(work_tokens)} requests asked for the same number of tokens, how many output "
            "slots would it waste?",
            [Choice(f"{static_slots - useful}",
                    "That is the waste of this skewed workload, where a batch runs as long as its longest "
                    "member. With equal lengths every row finishes together, so nothing is padded."),
             Choice(f"{same_slots - sum(same)}",
                    "With equal lengths no batch waits for a longer member, so there are no padded rows to "
                    "reclaim; continuous batching's gain comes from the skew: a few long answers holding a "
                    "whole batch hostage. (A real static batch wastes elsewhere too: prompts are padded to "
                    "the batch's longest, and a row that stops at EOS keeps computing until "
                    "its batch ends.)"),
             Choice(f"{len(work_tokens) // batch * (batch - 1)}",
                    "That counts rows, every row but the longest of each batch, and a row wastes slots only "
                    "while it waits for a longer one. With equal lengths every row is the "
                    "longest, so none waits.")],
            answer=1,
        ),
    ])
