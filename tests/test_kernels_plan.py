"""The engine's fast path (a GatherPlan shared by all layers, checks once per step) computes the same
attention as the self-contained call."""

import torch

from paged_lab.kernels import paged_attention_decode, paged_attention_prefill
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
