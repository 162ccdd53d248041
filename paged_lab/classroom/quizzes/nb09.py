"""The quiz of notebook 09 · KV beyond one GPU. The number answers are computed here by ``kv_math`` (one
token's KV bytes on one GPU under tensor parallelism, the bytes a prefill worker sends for a prompt)."""

from __future__ import annotations

from paged_lab import kv_math
from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes


def quiz(*, model: str, tp: int, handoff_model: str, prompt_len: int, block_size: int) -> Quiz:
    """``model`` at ``tp`` GPUs: section 1's rule past the KV heads; ``handoff_model``, ``prompt_len``,
    ``block_size``: a prompt that section 4's prefill worker hands over."""
    spec = kv_math.get_spec(model)
    per_gpu = spec.kv_bytes_per_token("bfloat16", tp)
    split = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2 // tp  # as if heads split further
    moved_spec = kv_math.get_spec(handoff_model)
    per_token = moved_spec.kv_bytes_per_token("bfloat16")
    full = prompt_len // block_size
    moved = full * block_size * per_token
    return Quiz([
        NumberQuestion(
            f"{spec.name} has {spec.num_layers} layers and {spec.num_kv_heads} KV heads of {spec.head_dim} "
            f"numbers. Split over {tp} GPUs with tensor parallelism, how many bytes of bf16 KV cache does "
            "one token cost on each GPU, as vLLM counts it?",
            answer=per_gpu, source=kv_math.ModelSpec.kv_bytes_per_layer_token,
            explanation=f"{spec.num_kv_heads} KV heads cannot be split over {tp} GPUs: each GPU keeps "
                        f"max(1, {spec.num_kv_heads} // {tp}) = 1, each head copied onto "
                        f"{tp // spec.num_kv_heads} GPUs. 2 × {spec.num_layers} × 1 × {spec.head_dim} × 2 B "
                        f"= {per_gpu:,}, the same as at {spec.num_kv_heads} GPUs.",
            too_low="A GPU cannot hold part of a KV head: once the GPUs outnumber the KV heads, each GPU "
                    "keeps one whole head (a copy).",
            too_high="Each GPU keeps only the KV heads its own query heads read, not all of them.",
            mistakes=distinct_mistakes(per_gpu, [
                (split, "That splits the KV heads further than there are heads: past one head per GPU, "
                        "vLLM copies heads (get_num_kv_heads: max(1, num_kv_heads // tp))."),
                (spec.kv_bytes_per_token("bfloat16"), "That is the whole model's bytes per token: each GPU "
                                                      "keeps only its share of the KV heads."),
            ]),
        ),
        NumberQuestion(
            f"A prefill worker hands a {prompt_len:,}-token prompt of {moved_spec.name} "
            f"({per_token:,} bytes of bf16 KV per token) to a decode worker, blocks of {block_size}. Only "
            "full blocks travel. How many bytes does it send?",
            answer=moved, source=kv_math.ModelSpec.kv_bytes_per_token,
            explanation=f"{prompt_len:,} // {block_size} = {full} full blocks, {full * block_size:,} tokens, "
                        f"× {per_token:,} B = {moved:,}; the last {prompt_len - full * block_size} tokens "
                        "are computed again by the decode side.",
            too_low="Every layer's K and V of each token in a full block travel: the whole model's bytes "
                    "per token, not one GPU's or one layer's.",
            too_high="Only full blocks are sent: the tokens of the last, partly filled block stay behind.",
            mistakes=distinct_mistakes(moved, [
                (prompt_len * per_token, "That sends every token; the partly filled last block is not "
                                         "sent, its tokens are recomputed."),
                (full * per_token, "That counts blocks, not tokens: each block holds "
                                   f"{block_size} tokens."),
            ]),
        ),
        Question(
            "A tensor-parallel engine runs on 3 ranks. Rank 0's scheduler gives a request block 7. What "
            "happens to block 7 on ranks 1 and 2?",
            [Choice("Nothing: only rank 0 holds that request's blocks",
                    "Every rank runs every request: each computes its own attention heads for every token, "
                    "so each needs its heads' K and V of every block."),
             Choice("Each rank allocates its own block for it and keeps a table of its own",
                    "There is one block table, kept by rank 0 and sent with every step; a second table "
                    "per rank would be a second scheduler's work, and they could disagree."),
             Choice("Every rank writes its own heads' K and V into its block 7",
                    "One table for all: each rank's pool has the same block ids, holding only its own KV "
                    "heads, so block 7 is a third of the bytes on each of the three ranks."),
             Choice("Rank 0 copies its block 7 to ranks 1 and 2 after each step",
                    "Nothing is copied between the ranks' pools: each rank computes its heads' K and V "
                    "itself; only the two all-reduces per layer cross between them.")],
            answer=2,
        ),
        Question(
            "DeepSeek-V3's KV bytes per token on each GPU do not fall from 1 to 8 GPUs of tensor "
            "parallelism. Why?",
            [Choice("Its weights take the memory the KV cache would use",
                    "The weights' share falls with more GPUs; the question is what one token's KV costs "
                    "on each GPU, and that does not depend on the weights."),
             Choice("Its latent is not split by heads: every GPU holds all of it",
                    "MLA caches one latent per layer and token with no heads to divide; vLLM gives every "
                    "rank the whole latent. Decode context parallelism splits the tokens instead."),
             Choice("Its 128 KV heads are copied onto every GPU",
                    "It has no per-head K and V in its cache at all: it caches one latent per layer, "
                    "which every GPU holds whole."),
             Choice("vLLM does not run DeepSeek-V3 with tensor parallelism",
                    "It does; the attention's query heads are split, only the cached latent is not.")],
            answer=1,
            design="V1",
        ),
    ])
