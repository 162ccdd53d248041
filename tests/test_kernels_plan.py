"""The engine's fast path (a GatherPlan shared by all layers, checks once per step) computes the same
attention as the self-contained call."""

import pytest
import torch

from paged_lab.kernels import paged_attention_decode, paged_attention_prefill, store_kv
from paged_lab.kernels.synthetic import random_paged_kv
from paged_lab.kernels.torch_paged import plan_gather


def test_decode_with_a_shared_plan_equals_the_plain_call():
    kv = random_paged_kv([1, 7, 16, 23], block_size=8, num_kv_heads=3, head_dim=64, seed=1)
    q = torch.randn(4, 9, 64, generator=torch.Generator().manual_seed(2))  # [num_seqs, num_heads, head_dim]
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, 0.125)
    plain = paged_attention_decode(*args, backend="torch")
    plan = plan_gather(kv.block_tables, kv.context_lens, kv.block_size)
    fast = paged_attention_decode(*args, backend="torch", validate=False, plan=plan)
    reference = paged_attention_decode(*args, backend="reference")
    assert not plain.isnan().any()
    torch.testing.assert_close(fast, plain)
    torch.testing.assert_close(fast, reference, atol=1e-5, rtol=1e-5)


def test_prefill_with_a_shared_plan_equals_the_plain_call():
    lens = [5, 12, 20]
    kv = random_paged_kv(lens, block_size=4, num_kv_heads=2, head_dim=64, seed=3)
    q_lens = [5, 3, 6]  # a whole prompt, then chunks that start mid-block
    qsl = torch.tensor([0, 5, 8, 14], dtype=torch.int32)
    # [num_tokens, heads, dim]
    q = torch.randn(sum(q_lens), 8, 64, generator=torch.Generator().manual_seed(4))
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, 0.125)
    plain = paged_attention_prefill(*args, backend="torch")
    plan = plan_gather(kv.block_tables, kv.context_lens, kv.block_size, query_start_loc=qsl)
    fast = paged_attention_prefill(*args, backend="torch", validate=False, plan=plan)
    torch.testing.assert_close(fast, plain)
    torch.testing.assert_close(fast, paged_attention_prefill(*args, backend="reference"), atol=1e-5,
                               rtol=1e-5)


def test_store_through_a_plan_writes_the_same_slots_and_skips_padding():
    """The plan's precomputed slots (one index_copy_ per cache) against the reference's masked index_put."""
    kv = random_paged_kv([9, 4], block_size=4, num_kv_heads=2, head_dim=8, seed=5)
    g = torch.Generator().manual_seed(6)
    k, v = torch.randn(4, 2, 8, generator=g), torch.randn(4, 2, 8, generator=g)  # [num_tokens, kv_heads, d]
    slot_mapping = torch.tensor([kv.block_tables[0, 2] * 4 + 1, -1, kv.block_tables[1, 0] * 4 + 3, -1])
    want_k, want_v = kv.k_cache.clone(), kv.v_cache.clone()
    store_kv(k, v, want_k, want_v, slot_mapping, backend="reference")
    plan = plan_gather(kv.block_tables, kv.context_lens, kv.block_size, slot_mapping=slot_mapping)
    assert plan.store_rows.tolist() == [0, 2]
    got_k, got_v = kv.k_cache.clone(), kv.v_cache.clone()
    store_kv(k, v, got_k, got_v, slot_mapping, backend="torch", validate=False, plan=plan)
    exact = dict(atol=0, rtol=0, equal_nan=True)  # the synthetic pool holds NaN in unused slots
    torch.testing.assert_close(got_k, want_k, **exact)
    torch.testing.assert_close(got_v, want_v, **exact)
    b = int(kv.block_tables[1, 0])
    assert torch.equal(got_k[b, 3], k[2]) and torch.equal(got_v[b, 3], v[2])  # written where the slot says
    no_padding = plan_gather(kv.block_tables, kv.context_lens, kv.block_size, slot_mapping=slot_mapping.abs())
    assert no_padding.store_rows is None  # every token stored: no row selection at all


def test_store_and_decode_on_one_layer_tensor_equals_store_then_decode():
    """The compiled decode step's fused path: K and V of a layer as the halves of one [2, ...] tensor,
    stored, gathered and zeroed with one op each; the NaN-filled unused slots must not leak in."""
    from paged_lab.kernels.torch_paged import fused_store_and_decode

    kv = random_paged_kv([3, 9, 16, 30], block_size=4, num_kv_heads=3, head_dim=64, seed=7)
    g = torch.Generator().manual_seed(8)
    S = kv.block_tables.shape[0]
    q = torch.randn(S, 9, 64, generator=g)  # [num_seqs, heads, d]
    k, v = torch.randn(S, 3, 64, generator=g), torch.randn(S, 3, 64, generator=g)  # [num_seqs, kv_heads, d]
    last = kv.context_lens.long() - 1  # each sequence's new token is its last position
    slots = kv.block_tables.long().gather(1, (last // 4)[:, None]).squeeze(1) * 4 + last % 4
    want_k, want_v = kv.k_cache.clone(), kv.v_cache.clone()
    store_kv(k, v, want_k, want_v, slots, backend="reference")
    want = paged_attention_decode(q, want_k, want_v, kv.block_tables, kv.context_lens, 0.125,
                                  backend="reference")
    layer = torch.stack((kv.k_cache, kv.v_cache))  # [2, num_blocks, block_size, kv_heads, d]
    plan = plan_gather(kv.block_tables, kv.context_lens, kv.block_size, slot_mapping=slots)
    got = fused_store_and_decode(q, k, v, layer, plan, 0.125)
    assert not got.isnan().any()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    exact = dict(atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(layer[0], want_k, **exact)
    torch.testing.assert_close(layer[1], want_v, **exact)


def test_a_mixed_step_split_into_decodes_and_prefills_attends_as_one_batch():
    """PagedAttention on a mixed step: two one-token queries (decodes) and a 6-token prefill chunk, attended
    apart (num_decodes=2: decode kernel + prefill kernel) and together (the prefill kernel pads every query
    to 6); the backend's plan of the step, not the metadata, holds the parts and the checked flag."""
    from paged_lab.engine.attention import AttentionMetadata, PagedAttention

    lens = [11, 5, 14]
    kv = random_paged_kv(lens, block_size=4, num_kv_heads=3, head_dim=64, seed=9)
    g = torch.Generator().manual_seed(10)
    q_lens = [1, 1, 6]
    n = sum(q_lens)
    q = torch.randn(n, 9, 64, generator=g)  # [num_tokens, heads, d]
    k, v = torch.randn(n, 3, 64, generator=g), torch.randn(n, 3, 64, generator=g)
    tables = kv.block_tables.long()
    pos = torch.cat([torch.arange(c - ql, c) for c, ql in zip(lens, q_lens)])  # each query token's position
    seq = torch.repeat_interleave(torch.arange(3), torch.tensor(q_lens))
    slots = tables[seq, pos // 4] * 4 + pos % 4

    def meta(num_decodes):
        qsl = torch.tensor([0, 1, 2, n], dtype=torch.int32)
        return AttentionMetadata(slots, kv.block_tables, kv.context_lens, qsl, is_decode=False,
                                 max_query_len=6, num_decodes=num_decodes)

    whole, split = meta(0), meta(2)
    outs, parts = [], []
    for m in (whole, split):
        k_cache, v_cache = kv.k_cache.clone(), kv.v_cache.clone()
        attention = PagedAttention("torch")
        outs.append((attention(q, k, v, k_cache, v_cache, m, 0.125), k_cache, v_cache))
        parts.append(attention.prepare(m, k_cache, v_cache))  # the plan the call built (kept for this meta)
    ref_k, ref_v = kv.k_cache.clone(), kv.v_cache.clone()
    ref = PagedAttention("reference")(q, k, v, ref_k, ref_v, whole, 0.125)
    (a, ak, av), (b, bk, bv) = outs
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b, ref, atol=1e-5, rtol=1e-5)
    exact = dict(atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(bk, ak, **exact)
    torch.testing.assert_close(bv, av, **exact)
    assert [len(p) for p in parts] == [1, 2]  # attended whole, and as (decodes, prefills)
    (decodes, decode_plan), (prefills, _) = parts[1]
    assert decodes.is_decode and decodes.num_decodes == 2 and prefills.query_start_loc.tolist() == [0, 6]
    assert decode_plan.checked and decode_plan.gather is not None  # checked on its first call, planned once
    assert split.num_decodes == 2 and not hasattr(split, "plan")  # the metadata holds the step's tensors only


@pytest.mark.parametrize("backend", ["torch", "reference", "auto"])
@pytest.mark.parametrize("one_tensor", [True, False])
def test_dispatch_store_and_decode_equals_store_then_decode(backend, one_tensor):
    """kernels.store_and_decode, the public entry point of a decode layer: with the step's plan and a layer's
    K/V as the halves of one tensor (engine.KVCache) the torch backend takes its fused path, else the
    backend's store then its decode; the results and the caches are the same either way."""
    from paged_lab.kernels import store_and_decode, uses_plan

    kv = random_paged_kv([3, 9, 16, 30], block_size=4, num_kv_heads=3, head_dim=64, seed=7)
    g = torch.Generator().manual_seed(8)
    S = kv.block_tables.shape[0]
    q, k, v = torch.randn(S, 9, 64, generator=g), torch.randn(S, 3, 64, generator=g), torch.randn(S, 3, 64,
                                                                                                  generator=g)
    last = kv.context_lens.long() - 1
    slots = kv.block_tables.long().gather(1, (last // 4)[:, None]).squeeze(1) * 4 + last % 4
    want_k, want_v = kv.k_cache.clone(), kv.v_cache.clone()
    store_kv(k, v, want_k, want_v, slots, backend="reference")
    want = paged_attention_decode(q, want_k, want_v, kv.block_tables, kv.context_lens, 0.125,
                                  backend="reference")
    layer = torch.stack((kv.k_cache, kv.v_cache))  # [2, num_blocks, block_size, kv_heads, d]
    k_cache, v_cache = (layer[0], layer[1]) if one_tensor else (kv.k_cache.clone(), kv.v_cache.clone())
    plan = (plan_gather(kv.block_tables, kv.context_lens, 4, slot_mapping=slots)
            if uses_plan(backend, k_cache) else None)
    got = store_and_decode(q, k, v, k_cache, v_cache, slots, kv.block_tables, kv.context_lens, 0.125,
                           backend=backend, plan=plan)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    exact = dict(atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(k_cache, want_k, **exact)
    torch.testing.assert_close(v_cache, want_v, **exact)


def test_a_plan_says_whether_it_can_fuse_store_and_decode():
    kv = random_paged_kv([3, 9], block_size=4, num_kv_heads=1, head_dim=16, seed=1)
    slots = torch.tensor([2, 20])
    assert plan_gather(kv.block_tables, kv.context_lens, 4, slot_mapping=slots).can_fuse
    assert not plan_gather(kv.block_tables, kv.context_lens, 4, slot_mapping=torch.tensor([2, -1])).can_fuse
    assert not plan_gather(kv.block_tables, kv.context_lens, 4).can_fuse  # no slot_mapping: it cannot store
