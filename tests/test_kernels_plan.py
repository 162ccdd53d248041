"""The engine's fast path (a GatherPlan shared by all layers, checks once per step) computes the same
attention as the self-contained call."""

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
    q = torch.randn(sum(q_lens), 8, 64, generator=torch.Generator().manual_seed(4))  # [num_tokens, heads, dim]
    args = (q, kv.k_cache, kv.v_cache, kv.block_tables, kv.context_lens, qsl, 0.125)
    plain = paged_attention_prefill(*args, backend="torch")
    plan = plan_gather(kv.block_tables, kv.context_lens, kv.block_size, query_start_loc=qsl)
    fast = paged_attention_prefill(*args, backend="torch", validate=False, plan=plan)
    torch.testing.assert_close(fast, plain)
    torch.testing.assert_close(fast, paged_attention_prefill(*args, backend="reference"), atol=1e-5, rtol=1e-5)


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
