"""Notebook 02's exercises: first fit and utilization of the contiguous allocator (the old manager)."""

from __future__ import annotations

from paged_lab.classroom.exercises.exercise import Exercise, close, shown_value
from paged_lab.memory.contiguous import ContiguousAllocator


def _contiguous(num_slots, reserves, frees):
    """The real ContiguousAllocator after reserving ``reserves`` (tokens, size) in turn, then freeing
    the ones whose index is in ``frees``. Reservations that do not fit are skipped."""
    alloc = ContiguousAllocator(num_slots, num_slots)
    for i, (tokens, size) in enumerate(reserves):
        if size <= num_slots and alloc.can_allocate(tokens, reserve=size):
            alloc.allocate(i, [0] * tokens, reserve=size)
    for i in frees:
        if i in alloc:
            alloc.free(i)
    return alloc


def _st_trace():
    """An allocator after a random trace of reservations and frees (so it has holes)."""
    from hypothesis import strategies as st

    @st.composite
    def trace(draw):
        num_slots = draw(st.integers(1, 40))
        sizes = draw(st.lists(st.integers(1, 12), max_size=6))
        reserves = [(draw(st.integers(1, s)), s) for s in sizes]
        frees = draw(st.sets(st.integers(0, max(len(sizes) - 1, 0)), max_size=3))
        return _contiguous(num_slots, reserves, sorted(frees))
    return trace()


def _reservations(alloc):
    """(start, reserved slots) of every reservation, in address order."""
    return [(start, alloc.reservation(sid)) for sid, start, _ in alloc.regions()]


def _st_first_fit():
    from hypothesis import strategies as st

    return st.builds(lambda a, size: (_reservations(a), a.num_slots, size), _st_trace(), st.integers(1, 12))


def _expect_first_fit(reservations, num_slots, size):
    # the same state, built the way the allocator builds it: in address order, a filler reservation for
    # each gap and then the reservation itself (first fit puts each right after the last), then the
    # fillers freed
    alloc, pos, fillers = ContiguousAllocator(num_slots, num_slots), 0, []
    for i, (start, reserved) in enumerate(sorted(reservations)):
        if start > pos:
            fillers.append(("gap", i))
            alloc.allocate(fillers[-1], [0], reserve=start - pos)
        alloc.allocate(i, [0], reserve=reserved)
        pos = start + reserved
    for filler in fillers:
        alloc.free(filler)
    assert _reservations(alloc) == sorted(reservations)
    return alloc.first_fit(size)


def _st_utilization():
    from hypothesis import strategies as st

    def regions(alloc):
        return ([(alloc.num_tokens(sid), alloc.reservation(sid)) for sid in alloc.seq_ids],)
    return st.builds(regions, _st_trace())


def _expect_utilization(regions):
    alloc = _contiguous(sum(size for _, size in regions) or 1, regions, [])
    return alloc.utilization


FIRST_FIT = Exercise(
    "first_fit", ("reservations", "num_slots", "size"), _expect_first_fit,
    cases=(([], 10, 4), ([(0, 4), (6, 4)], 10, 2), ([(0, 4), (6, 4)], 10, 3)), strategy=_st_first_fit,
    hint="walk the reservations in address order; the gap before each one, and the gap after the "
         "last, are the holes. Return the start of the first hole of at least `size` slots, else None.",
    real="paged_lab.memory.contiguous:ContiguousAllocator.first_fit")

UTILIZATION = Exercise(
    "utilization", ("regions",), _expect_utilization,
    cases=(([(3, 8), (8, 8)],), ([],)), strategy=_st_utilization,
    hint="slots holding a token over slots reserved, summed over all reservations (not averaged); "
         "nothing reserved counts as 0.0.",
    real="paged_lab.memory.contiguous:ContiguousAllocator.utilization", same=close, fmt=shown_value)

EXERCISES = (FIRST_FIT, UTILIZATION)
