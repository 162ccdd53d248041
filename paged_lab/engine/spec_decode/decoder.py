"""Speculative decoding in the engine: which rows a step scores, how the drafts are verified, and the next
drafts. The Scheduler and the BlockManager see only ``Sequence.spec_token_ids`` (a running sequence's
drafts, scheduled as 1 + k tokens, their positions given slots ahead) and a list of tokens per sequence in
``Scheduler.update`` (the accepted drafts and one more; the rejected ones are not counted as computed).

One step of one request with pending token t at position n - 1 and drafts d1..dk:

    schedule      [t, d1, .., dk] at positions n-1 .. n+k-1; slots for all of them ("append" + "draft")
    forward       one pass through the block table, as a short prefill chunk; logits at all k + 1 rows
    verify        greedy: the longest prefix the target agrees with, then its own next token ("verify")
    accept        a drafts become tokens with KV ("accept"); num_computed_tokens = n + a
    rollback      k - a positions are not computed ("rollback"); their blocks stay in the table, their
                  slots are written over by the next step's tokens (vLLM keeps them too)
    propose       the next drafts from the n-gram proposer, for the sequences still running
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from paged_lab.engine.sampling import filter_probs
from paged_lab.engine.spec_decode.config import SpeculativeConfig
from paged_lab.engine.spec_decode.ngram import NgramProposer
from paged_lab.engine.spec_decode.verify import greedy_verify, rejection_sample
from paged_lab.kv_math import cdiv


@dataclass
class SpecDecodingStats:
    """vLLM's counters (``v1/spec_decode/metrics.py`` ``SpecDecodingStats``; metric names
    ``vllm:spec_decode_num_drafts`` ...): a draft is one request's drafts in one step."""

    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        if not self.num_accepted_tokens_per_pos:
            self.num_accepted_tokens_per_pos = [0] * self.num_spec_tokens
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1

    def as_stats(self) -> dict:
        """The ``LLM.stats()`` entries, under vLLM's metric names."""
        return {
            "spec_decode_num_drafts": self.num_drafts,
            "spec_decode_num_draft_tokens": self.num_draft_tokens,
            "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
            "spec_decode_num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
        }


NO_SPEC_STATS = SpecDecodingStats(0).as_stats()  # what stats() reports with speculation off


class SpecDecode:
    """The engine's speculative decoding: ``verify`` (the tokens each sampled sequence keeps, from its last
    row and one row per draft, laid out by ``engine.batch``), ``propose`` (drafts for the next step)."""

    def __init__(self, config: SpeculativeConfig, max_model_len: int, block_manager, eos_token_ids, decode):
        self.config = config
        self.proposer = NgramProposer(config, max_model_len)
        self.bm, self.eos_token_ids, self.decode = block_manager, list(eos_token_ids), decode
        self.stats = SpecDecodingStats(config.num_speculative_tokens)

    def verify(self, logits: torch.Tensor, entries, requests) -> list[list[int]]:
        """The tokens each sampling entry keeps (``entries``: the scheduled entries that sample, in batch
        order; ``logits``: their rows, 1 + len(drafts) each, in that order; ``requests``: seq_id -> Request).
        Logs "verify", "accept" and "rollback" for the entries with drafts, before ``Scheduler.update``."""
        argmax = logits.max(dim=-1).indices.tolist()  # greedy rows, all at once
        out, row = [], 0
        for entry in entries:
            drafts, seq = list(entry.spec_token_ids), entry.seq
            rows = slice(row, row + len(drafts) + 1)
            row += len(drafts) + 1
            req = requests[seq.seq_id]
            p = req.params
            if p.greedy:
                tokens = greedy_verify(drafts, argmax[rows])
            else:  # vLLM's rule (v1/sample/rejection_sampler.py): the output keeps the target distribution
                probs = torch.stack([filter_probs(x, p.temperature, p.top_k, p.top_p) for x in logits[rows]])
                tokens = rejection_sample(drafts, probs, req.generators[seq.seq_id])
            if drafts:
                self._log(entry, len(tokens) - 1)
            out.append(self._cut_at_stops(tokens, seq, p))
        return out

    def _log(self, entry, accepted: int) -> None:
        """Count one draft and write its verify / accept / rollback events (no block changes)."""
        k, sid, bs = len(entry.spec_token_ids), entry.seq.seq_id, self.bm.block_size
        self.stats.observe_draft(k, accepted)
        n = entry.end - k  # the sequence's known tokens: the drafts sit at positions n .. n + k - 1
        table = self.bm.block_table(sid)
        self.bm.record("verify", sid, table[n // bs : cdiv(n + k, bs)], n + k)
        if accepted:
            self.bm.record("accept", sid, table[n // bs : cdiv(n + accepted, bs)], n + accepted)
        if accepted < k:
            self.bm.record("rollback", sid, table[(n + accepted) // bs : cdiv(n + k, bs)], n + accepted)

    def _cut_at_stops(self, tokens: list[int], seq, params) -> list[int]:
        """``tokens`` up to the first that ends the completion where plain decoding would stop: an extra EOS
        id of the model, or a token that completes a stop string (the Scheduler stops at EOS, max_tokens)."""
        for i, t in enumerate(tokens[:-1]):
            if not params.ignore_eos and t in self.eos_token_ids[1:]:
                return tokens[: i + 1]
            if params.stop and any(
                s in self.decode(seq.output_token_ids + tokens[: i + 1]) for s in params.stop
            ):
                return tokens[: i + 1]
        return tokens

    def propose(self, seqs) -> None:
        """Drafts for the next step of each sequence that just sampled and still runs: at most k, never past
        its ``max_tokens`` (a draft there could never be kept, and its slot might not fit the pool) nor the
        model's length (vLLM's proposer caps at ``max_model_len``)."""
        for seq in seqs:
            if seq.status.value == "running":
                left = seq.max_tokens - seq.num_output_tokens - 1  # tokens after the pending one
                seq.spec_token_ids = self.proposer.propose(seq.token_ids, max_drafts=left) if left > 0 else []
