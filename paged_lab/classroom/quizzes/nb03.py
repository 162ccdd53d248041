"""The quiz of notebook 03 · Block tables. Every number comes from a BlockManager: the notebook's own
(the walkthrough and section 4's pool) or one built here.

Which free block the pool hands out next is the free queue's rule (``paged_lab/memory/block_pool.py``);
the questions state no rule of their own about it: they show the tables the notebook's pools produced.
"""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.memory import BlockManager

PROMPT, LONGER = 8, 9  # the two sequence lengths the questions ask about (token counts)


def _empty_slots(n_tokens: int, block_size: int) -> int:
    bm = BlockManager(num_blocks=8, block_size=block_size)
    return len(bm.allocate("x", [1] * n_tokens)) * block_size - n_tokens


def _walkthrough_choices(fresh: list[int], table: list[int]) -> list[Choice]:
    """Two wrong tables beside ``fresh``: the walkthrough's own, then the same blocks reordered."""
    candidates = [
        Choice(str(table), "That is what A got in the walkthrough, after the earlier requests had taken "
                           "every block and given them back in the order the cell chose. A fresh pool has "
                           "no such history."),
        Choice(str(sorted(table)), "Those are the walkthrough's blocks, sorted: still the leftovers of its "
                                   "earlier requests. A block table is not kept sorted either: entry j is "
                                   "whichever block logical block j received."),
        Choice(str(table[::-1]), "Those are the walkthrough's blocks, reversed: still the leftovers of its "
                                 "earlier requests, which a fresh pool does not have."),
    ]
    out, seen = [], {str(fresh)}
    for c in candidates:
        if c.text not in seen:
            out.append(c)
            seen.add(c.text)
    return out[:2]


def quiz(*, block_size: int, prompt_len: int, walkthrough_table: list[int], fresh_table: list[int],
         demo: BlockManager, demo_seq="A") -> Quiz:
    """``walkthrough_table``: the block table the walkthrough's prompt of ``prompt_len`` tokens got;
    ``fresh_table``: what the same prompt gets on a fresh pool; ``demo``: section 4's BlockManager,
    holding sequence ``demo_seq``."""
    bs = block_size
    eight = BlockManager(num_blocks=8, block_size=bs)
    eight.allocate("x", [1] * PROMPT)
    blocks, new_blocks = len(eight.block_table("x")), eight.blocks_needed_to_append("x")
    empty_big, empty_small = _empty_slots(LONGER, 16), _empty_slots(LONGER, bs)
    spare = blocks + 1

    table, slots = demo.block_table(demo_seq), demo.slot_mapping(demo_seq)
    last = len(slots) - 1
    logical, offset = last // bs, last % bs
    wrong = _walkthrough_choices(fresh_table, walkthrough_table)

    return Quiz([
        Question(
            f"An {PROMPT}-token prompt arrives with block_size = {bs}. How many blocks does it take, and "
            "does its next token need a new block?",
            [Choice(f"{blocks} blocks; token {PROMPT + 1} still fits",
                    f"{PROMPT} tokens fill {blocks} blocks of {bs} exactly: the last block's last slot holds "
                    f"token {PROMPT}, so token {PROMPT + 1} has nowhere to go but a new block."),
             Choice(f"{blocks} blocks; token {PROMPT + 1} opens a new one",
                    f"{PROMPT} tokens fill {blocks} blocks of {bs} exactly, so the next token has no slot "
                    f"left and append_token takes {new_blocks} new block (blocks_needed_to_append). A block "
                    "is taken only when the last one is full."),
             Choice(f"{spare} blocks: a spare one is taken ready for the next token",
                    f"The BlockManager never takes a block ahead of need: allocate takes ⌈{PROMPT} / {bs}⌉ = "
                    f"{blocks}, and the next one comes only when token {PROMPT + 1} arrives. A spare block "
                    "per request would bring back the reservations of notebook 02.")],
            answer=1,
        ),
        NumberQuestion(
            f"How many empty slots does a {LONGER}-token sequence leave in its blocks with block_size = 16?",
            answer=empty_big, source=BlockManager.allocate,
            explanation=f"⌈{LONGER} / 16⌉ = 1 block of 16 holds the {LONGER} tokens and leaves {empty_big} "
                        f"slots empty; blocks of {bs} would take ⌈{LONGER} / {bs}⌉ and leave {empty_small}. "
                        "A sequence wastes less than one block, so the waste grows with the block size.",
            too_low=f"One block of 16 holds all {LONGER} tokens: how many of its 16 slots are left over?",
            too_high="A sequence takes only ⌈n / block_size⌉ blocks, and only its last block can have empty "
                     "slots: at most block_size − 1 of them.",
            mistakes=distinct_mistakes(empty_big, [
                (empty_small, f"That is with blocks of {bs}. With 16, a single block holds all "
                              f"{LONGER} tokens."),
                (2 * 16 - LONGER, f"{LONGER} tokens need only one block of 16, not two: a sequence takes "
                                  "⌈n / block_size⌉ blocks."),
            ]),
        ),
        Question(
            f"On a fresh pool, which blocks would the walkthrough's {prompt_len}-token prompt have received?",
            [*wrong,
             Choice(str(fresh_table),
                    "A fresh pool has handed nothing out yet, so its free queue is still in block-id order: "
                    f"{fresh_table}. A got {walkthrough_table} in the walkthrough only because earlier "
                    "requests had taken blocks and given them back first: the cell chose the order they "
                    "finished in, the free queue decided which block comes next.")],
            answer=len(wrong),
        ),
        Question(
            "With prefix caching on, why does free hand a sequence's blocks back last block first?",
            [Choice("So the tail, least likely to be shared, is evicted first",
                    "A freed block keeps its content, and its hash, until the pool hands it out again. "
                    "Handing the tail back first puts it ahead of the head in line to be reused, so the "
                    "start of the sequence, a prefix other requests may share, stays cached longest "
                    "(notebook 04 watches it happen)."),
             Choice("So that freed blocks end up side by side",
                    "Blocks never need to be neighbours: that is what the block table is for. The order only "
                    "decides which content the pool overwrites first."),
             Choice("Because the attention kernel reads a sequence's blocks backwards",
                    "The kernel reads a sequence's blocks in table order, front to back, and never reads a "
                    "freed block. The order of free matters only for what the pool hands out next.")],
            answer=0,
            design="V1",
        ),
        NumberQuestion(
            f"Section 4's request {demo_seq} holds {len(slots)} tokens in the blocks {table} (block_size = "
            f"{bs}). In which physical slot are the K and V of its last token, position {last}?",
            answer=slots[last], source=BlockManager.slot_mapping,
            explanation=f"Position {last} sits in logical block {last} // {bs} = {logical}, which is "
                        f"physical block {table[logical]}, at offset {last} % {bs} = {offset}: "
                        f"{table[logical]} × {bs} + {offset} = {slots[last]}. slot_mapping computes exactly "
                        "this for every token, and the kernels use it to store and read K and V.",
            too_low="The slot is the physical block × block_size + the offset inside the block: find the "
                    "position's logical block, then look its physical block up in the table.",
            too_high="Only the block table's entry is multiplied by block_size; the offset inside the block "
                     "(position % block_size) is added as it is.",
            mistakes=distinct_mistakes(slots[last], [
                (last, "That is the token's position in the sequence, its logical slot. The physical slot "
                       "goes through the block table."),
                (table[logical], "That is the physical block. A block holds block_size slots: multiply by "
                                 "block_size and add the offset inside the block."),
            ]),
        ),
    ])
