"""FastScheduler (sched/fastpath.py, what simulate() builds) must make exactly the Scheduler's
decisions: same timeline, same requests, same spans, same allocator event log."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sched_properties import config  # the same scheduler settings the property tests draw

from paged_lab.memory import BlockManager, ContiguousAllocator
from paged_lab.sched import Scheduler, Sequence
from paged_lab.sim import paged, simulate
from paged_lab.sim import workloads as W
from paged_lab.sim.fastpath import FastScheduler


def run_both(wl, make_textbook, make_fast, cfg):
    textbook_alloc = make_textbook()
    textbook = simulate(wl, scheduler=Scheduler(textbook_alloc, **cfg))
    fast_alloc = make_fast()
    fast = simulate(wl, fast_alloc, cfg)
    return (textbook, textbook_alloc), (fast, fast_alloc)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 10**6), block_size=st.sampled_from([1, 4, 16]),
       num_blocks=st.integers(1, 40), caching=st.booleans(), cfg=config)
def test_fast_scheduler_matches_the_textbook_one(n, seed, block_size, num_blocks, caching, cfg):
    wl = W.shared_prefix(n, prefix_len=8, suffix_len=(1, 12), output_len=(1, 30), seed=seed)
    (a, bm_a), (b, bm_b) = run_both(wl, lambda: BlockManager(num_blocks, block_size, caching),
                                    lambda: BlockManager(num_blocks, block_size, caching), cfg)
    assert a.timeline == b.timeline and a.requests == b.requests and a.spans == b.spans
    assert bm_a.events == bm_b.events and bm_a.stats == bm_b.stats


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 10**6), block_size=st.sampled_from([1, 2, 4, 16]),
       num_blocks=st.integers(1, 40), caching=st.booleans(), cfg=config)
def test_in_place_appends_without_an_event_log_match_the_textbook_appends(n, seed, block_size, num_blocks,
                                                                          caching, cfg):
    # simulate()'s default pool records no events; FastScheduler appends in place (fastpath.py) with or without.
    wl = W.shared_prefix(n, prefix_len=8, suffix_len=(1, 12), output_len=(1, 30), seed=seed)
    (a, bm_a), (b, bm_b) = run_both(wl, lambda: BlockManager(num_blocks, block_size, caching),
                                    lambda: paged(num_blocks, block_size, caching), cfg)
    assert not bm_b.record_events
    assert a.timeline == b.timeline and a.requests == b.requests and a.spans == b.spans
    assert bm_a.stats == bm_b.stats and bm_a.usage == bm_b.usage
    bm_b.check_invariants()


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 20), seed=st.integers(0, 10**6), max_seq_len=st.integers(2, 40), cfg=config)
def test_fast_scheduler_matches_over_the_contiguous_allocator(n, seed, max_seq_len, cfg):
    wl = W.uniform(n, prompt_len=(1, 30), output_len=(1, 30), requests_per_step=1.0, seed=seed)
    make = lambda: ContiguousAllocator(4 * max_seq_len, max_seq_len)  # noqa: E731
    (a, _), (b, _) = run_both(wl, make, make, cfg)
    assert a.timeline == b.timeline and a.requests == b.requests and a.spans == b.spans


@pytest.mark.parametrize("cls", [Scheduler, FastScheduler])
def test_eos_and_length_stops_agree(cls):
    sched = cls(BlockManager(8, 4), max_num_seqs=3)
    a, b = Sequence("a", [1, 2], 5, eos_token_id=0), Sequence("b", [3], 2, eos_token_id=0, ignore_eos=True)
    sched.add_request(a)
    sched.add_request(b)
    out = sched.schedule()
    assert sched.update(out, [9, 0]) == []  # b ignores its EOS
    out = sched.schedule()
    assert sched.update(out, [0, 0]) == [a, b]
    assert (a.finish_reason, b.finish_reason) == ("stop", "length")
    assert a.output_token_ids == [9, 0] and b.output_token_ids == [0, 0] and a.first_token_step == 0

