"""Speculative decoding with n-gram drafts (vLLM's ``speculative_config={"method": "ngram", ...}``): the
config (``config.py``), the proposer (``ngram.py``), verification and rejection sampling (``verify.py``) and
the engine's glue (``decoder.py``); what it buys, counted without a model (``speedup.py``). The Scheduler and
BlockManager hold only a few lines of it: drafts are scheduled as 1 + k tokens, their positions get slots
ahead, rejected ones are not counted as computed."""

from paged_lab.engine.spec_decode.config import SpeculativeConfig
from paged_lab.engine.spec_decode.decoder import NO_SPEC_STATS, SpecDecode, SpecDecodingStats
from paged_lab.engine.spec_decode.ngram import NgramProposer, ngram_drafts
from paged_lab.engine.spec_decode.verify import (
    accepted_prefix,
    blocks_to_allocate_ahead,
    greedy_verify,
    rejection_sample,
)

__all__ = [
    "SpeculativeConfig",
    "SpecDecode",
    "SpecDecodingStats",
    "NO_SPEC_STATS",
    "NgramProposer",
    "ngram_drafts",
    "accepted_prefix",
    "greedy_verify",
    "rejection_sample",
    "blocks_to_allocate_ahead",
]
