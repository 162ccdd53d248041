"""The quiz of notebook 08 · KV memory in today's models. The number answers are computed here by
``kv_math`` (the bytes an MLA model caches for a request in fp8, the blocks a sliding-window layer still
holds); the fp8 question takes section 2's measurement."""

from __future__ import annotations

from paged_lab import kv_math
from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.memory.layer_groups import KVCacheGroup
from paged_lab.memory.sliding_window import window_prefix_hit


def quiz(*, model: str, tokens: int, block_size: int, sliding_window: int, prompts: int,
         parted: int) -> Quiz:
    """``model``: section 1's MLA model; ``tokens``, ``block_size``, ``sliding_window``: a request and a
    sliding-window layer of section 3; ``prompts``, ``parted``: section 2's fp8 run (how many prompts,
    how many of them had a token that differed)."""
    spec = kv_math.get_spec(model)
    latent = spec.kv_lora_rank + spec.qk_rope_head_dim
    per_token = spec.kv_bytes_per_token("fp8")  # 1 byte per number
    request_bytes = per_token * tokens
    held = kv_math.window_blocks_held(tokens, block_size, sliding_window)
    all_blocks = kv_math.cdiv(tokens, block_size)
    window_only = sliding_window // block_size
    flips = ("Every K and V number is rounded to fp8, so the logits move a little, and where the two best "
             "logits are close the pick flips: " + (f"section 2 saw it in {parted} of {prompts} prompts."
                                                     if parted else "none of section 2's prompts flipped, "
                                                     "but nothing promises that on other text."))
    return Quiz([
        NumberQuestion(
            f"{spec.name} has {spec.num_layers} layers; each caches one latent of {spec.kv_lora_rank} + "
            f"{spec.qk_rope_head_dim} numbers per token. With an fp8 cache (1 byte per number), how many "
            f"bytes of KV cache does a request of {tokens:,} tokens hold?",
            answer=request_bytes, source=kv_math.ModelSpec.kv_bytes_per_token,
            explanation=f"{spec.num_layers} × {latent} × 1 byte = {per_token:,} per token, × {tokens:,} "
                        f"tokens = {request_bytes:,}: MLA stores the latent and nothing else, no separate K "
                        "and V, no per-head vectors; fp8 halves bf16's bytes.",
            too_low="Count every layer, and both parts of the latent (the compressed vector and the "
                    "position part), at 1 byte each in fp8, for every token of the request.",
            too_high="MLA keeps one latent per layer and token: there is no K and V pair to count twice, "
                     "no KV heads to multiply by, and fp8 takes 1 byte per number, not bf16's 2.",
            mistakes=distinct_mistakes(request_bytes, [
                (2 * request_bytes, "That is twice the answer: either the latent counted as a K and a V "
                                    "(MLA's page has no V: vLLM's MLAAttentionSpec sets head_size_v = 0) "
                                    "or 2 bytes per number, bf16's size, where fp8 takes 1."),
                (per_token, "That is one token's bytes; the request holds that for each of its tokens."),
                (spec.num_layers * spec.kv_lora_rank * tokens, "That leaves out the position (RoPE) part "
                                                               "that is cached beside the compressed "
                                                               "vector."),
            ]),
        ),
        NumberQuestion(
            f"A request has {tokens:,} computed tokens in blocks of {block_size}. How many blocks does one "
            f"layer with a sliding window of {sliding_window} still hold, as vLLM's SlidingWindowManager "
            "counts it?",
            answer=held, source=kv_math.window_blocks_held,
            explanation=f"{tokens:,} − {sliding_window} + 1 = {tokens - sliding_window + 1} tokens are out "
                        f"of the sliding window; {(tokens - sliding_window + 1) // block_size} whole blocks "
                        f"lie among them and go back, so {all_blocks} − "
                        f"{(tokens - sliding_window + 1) // block_size} = {held} stay.",
            too_low="The tokens still read do not start on a block boundary: the block that holds the "
                    "oldest of them is kept whole.",
            too_high="Only blocks that overlap the last tokens are kept; every block wholly before them "
                     "is freed.",
            mistakes=distinct_mistakes(held, [
                (window_only, "The sliding window is that many blocks long, but it seldom starts on a "
                              "block boundary: one more block is partly inside it."),
                (all_blocks, "That is what a full-attention layer holds: every block of the request."),
            ]),
        ),
        Question(
            f"An fp8 KV cache instead of bf16: what stays the same? (Section 2: {parted} of {prompts} "
            "prompts had a greedy token that differed.)",
            [Choice("The tokens greedy decoding picks", flips),
             Choice("The weights and their memory",
                    "The KV cache dtype is only the cache's: the weights keep their own format, so the "
                    "memory freed goes to KV blocks alone (quantizing weights is another lever)."),
             Choice("The bytes of one block",
                    "A block holds the same tokens in half the bytes: vLLM's page_size_bytes takes the "
                    "cache dtype's size, 1 byte for fp8."),
             Choice("The number of requests that fit",
                    "Each request needs half the bytes, so about twice as many fit in the memory the "
                    "weights leave.")],
            answer=1,
        ),
        Question(
            "In vLLM V1, a request's oldest block of a sliding-window layer falls wholly out of the window. "
            "What happens to it?",
            [Choice("It stays until the request finishes, then it is freed with the rest",
                    "That is a full-attention layer's rule. A sliding-window layer never reads those "
                    "tokens again, so vLLM's SlidingWindowManager frees the block while the request runs."),
             Choice("Its tokens are copied into a smaller block that holds only the window",
                    "Nothing is copied: the sliding window moves over blocks already written; "
                    "remove_skipped_blocks frees whole blocks and keeps the others where they are."),
             Choice("It goes back to the pool; its table entry becomes the null block",
                    "remove_skipped_blocks frees every block wholly before the window and writes the "
                    "pool's null block in its place, so the table keeps its positions and any request "
                    "may take the freed block."),
             Choice("The request writes its next tokens over it in place, in a ring",
                    "A ring would keep the block for this request alone; the paged manager instead gives "
                    "it back to the shared pool and starts the request's new blocks where any are free.")],
            answer=2,
            design="V1",
        ),
        _window_hit_question(block_size=16, sliding_window=48, hit_blocks=10),
    ])


def _window_hit_question(*, block_size: int, sliding_window: int, hit_blocks: int) -> Question:
    """Which blocks a sliding-window layer's prefix hit must find: the ``blocks_for_hit`` that end at the
    hit, as the real manager's search (``memory.sliding_window.window_prefix_hit``) returns them."""
    needed = KVCacheGroup("sliding", 1, sliding_window=sliding_window).blocks_for_hit(block_size)
    first, end = window_prefix_hit([True] * hit_blocks, needed)
    last = hit_blocks - 1
    return Question(
        f"A twin's prompt hits blocks 0–{last} (blocks of {block_size} tokens) in a full-attention layer. "
        f"Which blocks must a layer with a sliding window of {sliding_window} find in the cache for the "
        "same hit?",
        [Choice(f"All of them, 0–{last}, as the full-attention layer does",
                f"The first token after the hit reads only the {sliding_window - 1} tokens before it; "
                "older blocks are never read again, so the hit does not need them."),
         Choice(f"Only block {last}, the one the hit ends in",
                f"{sliding_window - 1} tokens span more than one block of {block_size}: the hit needs "
                f"cdiv({sliding_window - 1}, {block_size}) = {needed} blocks."),
         Choice(f"Blocks 0–{needed - 1}, the first sliding window's worth",
                "The blocks the next token reads are the ones just before the hit's end, not the "
                "prompt's first ones: vLLM searches a sliding-window hit from the right."),
         Choice(f"Blocks {first}–{end - 1}, just before the hit's end",
                f"The next token reads the {sliding_window - 1} tokens before it, which lie in those "
                f"{needed} blocks; the earlier ones may be gone (vLLM's sliding-window group does not even "
                "cache them by default) and the table holds the null block there.")],
        answer=3,
        design="V1",
    )
