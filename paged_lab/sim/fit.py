"""How many requests fit: the most identical requests a pool runs side by side, never preempting one.

Asked of the real Scheduler over a real allocator (``simulate``), not of a formula: notebook 08 compares a
model whose window layers give blocks back (``HybridBlockManager``) with the same model read as if every
layer were full attention.
"""

from __future__ import annotations

from collections.abc import Callable

from paged_lab._checks import check_int
from paged_lab.memory.allocator import KVCacheAllocator
from paged_lab.sim.simulate import simulate
from paged_lab.sim.workloads import Request


def run_together(make_allocator: Callable[[], KVCacheAllocator], num_requests: int, prompt_len: int,
                 max_tokens: int, max_num_batched_tokens: int | None = None) -> dict:
    """``num_requests`` requests of ``prompt_len`` prompt tokens and ``max_tokens`` outputs, all arriving at
    step 0, through a Scheduler over ``make_allocator()``. Returns ``simulate``'s summary."""
    prompt = tuple(range(1, prompt_len + 1))  # (identical prompts; nothing is shared with caching off)
    reqs = [Request(f"r{i}", prompt, max_tokens) for i in range(num_requests)]
    sched = {"max_num_seqs": num_requests, "max_num_batched_tokens": max_num_batched_tokens}
    return simulate(reqs, make_allocator(), sched).summary


def requests_that_fit(make_allocator: Callable[[], KVCacheAllocator], prompt_len: int, max_tokens: int,
                      max_num_batched_tokens: int | None = None, limit: int = 4096) -> int:
    """The most requests (of ``prompt_len`` + ``max_tokens``) that all run at once to the end, none of them
    preempted or kept waiting, over a fresh ``make_allocator()`` (called once per try). 0 when one alone
    never fits. If ``k`` requests fit, ``k - 1`` do (the same requests, fewer of them), so the answer is
    found by doubling ``k`` until it fails, then bisecting: about 2 log2(answer) runs; ``limit`` bounds it."""
    prompt_len = check_int("prompt_len", prompt_len, minimum=1)
    max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    limit = check_int("limit", limit, minimum=1)

    def fits(k: int) -> bool:
        s = run_together(make_allocator, k, prompt_len, max_tokens, max_num_batched_tokens)
        return s["num_preemptions"] == 0 and s["peak_running"] == k and s["num_finished"] == k

    lo, k = 0, 1  # fits(lo) holds (0 requests always fit)
    while k <= limit and fits(k):
        lo, k = k, 2 * k
    hi = min(k - 1, limit)  # fits(k) failed (or k passed the limit): the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo
