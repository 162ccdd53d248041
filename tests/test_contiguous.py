import pytest

from paged_lab.memory.errors import OutOfBlocks
from paged_lab.sched import ContiguousAllocator


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
    old.allocate("b", [1])
    with pytest.raises(OutOfBlocks):
        old.allocate("c", [1])
    assert old.seq_ids == ["a", "b"] and old.num_cached_tokens("a") == 0
