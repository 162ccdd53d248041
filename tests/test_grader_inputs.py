"""The grader cannot be fooled by a function that changes its inputs (issue 35 item 5), and shows a
numpy number as a number.

Each test here passed a wrong function, rewrote the shared cases, or showed ``tensor(shape=[], [...])``
with the grader that copied the inputs shallowly and computed the answer after the learner's call.
"""

from __future__ import annotations

import copy
import re

import numpy as np

from paged_lab.classroom.exercises import EXERCISES, check


def test_clearing_the_cache_it_is_given_does_not_pass_cached_prefix():
    def cached_prefix(cached, token_ids, block_size):
        cached.clear()  # the answer computed afterwards, on the same dict, was [] too
        return []

    result = check(cached_prefix)
    assert not result.passed
    assert "It changes its argument cached" in result.text
    assert "Leave the arguments as they were" in result.text


def test_zeroing_the_block_tables_neither_passes_nor_rewrites_the_cases():
    from paged_lab.classroom.exercises.nb07 import _expect_slots

    cases_before = copy.deepcopy(EXERCISES["batch_slots"].cases)

    def batch_slots(chunks, block_size):  # ignores the tables: every block becomes block 0
        for table, _, _ in chunks:
            table[:] = [0] * len(table)
        return _expect_slots(chunks, block_size)

    result = check(batch_slots)
    assert not result.passed and "It changes its argument chunks" in result.text
    assert EXERCISES["batch_slots"].cases == cases_before  # the shared cases are as declared


def test_a_right_answer_that_changes_its_input_fails_kindly():
    def append_token(block_table, num_tokens, free_blocks, block_size):
        if num_tokens % block_size == 0:  # the right rule, but the caller's list grows
            block_table.append(free_blocks[0])
        return block_table

    result = check(append_token)
    assert not result.passed
    text = result.text
    assert text.startswith("✗ append_token: not yet. It changes its argument block_table")
    assert "  block_table: [0] became [0, 1]" in text  # the smallest input, hypothesis found
    assert "Hint: " in text and "Traceback" not in text


def test_the_answer_comes_from_inputs_the_function_never_saw():
    seen = []

    def slot_for(pos, block_table, block_size):
        seen.append(block_table)
        return block_table[pos // block_size] * block_size + pos % block_size

    assert check(slot_for).passed
    for case in EXERCISES["slot_for"].cases:  # the learner got copies, never the declared lists
        assert all(t is not case[1] for t in seen)


def test_a_numpy_number_is_shown_as_a_number():
    def kv_bytes_per_token(spec, dtype):
        return np.int64(spec.kv_bytes_per_token(dtype))

    result = check(kv_bytes_per_token)
    assert not result.passed
    assert re.search(r"\n  yours:    \d+ \(type int64, but the answer is of type int\)\n", result.text)
    assert "tensor(" not in result.text

    def blocks_needed(n_tokens, block_size):  # the default display too
        return np.int64(-(-n_tokens // block_size))

    text = check(blocks_needed).text
    assert "yours:    0 (type int64, but the answer is of type int)" in text and "np.int64" not in text
