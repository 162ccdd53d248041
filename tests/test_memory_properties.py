"""Property tests: thousands of random operation sequences (allocate, append, fork, free), with
prefix caching on and off. After every step the bookkeeping invariants must hold, and a shadow
"KV cache" (what each slot would hold if the caller did exactly what the manager says) must give
every sequence the right context: reused and copied blocks hold exactly the tokens they should.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paged_lab.memory import BlockManager, DuplicateSequence, OutOfBlocks, UnknownSequence, replay

EXAMPLES_PER_MODE = 1000  # x 2 modes (caching on / off) = 2,000 random operation sequences
BASES = ([0, 1, 0, 1, 1, 0, 0, 1], [2, 2, 2, 2, 2, 2], [0, 1, 0, 1, 2, 2, 2, 2])  # shared prefixes

token = st.integers(0, 2)
op = st.one_of(
    st.tuples(st.just("allocate"), st.sampled_from(range(len(BASES))), st.integers(0, 8),
              st.lists(token, max_size=5)),
    st.tuples(st.just("append"), st.integers(0, 63), token),
    st.tuples(st.just("append"), st.integers(0, 63), token),
    st.tuples(st.just("fork"), st.integers(0, 63)),
    st.tuples(st.just("free"), st.integers(0, 63)),
    st.tuples(st.just("bad"), st.integers(0, 3)),
)
config = st.tuples(st.integers(1, 12), st.integers(1, 4))  # num_blocks, block_size


def observable(bm):
    return (bm.state(), len(bm.events), vars(bm.stats).copy(), bm.usage,
            {s: bm.token_ids(s) for s in bm.seq_ids})


def assert_invariants(bm, kv):
    """Checked from the public API only, independently of BlockManager.check_invariants."""
    holders = {}
    bs = bm.block_size
    for sid in bm.seq_ids:
        table, n = bm.block_table(sid), bm.num_tokens(sid)
        assert len(table) == len(set(table)), "a block appears twice in one table"
        assert (len(table) - 1) * bs < n <= len(table) * bs, "the table has room for exactly its tokens"
        for b in table:
            holders[b] = holders.get(b, 0) + 1
        ids = bm.token_ids(sid)
        for p, slot in enumerate(bm.slot_mapping(sid)):
            assert kv.get(slot) == tuple(ids[: p + 1]), f"seq {sid}: slot {slot} holds the wrong KV"
    for b in range(bm.num_blocks):
        assert bm.refcount(b) == holders.get(b, 0), "refcount == number of tables holding the block"
    assert bm.num_free_blocks + bm.num_used_blocks == bm.num_blocks
    assert bm.num_used_blocks == len(holders)
    assert bm.stats.prefix_cache_hits <= bm.stats.prefix_cache_queries
    slots = {slot for sid in bm.seq_ids for slot in bm.slot_mapping(sid)}
    assert bm.used_slots == len(slots), "used_slots: every slot that holds a token, a shared one once"
    bm.check_invariants()


def run_ops(num_blocks, block_size, caching, ops):
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
    kv = {}  # shadow KV cache: slot -> the context its K/V were computed from
    next_id, dead = 0, []

    def write(sid, start):
        ids = bm.token_ids(sid)
        for p, slot in enumerate(bm.slot_mapping(sid, start), start):
            kv[slot] = tuple(ids[: p + 1])

    for kind, *args in ops:
        live = bm.seq_ids
        before = observable(bm)
        try:
            if kind == "allocate":
                base, cut, suffix = args
                prompt = BASES[base][:cut] + suffix or [0]
                bm.allocate(next_id, prompt)
                write(next_id, bm.num_cached_tokens(next_id))  # prefill computes the rest
                next_id += 1
            elif kind == "append" and live:
                sid = live[args[0] % len(live)]
                action = bm.append_token(sid, args[1])
                if action is not None:  # the caller copies the KV block
                    for off in range(block_size):
                        kv[action.dst * block_size + off] = kv.get(action.src * block_size + off)
                write(sid, bm.num_tokens(sid) - 1)
            elif kind == "fork" and live:
                bm.fork(live[args[0] % len(live)], next_id)
                next_id += 1
            elif kind == "free" and live:
                sid = live[args[0] % len(live)]
                bm.free(sid)
                dead.append(sid)
            elif kind == "bad":  # errors must leave the state untouched
                variant = args[0]
                if variant == 0 and dead:
                    bm.free(dead[-1])
                elif variant == 1 and live:
                    bm.allocate(live[0], [1])
                elif variant == 2 and live:
                    bm.fork(live[0], live[-1])
                elif variant == 3:
                    bm.append_token("never-allocated", 0)
        except OutOfBlocks:
            assert observable(bm) == before
        except (UnknownSequence, DuplicateSequence):
            assert kind == "bad" and observable(bm) == before
        assert_invariants(bm, kv)
    assert replay(bm.events, num_blocks) == bm.state()
    return bm


@settings(max_examples=EXAMPLES_PER_MODE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config, st.lists(op, min_size=8, max_size=40))
def test_random_operations_without_prefix_caching(cfg, ops):
    bm = run_ops(*cfg, caching=False, ops=ops)
    assert bm.stats.prefix_cache_queries == 0 and bm.pool.cached == {}


@settings(max_examples=EXAMPLES_PER_MODE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config, st.lists(op, min_size=8, max_size=40))
def test_random_operations_with_prefix_caching(cfg, ops):
    run_ops(*cfg, caching=True, ops=ops)
