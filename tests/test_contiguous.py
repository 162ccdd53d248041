import pytest

from paged_lab.memory import ContiguousAllocator
from paged_lab.memory.errors import OutOfBlocks


def test_locker_old_manager_fits_five_reservations_of_twelve():
    old = ContiguousAllocator(60, 12)
    admitted = []
    for name in "ABCDEF":
        if old.can_allocate(3):
            old.allocate(name, [1, 2, 3])
            admitted.append(name)
    assert admitted == list("ABCDE")  # 5 x 12 = 60: F must wait although only 15 slots hold luggage
    assert (old.reserved_slots, old.used_slots, old.num_free_blocks) == (60, 15, 0)
    assert old.internal_fragmentation == 45
    assert old.utilization == pytest.approx(15 / 60)
    assert old.usage == pytest.approx(15 / 60)


def test_first_fit_placement_and_block_table():
    old = ContiguousAllocator(40, 10)
    assert old.allocate("a", [1])[0] == 0
    assert old.allocate("b", [1, 2]) == list(range(10, 20))
    assert old.slot_mapping("b") == [10, 11]
    old.free("a")
    assert old.allocate("c", [1])[0] == 0  # first fit reuses the hole at the front
    assert [r[0] for r in old.regions()] == ["c", "b"]


def test_external_fragmentation_counts_holes_too_small():
    old = ContiguousAllocator(25, 10)  # room for two reservations and a 5-slot tail hole
    old.allocate("a", [1])
    old.allocate("b", [1])
    assert old.holes() == [(20, 5)]
    assert old.external_fragmentation == 5  # 5 free slots, but a request needs 10 in a row
    assert not old.can_allocate(1)
    old.free("a")
    assert old.holes() == [(0, 10), (20, 5)]
    assert old.external_fragmentation == 5 and old.can_allocate(1)


def test_append_grows_inside_the_reservation_until_full():
    old = ContiguousAllocator(12, 4)
    old.allocate("a", [1, 2])
    assert old.append_token("a", 3) is None  # nothing is shared, so never a copy
    assert old.can_append("a")
    old.append_token("a", 4)
    assert not old.can_append("a") and old.num_tokens("a") == 4
    with pytest.raises(OutOfBlocks, match="max_seq_len=4"):
        old.append_token("a", 5)
    assert old.num_tokens("a") == 4 and old.used_slots == 4  # all-or-nothing


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="num_slots"):
        ContiguousAllocator(0, 1)
    with pytest.raises(ValueError, match="max_seq_len"):
        ContiguousAllocator(10, 11)
    with pytest.raises(ValueError, match="max_seq_len"):
        ContiguousAllocator(10, -1)
    old = ContiguousAllocator(10, 5)
    with pytest.raises(ValueError, match="max_seq_len=5"):
        old.allocate("a", list(range(6)))
    old.allocate("a", [1])
    with pytest.raises(ValueError, match="already allocated"):
        old.allocate("a", [1])
    with pytest.raises(LookupError, match="'zz'"):
        old.free("zz")
    with pytest.raises(ValueError, match="fork"):
        old.fork("a", "b")
    with pytest.raises(ValueError, match="num_lookahead_tokens must be 0"):  # no draft slots here
        old.append_tokens("a", [2], num_lookahead_tokens=2)
    assert old.num_tokens("a") == 1
    old.allocate("b", [1])
    with pytest.raises(OutOfBlocks):
        old.allocate("c", [1])
    assert old.seq_ids == ["a", "b"] and old.num_cached_tokens("a") == 0


# -- reservations of different sizes: scattered holes (external fragmentation) --------------------

def _state(old):
    return (old.regions(), old.holes(), old.reserved_slots, old.used_slots,
            {s: old.reservation(s) for s in old.seq_ids})


def test_own_size_reservations_leave_holes_that_add_up_but_fit_nobody():
    old = ContiguousAllocator(60, 20)
    for name, size in zip("ABCDEF", (10, 8, 12, 6, 14, 10)):
        old.allocate(name, [1], reserve=size)
    assert old.num_free_blocks == 0 and old.reserved_slots == 60
    old.free("B")
    old.free("D")
    assert old.holes() == [(10, 8), (30, 6)]
    assert old.num_free_blocks == 14 and old.largest_hole == 8
    assert not old.can_allocate(1, reserve=12)  # 14 free slots, but no 12 in a row
    assert old.stranded_slots(12) == 14 and old.stranded_slots(7) == 6
    before = _state(old)
    with pytest.raises(OutOfBlocks, match="largest hole 8"):
        old.allocate("G", [1], reserve=12)
    assert _state(old) == before  # all-or-nothing
    assert old.allocate("H", [1, 2], reserve=8) == list(range(10, 18))  # first fit: B's hole
    assert old.reservation("H") == 8 and old.block_table("H") == list(range(10, 18))


def test_append_stops_at_the_own_reservation():
    old = ContiguousAllocator(20, 10)
    old.allocate("a", [1, 2], reserve=3)
    old.append_token("a", 3)
    assert not old.can_append("a")
    with pytest.raises(OutOfBlocks, match="reservation of 3 slots"):
        old.append_token("a", 4)
    assert old.num_tokens("a") == 3 and old.used_slots == 3


@pytest.mark.parametrize("bad", [0, -1, 11, 2.0, True, "3"])
def test_reserve_errors_name_the_argument_and_the_limit(bad):
    old = ContiguousAllocator(20, 10)
    old.allocate("a", [1])
    before = _state(old)
    with pytest.raises(ValueError, match=r"reserve must be an integer in 1\.\.max_seq_len=10"):
        old.allocate("b", [1], reserve=bad)
    with pytest.raises(ValueError, match="reserve"):
        old.can_allocate(1, reserve=bad)
    with pytest.raises(ValueError, match="reserve"):
        old.stranded_slots(bad)
    assert _state(old) == before


def test_prompt_longer_than_its_reservation_is_refused():
    old = ContiguousAllocator(20, 10)
    assert not old.can_allocate(5, reserve=4)
    with pytest.raises(ValueError, match="reserve=4"):
        old.allocate("a", [1] * 5, reserve=4)
    assert old.seq_ids == [] and old.reserved_slots == 0


hyp = pytest.importorskip("hypothesis")
st = hyp.strategies


@hyp.settings(max_examples=150, deadline=None)
@hyp.given(st.lists(st.tuples(st.sampled_from("alloc free append".split()), st.integers(0, 7),
                              st.integers(1, 12), st.integers(1, 12)), max_size=60))
def test_own_size_reservations_tile_the_pool(ops):
    """Reservations and holes never overlap and always add up to the pool; can_allocate agrees
    with largest_hole; a failed allocate changes nothing."""
    old = ContiguousAllocator(40, 10)
    for op, sid, n, size in ops:
        if op == "alloc":
            n, size = min(n, 10), min(size, 10)
            before = _state(old)
            fits = sid not in old and n <= size and old.largest_hole >= size
            assert old.can_allocate(n, reserve=size) == (n <= size and old.largest_hole >= size)
            try:
                old.allocate(sid, [0] * n, reserve=size)
                assert fits
            except (OutOfBlocks, ValueError):
                assert not fits and _state(old) == before
        elif op == "free" and sid in old:
            old.free(sid)
        elif op == "append" and sid in old:
            if old.can_append(sid):
                old.append_token(sid, 0)
        spans = sorted([(s, old.reservation(q)) for q, s, _ in old.regions()] + old.holes())
        pos = 0
        for s, length in spans:
            assert s == pos and length > 0
            pos += length
        assert pos == old.num_slots
        assert old.reserved_slots == sum(old.reservation(q) for q in old.seq_ids)
        assert old.num_free_blocks == sum(h for _, h in old.holes())
        assert all(old.num_tokens(q) <= old.reservation(q) for q in old.seq_ids)
        assert old.stranded_slots(10) == old.external_fragmentation


def test_slot_map_draws_each_reservation_at_its_own_size():
    from paged_lab.sim import slot_map

    old = ContiguousAllocator(12, 6)
    old.allocate("a", [1, 2], reserve=3)
    old.allocate("b", [1], reserve=6)
    m = slot_map(old, {})
    assert [o for o, _ in m] == ["a"] * 3 + ["b"] * 6 + [None] * 3
    assert [full for _, full in m] == [True, True, False, True] + [False] * 8


def test_both_allocators_answer_the_interface_the_scheduler_drives():
    from paged_lab.memory import BlockManager, KVCacheAllocator

    paged, old = BlockManager(8, 4), ContiguousAllocator(60, 12)
    assert isinstance(paged, KVCacheAllocator) and isinstance(old, KVCacheAllocator)
    assert not isinstance(object(), KVCacheAllocator)
    assert (paged.max_slots_per_seq, old.max_slots_per_seq) == (32, 12)
    old.allocate("a", [1, 2, 3])
    assert (old.used_slots, old.reserved_slots, old.external_fragmentation) == (3, 12, 0)
    paged.allocate("a", [1, 2, 3, 4, 5])
    assert (paged.used_slots, paged.reserved_slots, paged.external_fragmentation) == (5, 8, 0)

