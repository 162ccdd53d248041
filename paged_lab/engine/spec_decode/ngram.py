"""The n-gram proposer: draft the next tokens by finding the request's own recent n-gram earlier in it.

As vLLM's ``NgramProposer`` (``vllm/v1/spec_decode/ngram_proposer.py``,
``_find_longest_matched_ngram_and_propose_tokens``): take the last n tokens for the largest n in
[``prompt_lookup_min``, ``prompt_lookup_max``] that occurred before; of that n-gram's earlier occurrences take
the *first* one; the draft is the (up to) k tokens that followed it. No model runs: a draft costs a
search, and it is right exactly when the text repeats itself (code, lists, a quoted passage).

vLLM finds the match with a KMP scan over the reversed tokens (numba); this file says the same rule
with numpy windows, longest n first. ``tests/test_spec_decode.py`` checks the two agree on recorded cases.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from paged_lab.engine.spec_decode.config import SpeculativeConfig


def ngram_drafts(token_ids, min_n: int, max_n: int, k: int) -> list[int]:
    """Up to ``k`` draft tokens for ``token_ids``: the tokens that followed the first earlier occurrence of
    its last n tokens, for the largest n in [min_n, max_n] that has one. [] when none recurs.

    >>> ngram_drafts([1, 2, 3, 9, 1, 2, 3], min_n=1, max_n=3, k=2)   # "1 2 3" was followed by 9, 1
    [9, 1]
    """
    tokens = np.asarray(token_ids, dtype=np.int64)  # [num_tokens]
    num_tokens = len(tokens)
    if k <= 0 or num_tokens < min_n:
        return []
    for n in range(min(max_n, num_tokens - 1), min_n - 1, -1):  # longest first
        # windows[j] = tokens[j:j+n], for every start j whose n-gram ends before the last token
        windows = sliding_window_view(tokens[: num_tokens - 1], n)  # [num_tokens - n, n]
        hits = np.flatnonzero((windows == tokens[num_tokens - n :]).all(axis=1))
        if len(hits):
            start = int(hits[0]) + n  # the first occurrence; the draft is what came after it
            return tokens[start : start + k].tolist()
    return []


class NgramProposer:
    """Drafts for one request at a time: ``propose(token_ids, max_drafts)``. ``max_model_len`` caps the
    drafts so that no position reaches it (vLLM: ``k = min(k, max_model_len - num_tokens)``)."""

    def __init__(self, config: SpeculativeConfig, max_model_len: int):
        self.k, self.min_n, self.max_n = (
            config.num_speculative_tokens,
            config.prompt_lookup_min,
            config.prompt_lookup_max,
        )
        self.max_model_len = max_model_len

    def propose(self, token_ids, max_drafts: int | None = None) -> list[int]:
        """At most ``min(k, max_drafts, max_model_len - len(token_ids))`` draft tokens for ``token_ids``."""
        k = min(self.k, self.max_model_len - len(token_ids), self.k if max_drafts is None else max_drafts)
        return ngram_drafts(token_ids, self.min_n, self.max_n, k)
