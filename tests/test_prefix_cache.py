"""Prefix caching: chained block hashes, reuse of cached full blocks, LRU eviction, token counting."""

import pytest

from paged_lab.memory import BlockManager, OutOfBlocks, block_hashes, hash_block

SYSTEM = list(range(100, 112))  # a 12-token "system prompt": 3 full blocks of 4


def test_hash_chains_the_parent_and_salts_with_extra_key():
    h1 = hash_block(None, (1, 2))
    assert isinstance(h1, bytes) and len(h1) == 16
    assert hash_block(None, [1, 2]) == h1  # a list or a tuple of the same ids
    assert hash_block(h1, (3, 4)) != hash_block(None, (3, 4))  # same tokens, different prefix
    assert hash_block(None, (1, 2), extra_key="lora-a") != h1
    assert hash_block(None, (2, 1)) != h1
    assert block_hashes([1, 2, 3, 4, 5], 2) == [h1, hash_block(h1, (3, 4))]  # only full blocks


def test_hash_is_the_same_in_every_process():
    # sha256, not Python's salted hash(): a fixed value, on any machine and in any run
    assert hash_block(None, (1, 2, 3, 4)).hex() == "8004e3109574120a4b713c8c374a7696"


def test_only_full_blocks_are_cached():
    bm = BlockManager(8, 4, enable_prefix_caching=True)
    table = bm.allocate("a", list(range(10)))  # blocks: full, full, 2 tokens
    assert set(bm.pool.cached.values()) == set(table[:2])
    assert table[2] not in bm.pool.block_hash


def test_second_request_hits_the_shared_prefix_in_the_same_step():
    bm = BlockManager(16, 4, enable_prefix_caching=True)
    a = bm.allocate("a", SYSTEM + [1, 2])
    b = bm.allocate("b", SYSTEM + [3, 4, 5])  # right after, no attention has run in between
    assert b[:3] == a[:3] and b[3] != a[3]
    assert [bm.refcount(x) for x in a[:3]] == [2, 2, 2]
    assert bm.num_cached_tokens("b") == 12 and bm.num_cached_tokens("a") == 0
    assert (bm.stats.prefix_cache_queries, bm.stats.prefix_cache_hits) == (14 + 15, 12)
    hit = [e for e in bm.events if e.kind == "hit"]
    assert len(hit) == 1 and hit[0].block_ids == tuple(a[:3]) and hit[0].num_tokens == 12


@pytest.mark.parametrize("n", [4, 5, 7, 8, 9, 12, 13])
def test_fully_cached_prompt_reuses_floor_len_minus_1_over_block_size(n):
    bm = BlockManager(16, 4, enable_prefix_caching=True)
    prompt = list(range(n))
    first = bm.allocate("a", prompt)
    second = bm.allocate("b", prompt)
    reused = (n - 1) // 4
    assert second[:reused] == first[:reused]
    assert len(set(second[reused:]) & set(first)) == 0  # the rest (with the last token) is recomputed
    assert bm.num_cached_tokens("b") == reused * 4
    assert bm.stats.prefix_cache_hits == reused * 4 and bm.stats.prefix_cache_queries == 2 * n
    bm.check_invariants()


def test_finished_sequence_blocks_are_reused_from_the_free_queue_until_evicted():
    bm = BlockManager(6, 4, enable_prefix_caching=True)
    a = bm.allocate("a", SYSTEM + [1])  # 4 blocks
    bm.free("a")
    assert bm.num_free_blocks == 6
    b = bm.allocate("b", SYSTEM + [2])
    assert b[:3] == a[:3]  # revived: refcount 0 -> 1, out of the free queue
    assert all(x not in bm.pool.free_queue for x in b)
    assert bm.num_free_blocks == 2
    bm.check_invariants()


def test_lru_eviction_overwrites_the_oldest_freed_block_first():
    bm = BlockManager(4, 2, enable_prefix_caching=True, reuse="lru")  # a plain FIFO, not vLLM's rule
    assert bm.allocate("old", [1, 1, 9]) == [0, 1]  # block 0 holds (1, 1), cached
    assert bm.allocate("new", [2, 2, 9]) == [2, 3]  # block 2 holds (2, 2), cached
    bm.free("old")
    bm.free("new")
    assert bm.pool.peek_free(4) == [1, 0, 3, 2]  # oldest freed first, each table tail first
    assert bm.allocate("x", [5, 5, 5]) == [1, 0]  # block 0's (1, 1) is overwritten
    assert [e.block_ids for e in bm.events if e.kind == "evict"] == [(0,)]
    assert bm.allocate("y", [2, 2, 7]) == [2, 3]  # (2, 2) survived in the queue: a hit
    assert bm.num_cached_tokens("y") == 2
    bm.free("x")
    bm.free("y")
    bm.allocate("z", [1, 1, 7])
    assert bm.num_cached_tokens("z") == 0  # (1, 1) is gone: a miss
    assert bm.stats.num_evictions == len([e for e in bm.events if e.kind == "evict"])
    bm.check_invariants()


def test_blocks_filled_by_generated_tokens_become_cacheable():
    bm = BlockManager(8, 4, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 5, 6])
    bm.append_token("a", 7)
    assert len(bm.pool.cached) == 1
    bm.append_token("a", 8)  # block 1 is full now
    assert len(bm.pool.cached) == 2
    table = bm.block_table("a")
    bm.free("a")
    b = bm.allocate("b", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert b[:2] == table and bm.num_cached_tokens("b") == 8


def test_extra_key_keeps_equal_prompts_apart():
    bm = BlockManager(16, 4, enable_prefix_caching=True)
    bm.allocate("a", SYSTEM + [1], extra_key="tenant-a")
    bm.allocate("b", SYSTEM + [1], extra_key="tenant-b")
    assert bm.stats.prefix_cache_hits == 0
    bm.allocate("c", SYSTEM[:4] + [1], extra_key="tenant-a")
    assert bm.stats.prefix_cache_hits == 4


def test_different_prefix_same_block_tokens_is_a_miss():
    bm = BlockManager(8, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 0])
    bm.allocate("b", [9, 9, 3, 4, 0])  # block (3, 4) follows a different parent
    assert bm.stats.prefix_cache_hits == 0


def test_can_allocate_with_token_ids_counts_hits_and_revived_blocks():
    bm = BlockManager(4, 4, enable_prefix_caching=True)
    bm.allocate("a", SYSTEM + [1])  # 4 blocks: the pool is full
    assert not bm.can_allocate(len(SYSTEM) + 1)  # a count cannot know about hits
    assert bm.num_blocks_needed(SYSTEM + [2]) == 1 and not bm.can_allocate(SYSTEM + [2])
    bm.free("a")
    # 3 cached blocks wait in the free queue: reviving them takes free blocks too
    assert bm.num_blocks_needed(SYSTEM + [2]) == 4 and bm.can_allocate(SYSTEM + [2])
    bm.allocate("b", SYSTEM + [2])
    assert bm.num_blocks_needed(SYSTEM + [3]) == 1 and not bm.can_allocate(SYSTEM + [3])
    with pytest.raises(OutOfBlocks):
        bm.allocate("c", SYSTEM + [3])
    bm.check_invariants()


def test_caching_off_never_hits_and_counts_nothing():
    bm = BlockManager(8, 4)
    a = bm.allocate("a", SYSTEM)
    b = bm.allocate("b", SYSTEM)
    assert not set(a) & set(b)
    assert bm.stats.prefix_cache_queries == 0 and bm.stats.hit_rate == 0.0 and bm.pool.cached == {}


def test_hit_rate_is_hits_over_queries_in_tokens():
    bm = BlockManager(16, 4, enable_prefix_caching=True)
    for i in range(4):
        bm.allocate(i, SYSTEM + [i, i])
    assert bm.stats.prefix_cache_queries == 4 * 14
    assert bm.stats.prefix_cache_hits == 3 * 12
    assert bm.stats.hit_rate == pytest.approx(36 / 56)


def test_reset_prefix_cache_forgets_hashes():
    bm = BlockManager(8, 4, enable_prefix_caching=True)
    bm.allocate("a", SYSTEM)
    assert bm.reset_prefix_cache() == 3  # all three blocks of the 12-token prompt are full
    bm.allocate("b", SYSTEM)
    assert bm.stats.prefix_cache_hits == 0
    bm.check_invariants()


def test_a_bad_token_id_changes_nothing():
    bm = BlockManager(4, 2, enable_prefix_caching=True)
    bm.allocate("a", [1])
    before = (bm.state(), len(bm.events), bm.token_ids("a"), bm.usage)
    with pytest.raises(TypeError):
        bm.append_token("a", "not a token id")  # would fill the block: hashing rejects it first
    assert (bm.state(), len(bm.events), bm.token_ids("a"), bm.usage) == before
