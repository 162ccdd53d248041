"""The quiz of notebook 04 · Copy-on-write and prefix sharing. The numbers are the notebook's
BlockManager runs; the prefix-cache answers are computed here by a BlockManager of the same shape."""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.kv_math import cdiv
from paged_lab.memory import BlockManager


def quiz(*, block_size: int, forked_at: int, copies_at_boundary: int, n: int, prompt_len: int, v1_blocks: int,
         v1_hits: int, unshared_blocks: int, shifted_prompts: tuple[list[int], list[int]], twice_len: int,
         twice_block_size: int) -> Quiz:
    """``forked_at``/``copies_at_boundary``: the fork at a block boundary; ``n``, ``prompt_len``,
    ``v1_blocks``, ``v1_hits``, ``unshared_blocks``: V1's parallel sampling; ``shifted_prompts``: two
    prompts that differ in their first token only; ``twice_len``-token prompt sent twice, in blocks of
    ``twice_block_size``."""
    bs = block_size
    full_blocks = forked_at // bs
    a, b = shifted_prompts
    shifted = BlockManager(num_blocks=16, block_size=bs, enable_prefix_caching=True)
    shifted.allocate("a", a)
    shifted.allocate("b", b)
    shift_hits = shifted.num_cached_tokens("b")
    same_blocks = sum(a[i:i + bs] == b[i:i + bs] for i in range(0, min(len(a), len(b)) - bs + 1, bs))
    shared_len = len(a) - 1

    twice = BlockManager(num_blocks=16, block_size=twice_block_size, enable_prefix_caching=True)
    p = list(range(twice_len))
    twice.allocate("first", p)
    twice.allocate("again", p)
    reused = twice.num_cached_tokens("again")
    tbs = twice_block_size

    return Quiz([
        Question(
            f"A sequence forks at exactly {forked_at} tokens (block_size = {bs}), and both then generate. "
            "Does anyone copy a block?",
            [Choice("Yes: the first one to write copies the last shared block",
                    "A copy happens only when someone writes into a shared block, and nobody writes into a "
                    "full one: each side's next token opens a block of its own. Copies counted: "
                    f"{copies_at_boundary}."),
             Choice(f"Yes: the child copies all {full_blocks} blocks at the fork",
                    "A fork copies no block at all: the child gets a copy of the block table, and every "
                    "shared block's refcount goes up. A copy waits until someone writes "
                    "into a shared block."),
             Choice(f"No: its {full_blocks} blocks are full, so each next token opens a new block",
                    f"Copies counted: {copies_at_boundary}. Nobody writes into a full block, so nobody "
                    "writes into a shared one; copy-on-write only ever copies a shared, partly filled last "
                    "block. (vLLM V1 has no fork, and for n > 1 no copy-on-write.)")],
            answer=2,
            design="V0",
        ),
        Question(
            f"vLLM V1 runs n = {n} as {n} requests with the same {prompt_len}-token prompt, prefix caching "
            f"on, block_size = {bs}. How many blocks hold the {n} prompts?",
            [Choice(f"{v1_blocks}",
                    f"The prompt's {prompt_len // bs} full blocks are found by their hash and shared "
                    f"({v1_hits} tokens hit); each request computes its own partly filled last block, so "
                    f"{prompt_len // bs} + {n} = {v1_blocks} instead of {unshared_blocks}, with no fork and "
                    "no copy: the count V0's fork reached after its copies (section 1)."),
             Choice(f"{unshared_blocks}",
                    f"That is {n} × ⌈{prompt_len} / {bs}⌉, every request with blocks of its own. With prefix "
                    "caching on, the later requests find the prompt's full blocks by their "
                    "hash and share them."),
             Choice(f"{cdiv(prompt_len, bs)}",
                    f"That would be one copy for all {n}, the partly filled last block included. Only full "
                    "blocks are hashed and shared: each request fills a last block of its own, and writes "
                    "its own tokens after them.")],
            answer=0,
            design="V1",
        ),
        Question(
            f"Two prompts hold the same {shared_len} tokens, after a different first token. How many tokens "
            "does the second read from the cache?",
            [Choice(f"{shared_len}",
                    "The cache does not look for shared tokens anywhere in a prompt: it names whole blocks "
                    "from the start, each by a hash of its tokens and of everything before it. The first "
                    "token differs, so every block's name differs."),
             Choice(f"{shift_hits}",
                    "A block's hash chains its parent's hash, so the same tokens after a different first "
                    "token get different names. Rightly: their K and V differ, because they attended to "
                    "different tokens."),
             Choice(f"{same_blocks * bs}",
                    f"{same_blocks} blocks of the two prompts do hold the same tokens, {same_blocks * bs} of "
                    "them. But a block's name chains its parent's: the first blocks differ, so every block "
                    "after them gets a different name too.")],
            answer=1,
            design="V1",
        ),
        NumberQuestion(
            f"A {twice_len}-token prompt (exactly {twice_len // tbs} full blocks of {tbs}) is sent twice, "
            "prefix caching on. How many of its tokens does the second copy read from the cache?",
            answer=reused, source=BlockManager.num_cached_tokens,
            explanation=f"⌊({twice_len} − 1) / {tbs}⌋ × {tbs} = {reused}: the last prompt token is always "
                        "computed, because its output gives the first new token and a KV cache stores no "
                        "logits. So the whole block holding it is computed again.",
            too_low="The second copy finds every full block of the first by its hash, except one: think "
                    "about which token must always be computed.",
            too_high="Not every block is reused: the token whose output starts the answer is always "
                     "computed, and the cache reuses whole blocks only.",
            mistakes=distinct_mistakes(reused, [
                (twice_len, f"All {twice_len} are in the cache, but the last prompt token is always "
                            "computed: its output is what the first new token is sampled from. Its whole "
                            "block is computed again."),
                (twice_len - 1, "The last token is computed again, and the cache reuses whole blocks only: "
                                f"the block holding it, all {tbs} of its tokens, is computed again."),
                (0, "The second copy finds the first's blocks by their hash: every full block is reused "
                    "except the one that holds the last prompt token."),
            ]),
            design="V1",
        ),
    ])
