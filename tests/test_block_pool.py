"""BlockPool: refcounts, the least-recently-freed free queue, the prefix-cache index."""

import pytest
from scriptkit import load_script

from paged_lab.memory import BlockPool, InvalidBlockConfig, OutOfBlocks
from paged_lab.memory.free_queue import FreeBlockQueue


@pytest.mark.parametrize("kwargs, name", [
    ({"num_blocks": 0, "block_size": 4}, "num_blocks"),
    ({"num_blocks": -3, "block_size": 4}, "num_blocks"),
    ({"num_blocks": 8, "block_size": 0}, "block_size"),
    ({"num_blocks": 8, "block_size": 2.0}, "block_size"),
    ({"num_blocks": True, "block_size": 4}, "num_blocks"),
])
def test_invalid_config_names_the_argument(kwargs, name):
    with pytest.raises(InvalidBlockConfig, match=name):
        BlockPool(**kwargs)
    with pytest.raises(ValueError):  # also a ValueError, for callers that catch the builtin
        BlockPool(**kwargs)


def test_fresh_pool_hands_out_ids_in_order():
    pool = BlockPool(4, 16)
    assert [pool.allocate()[0] for _ in range(4)] == [0, 1, 2, 3]
    assert list(pool.refcounts) == [1, 1, 1, 1]
    assert pool.num_free_blocks == 0 and pool.num_used_blocks == 4


def test_free_queue_is_least_recently_freed_first_under_the_papers_rule():
    pool = BlockPool(5, 4, reuse="lru")
    for _ in range(5):
        pool.allocate()
    for b in (3, 0, 4):
        assert pool.release(b) is True
    assert pool.peek_free(3) == [3, 0, 4]
    assert [pool.allocate()[0] for _ in range(3)] == [3, 0, 4]


def test_v1_hands_out_the_most_recently_freed_uncached_block_first():
    pool = BlockPool(5, 4)  # reuse="v1": vLLM's BlockPool.free_blocks
    for _ in range(5):
        pool.allocate()
    for b in (3, 0, 4):
        assert pool.release(b) is True
    assert [pool.allocate()[0] for _ in range(3)] == [4, 0, 3]
    with pytest.raises(InvalidBlockConfig, match=r"reuse must be one of \('v1', 'lru'\), got 'fifo'"):
        BlockPool(5, 4, reuse="fifo")


def test_touch_and_release_keep_refcounts_and_queue_in_step():
    pool = BlockPool(3, 4, reuse="lru")
    b, _ = pool.allocate()
    pool.touch(b)
    assert pool.refcounts[b] == 2
    assert pool.release(b) is False and b not in pool.free_queue
    assert pool.release(b) is True and list(pool.free_queue)[-1] == b
    pool.touch(b)  # touching a free block takes it back out of the queue
    assert pool.refcounts[b] == 1 and b not in pool.free_queue


def test_allocate_from_empty_pool_raises_out_of_blocks():
    pool = BlockPool(1, 4)
    pool.allocate()
    with pytest.raises(OutOfBlocks, match="1 free block"):
        pool.allocate()


def test_cached_block_is_evicted_when_handed_out_again():
    pool = BlockPool(2, 2)
    b, _ = pool.allocate()
    assert pool.cache(b, b"h-78")
    assert pool.lookup(b"h-78") == b
    pool.release(b)
    assert pool.lookup(b"h-78") == b  # still reusable while it waits in the free queue
    assert pool.allocate() == (1, None)  # the queue is [1, 0]: block 0 was freed last
    assert pool.allocate() == (0, b"h-78")  # now its content is overwritten: the hash is evicted
    assert pool.lookup(b"h-78") is None and pool.cached == {} and pool.block_hash == {}


def test_cache_finds_the_first_block_for_a_hash_and_keeps_the_others():
    """Two requests that computed the same block both keep theirs cached, as vLLM's BlockHashToBlockMap
    does; a lookup finds the first one, and the second once the first is evicted."""
    pool = BlockPool(3, 2)
    a, _ = pool.allocate()
    b, _ = pool.allocate()
    assert pool.cache(a, b"x") is True
    assert pool.cache(b, b"x") is True  # same content elsewhere: cached too
    assert pool.cache(a, b"y") is False  # a block holds one content only
    assert pool.cached == {b"x": a} and pool.block_hash == {a: b"x", b: b"x"}
    pool.uncache(a)
    assert pool.lookup(b"x") == b
    pool.uncache(b)
    assert pool.lookup(b"x") is None and pool.cached == {}
    pool.cache(a, b"x")
    assert pool.reset_cache() == 1 and pool.cached == {} and pool.block_hash == {}


@pytest.mark.parametrize("n", [1, 2, 7])
def test_free_queue_links_stay_consistent(n):
    q = FreeBlockQueue(n)
    assert list(q) == list(range(n)) and len(q) == n
    order = list(range(n))
    for b in reversed(range(0, n, 2)):  # unlink from the middle, then re-append at the end
        q.remove(b)
        assert b not in q
        order.remove(b)
        q.append(b)
        order.append(b)
        assert list(q) == order and len(q) == n and b in q
    assert [q.popleft() for _ in range(n)] == order and len(q) == 0 and list(q) == []


def test_benchmark_script_runs(capsys):
    bench = load_script("benchmarks/block_manager_ops.py")
    ratios = bench.main(["--quick", "--sizes", "100", "2000"])
    assert set(ratios) == {False, True} and all(r > 0 for r in ratios.values())
    assert "ratio 2,000 / 100 blocks" in capsys.readouterr().out
