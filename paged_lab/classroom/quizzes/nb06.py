"""The quiz of notebook 06 · Paged attention in Triton. The numbers are the notebook's; the table
sizes come from ``paged_lab.kernels.tradeoff.block_size_cost``."""

from __future__ import annotations

import math

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.kernels.tradeoff import BlockSizeCost, block_size_cost
from paged_lab.kv_math import cdiv

# A long decode on a big GPU: one sequence, a GQA model with 8 KV heads, an H100-class 132 SMs.
LONG_BATCH, LONG_KV_HEADS, NUM_SMS = 1, 8, 132
BIGGER = 16  # the block size the number question asks about


def quiz(*, context_lens: list[int], block_size: int, num_heads: int, num_kv_heads: int,
         bytes_per_head_program: int, bytes_per_group_program: int, costs: dict[int, BlockSizeCost]) -> Quiz:
    """``context_lens`` and ``block_size``: section 2's sequences; ``bytes_per_*_program``: the K/V bytes
    sequence 0's programs read (step 4); ``costs``: section 3's ``block_size_cost`` per block size
    (1 and 16 among them)."""
    group = num_heads // num_kv_heads
    seq0 = context_lens[0]
    seq0_blocks = cdiv(seq0, block_size)
    programs = LONG_BATCH * LONG_KV_HEADS
    here = block_size_cost(context_lens, block_size)
    bigger = block_size_cost(context_lens, BIGGER)
    per_seq = [cdiv(n, BIGGER) for n in context_lens]
    floored = sum(n // BIGGER for n in context_lens)
    pooled = math.ceil(sum(context_lens) / BIGGER)

    return Quiz([
        Question(
            f"Sequence 0 has {seq0} tokens in {seq0_blocks} blocks of {block_size}. A kernel masks the "
            "scores of the empty slots in its last block but loads them unmasked. When can its "
            "output be wrong?",
            [Choice("Whenever an empty slot holds NaN or inf",
                    f"Its last block has {seq0_blocks * block_size - seq0} empty slots. Their weight is 0, "
                    "but 0 × NaN = NaN (and 0 × inf too), so the whole row becomes NaN (step 2 showed it). "
                    "Masking the loads, reading 0, keeps garbage out."),
             Choice("Never: a zero weight cancels whatever the slot holds",
                    "A zero weight cancels a finite number, not NaN: 0 × NaN = NaN, and one NaN in the "
                    "weighted sum makes the whole row NaN (step 2 showed it)."),
             Choice("Only when the last block is full",
                    "A full last block has no empty slot, so there is nothing to mask: it is the partly "
                    "filled one that holds slots no token wrote.")],
            answer=0,
        ),
        Question(
            f"SmolLM2 has {num_heads} query heads and {num_kv_heads} KV heads. Why does one program per "
            "(sequence, KV head) load fewer bytes of K and V than one per (sequence, query head)?",
            [Choice("It skips the empty slots of the last block",
                    "Both kinds of program mask the same empty slots, which saves the same few bytes either "
                    "way. The difference is how many times each block of K and V is loaded."),
             Choice("It loads K but not V",
                    "Every program needs both: K for the scores, V for the weighted sum. What it saves is "
                    "loading the same K and V again for every query head."),
             Choice("It reads the block table once instead of once per query head",
                    "The table is a few integers per block; the bytes that matter are the K and V vectors, "
                    "head_dim numbers per token and head. Those are what a group's program loads once."),
             Choice(f"Each block of K/V is loaded once for its {group} query heads",
                    f"For sequence 0 the programs load {bytes_per_group_program:,} bytes of K/V with one "
                    f"program per KV head, against {bytes_per_head_program:,} with one per query head: "
                    f"{group}× fewer bytes loaded. How much memory traffic that saves depends on the GPU: "
                    "repeated loads of the same block may be served by its L2 cache; the loads are what "
                    "this count is sure of.")],
            answer=3,
        ),
        Question(
            f"Batch {LONG_BATCH}, a very long context, {LONG_KV_HEADS} KV heads, a GPU with {NUM_SMS} SMs. "
            "Why is the unsplit decode kernel slow, and what does split-KV change?",
            [Choice(f"The table of a long context has more than {NUM_SMS} entries, which the "
                    "kernel cannot index",
                    "A block table can be as long as the context needs: the kernel loops over it. The "
                    "problem is how few programs share the GPU, not how long the table is."),
             Choice(f"Only {programs} programs run on {NUM_SMS} SMs; splitting the context launches more",
                    f"{LONG_BATCH} × {LONG_KV_HEADS} = {programs} programs, so {NUM_SMS - programs} SMs "
                    "idle. Partitions of the table run as separate programs that read in parallel, and a "
                    "small kernel merges them by log-sum-exp, exactly as step 5 checked."),
             Choice("Split-KV skips the oldest blocks to save time",
                    "Nothing is skipped: every partition is read, and the merge weighs each by its share of "
                    "the softmax denominator, so the output equals unsplit attention (step 5 checked it).")],
            answer=1,
        ),
        Question(
            "Why not use a block size of 1, with no waste at all?",
            [Choice("A block of one token cannot be masked",
                    "A block of one token needs no mask at all: it is either full or unused. Its cost is "
                    "elsewhere: a table as long as the context."),
             Choice("The KV cache would take more memory per token",
                    "Every token costs the same bytes of K and V whatever the block size, and block size 1 "
                    "wastes no slot. What grows is the table and the number of separate reads."),
             Choice(f"One lookup per token: {costs[1].lookups_per_seq:.0f} per sequence instead of "
                    f"{costs[16].lookups_per_seq:.0f}",
                    "With block size 1 the table is as long as the context and every read is one token's "
                    f"K/V, anywhere: short, scattered reads. Blocks of 16 waste {costs[16].waste_frac:.1%} "
                    "of the slots here and read 16 tokens per lookup.")],
            answer=2,
        ),
        NumberQuestion(
            f"Section 2's sequences hold {', '.join(str(n) for n in context_lens)} tokens. With blocks of "
            f"{BIGGER} instead of {block_size}, how many block-table entries would the {len(context_lens)} "
            "sequences use in all?",
            answer=bigger.table_entries, source=block_size_cost,
            explanation=f"{' + '.join(f'⌈{n} / {BIGGER}⌉' for n in context_lens)} = "
                        f"{' + '.join(str(b) for b in per_seq)} = {bigger.table_entries} entries, against "
                        f"{here.table_entries} with blocks of {block_size}: bigger blocks make shorter "
                        f"tables and leave more slots empty ({bigger.wasted_slots} instead of "
                        f"{here.wasted_slots}).",
            too_low="Each sequence rounds up on its own: a partly filled last block still "
                    "takes a whole entry.",
            too_high=f"A sequence of n tokens needs ⌈n / {BIGGER}⌉ entries, one per block, "
                     "not one per token.",
            mistakes=distinct_mistakes(bigger.table_entries, [
                (here.table_entries, f"That is with blocks of {block_size}, section 2's table. Blocks of "
                                     f"{BIGGER} hold more tokens each, so fewer of them are needed."),
                (floored, "Rounding down drops the partly filled last blocks, and they need an entry too."),
                (pooled, f"That divides all {sum(context_lens)} tokens together; each sequence has blocks of "
                         "its own, and each rounds up separately."),
            ]),
        ),
    ])
