"""The quiz of notebook 10 · Speculative decoding as KV rollback. The number answers are the engine's own
rules (``engine.spec_decode.verify``: the tokens a greedy step keeps, the blocks a step takes ahead);
the last question takes section 5's roofline prediction."""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.engine.spec_decode.verify import blocks_to_allocate_ahead, greedy_verify
from paged_lab.kv_math import cdiv


def quiz(*, block_size: int, num_tokens: int, num_drafts: int, num_blocks_held: int, drafts: list[int],
         target: list[int], predicted_ratio: float) -> Quiz:
    """``block_size``, ``num_tokens`` (known tokens, the pending one included), ``num_drafts``,
    ``num_blocks_held``: a request before a step with drafts (section 2); ``drafts`` and ``target`` (the
    target's token at each scored row): a greedy step (section 1); ``predicted_ratio``: section 5's roofline
    prediction of a step of 1 + 3 rows over a step of one row."""
    ahead = blocks_to_allocate_ahead(num_tokens, num_drafts, num_blocks_held, block_size)
    kept = len(greedy_verify(drafts, target))
    later = sum(d == t for d, t in zip(drafts, target))  # agreements, a later one counted too
    slots = num_tokens + num_drafts
    return Quiz([
        NumberQuestion(
            f"A request holds {num_blocks_held} blocks of {block_size} tokens and knows {num_tokens} tokens "
            f"(the last one not computed yet). The n-gram proposer drafts {num_drafts}. How many new blocks "
            "does the step take before it runs?",
            answer=ahead, source=blocks_to_allocate_ahead,
            explanation=f"{num_tokens} + {num_drafts} = {slots} slots, cdiv({slots}, {block_size}) = "
                        f"{cdiv(slots, block_size)} blocks, {num_blocks_held} held: {ahead} new. The drafts "
                        "need slots of their own before the forward pass writes their K and V.",
            too_low="The drafts are scheduled tokens: the forward pass writes a K and a V for each of them, "
                    "so they need slots before the step, like the known tokens.",
            too_high="Count slots, not blocks per draft: the drafts fill the held blocks' empty slots first, "
                     "and only what is left over takes new blocks.",
            mistakes=distinct_mistakes(ahead, [
                (max(0, cdiv(num_tokens, block_size) - num_blocks_held),
                 "That leaves the drafts out: they are written into the cache by the same forward pass, "
                 "so their slots are allocated with the step's other tokens."),
                (cdiv(slots, block_size), "That is every block the request needs, not the new ones: it "
                                          "already holds some of them."),
            ]),
        ),
        NumberQuestion(
            f"Greedy decoding. The drafts are {drafts}; at the {len(target)} rows it scored, the target's "
            f"own tokens are {target}. How many tokens does the step append to the request?",
            answer=kept, source=greedy_verify,
            explanation=f"The first {kept - 1} drafts agree, the next one does not: those drafts stay, and "
                        "the target's own token at the first disagreement is appended after them.",
            too_low="A step always keeps one token of the target's own after the accepted drafts: at the "
                    "first disagreement, or the bonus token after the last draft.",
            too_high="Verification stops at the first draft that disagrees; a later draft that happens to "
                     "agree was drafted after a wrong token, so it does not count.",
            mistakes=distinct_mistakes(kept, [
                (kept - 1, "That counts the accepted drafts only; the target's own token at the first "
                           "disagreement is appended too."),
                (later + 1, "That counts a draft that agrees after the first disagreement; the rows after "
                            "a rejected draft were computed from a wrong token."),
                (len(target), "That keeps every row; only the agreeing prefix and one token more stay."),
            ]),
        ),
        Question(
            "A step verified 3 drafts and the target rejected the third, the only token in its block. What "
            "does vLLM V1 do with that block?",
            [Choice("It goes back to the free queue at the end of the step",
                    "allocate_slots never frees a running request's block because of a rejection: vLLM's "
                    "manager even notes that the blocks held may exceed the blocks needed after one."),
             Choice("It stays in the request's block table; the next tokens are written over its slot",
                    "Rejection is bookkeeping: num_computed_tokens goes back, the table keeps the block, "
                    "and the next step's tokens land in the same slots."),
             Choice("It joins the prefix cache, so a later request with the same text can reuse it",
                    "Only verified tokens are cached: allocate_slots caps the tokens it caches at the "
                    "request's own tokens, which exclude the drafts."),
             Choice("It is copied to a fresh block before the next write, as in copy-on-write",
                    "Nothing shares the block: its refcount is 1, so the next write goes straight into it.")],
            answer=1, design="V1",
        ),
        Question(
            "Greedy decoding with n-gram drafts against the same engine without them: what stays the same?",
            [Choice("The number of engine steps",
                    "Every accepted draft is a token that needs no step of its own, so a run with accepted "
                    "drafts takes fewer steps."),
             Choice("The number of tokens each step schedules",
                    "A step with drafts schedules the request's last token and its drafts, 1 + k rows, "
                    "where a plain decode step schedules one."),
             Choice("The KV slots the forward passes write",
                    "Rejected drafts are written too, by the verifying forward pass, then rolled back and "
                    "written over."),
             Choice("The tokens generated",
                    "Each kept token is the target's own argmax at its position, given tokens that are "
                    "themselves the target's: the drafts only decide how many come per step.")],
            answer=3,
        ),
        Question(
            f"Section 5's roofline predicts that a step scoring 1 + 3 rows of one request takes "
            f"{predicted_ratio:.2f}× a step of one row, not 4×. Why?",
            [Choice("A decode step of a few rows is bound by reading the weights, which it does once",
                    "Every step streams all the weights from memory whatever the number of rows; the extra "
                    "rows add arithmetic, which a few rows barely use."),
             Choice("The drafts' K and V are not computed, only compared",
                    "Each draft row runs through every layer and writes its K and V: that is what the "
                    "verify step is, and the roll-back is why the slots stay."),
             Choice("The n-gram proposer runs on another core while the step runs",
                    "The proposer is a search over the request's token ids, microseconds of work between "
                    "steps; the step's time is the model's."),
             Choice("The draft rows skip attention and run the MLP only",
                    "Each draft row attends over the context and the drafts before it, as a short "
                    "prefill chunk does.")],
            answer=0,
        ),
    ])
