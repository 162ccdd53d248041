"""With validate=True a ``plan=`` is checked like every other argument: it must be the GatherPlan that
``plan_gather`` builds from the call's own tensors. A plan from another batch once reached the C kernels
unchecked and crashed the process (SIGSEGV), so the bad plans run in a child process: a crash there
fails this test instead of killing pytest."""

import json
import os
import subprocess
import sys

import pytest
import torch

from paged_lab.kernels import paged_attention_decode, paged_attention_prefill
from paged_lab.kernels.cpu import attention as cpu_attention
from paged_lab.kernels.synthetic import random_paged_kv
from paged_lab.kernels.torch_paged import plan_gather, plan_mismatch

# Each case: (name, the ValueError text expected). The child builds the tensors and the bad plan of
# each case, calls the entry point on every backend given, and prints one JSON line per call.
CASES = {
    "tables of another batch (block ids far past the pool)": "plan.table does not match",
    "another batch size": "plan.table has shape (3, 3)",
    "shorter contexts (a narrower table)": "plan.table is 1 block(s) wide, 8 tokens",
    "the same tables, other lengths": "plan.lens does not match",
    "not a GatherPlan": "plan must be a GatherPlan",
    "prefill: a decode plan (no query indices)": "plan has no query indices",
    "prefill: another split of the same contexts into queries": "plan.seq_of does not match",
    "prefill: a longer query than the plan's max_q": "plan.max_q is 2",
    "store_and_decode: another slot_mapping": "plan.store_slots/store_rows do not match slot_mapping",
}

_CHILD = r"""
import json, sys, torch
from paged_lab.kernels import paged_attention_decode, paged_attention_prefill, store_and_decode
from paged_lab.kernels.synthetic import random_paged_kv
from paged_lab.kernels.torch_paged import plan_gather

kv = random_paged_kv([5, 20], block_size=8, num_kv_heads=2, head_dim=64, seed=1)
bt, cl, bs = kv.block_tables, kv.context_lens, 8
q = torch.randn(2, 4, 64)
far = torch.full_like(bt, 10**7)  # block ids no pool has
qsl = torch.tensor([0, 2, 6], dtype=torch.int32)  # queries of 2 and 4 tokens
qp = torch.randn(6, 4, 64)
last = cl.long() - 1
slots = bt.long().gather(1, (last // bs)[:, None]).squeeze(1) * bs + last % bs
k, v = torch.randn(2, 2, 64), torch.randn(2, 2, 64)

def decode(plan, backend):
    return paged_attention_decode(q, kv.k_cache, kv.v_cache, bt, cl, 0.125, backend=backend, plan=plan)

def prefill(plan, backend):
    return paged_attention_prefill(qp, kv.k_cache, kv.v_cache, bt, cl, qsl, 0.125, backend=backend, plan=plan)

def fused(plan, backend):
    return store_and_decode(q, k, v, kv.k_cache.clone(), kv.v_cache.clone(), slots, bt, cl, 0.125,
                            backend=backend, plan=plan)

cases = {
    "tables of another batch (block ids far past the pool)": (decode, plan_gather(far, cl, bs)),
    "another batch size": (decode, plan_gather(torch.cat((bt, bt[:1])), torch.cat((cl, cl[:1])), bs)),
    "shorter contexts (a narrower table)": (decode, plan_gather(bt, torch.tensor([5, 5]), bs)),
    "the same tables, other lengths": (decode, plan_gather(bt, torch.tensor([6, 19]), bs, max_ctx=20)),
    "not a GatherPlan": (decode, {"table": bt, "lens": cl}),
    "prefill: a decode plan (no query indices)": (prefill, plan_gather(bt, cl, bs)),
    "prefill: another split of the same contexts into queries":
        (prefill, plan_gather(bt, cl, bs, query_start_loc=torch.tensor([0, 4, 6]))),
    "prefill: a longer query than the plan's max_q":
        (prefill, plan_gather(bt, cl, bs, query_start_loc=torch.tensor([0, 2, 6]), max_query_len=2)),
    "store_and_decode: another slot_mapping": (fused, plan_gather(bt, cl, bs, slot_mapping=slots.flip(0))),
}
for backend in sys.argv[1:]:
    for name, (call, plan) in cases.items():
        try:
            call(plan, backend)
            result = "no error"
        except ValueError as e:
            result = f"ValueError: {e}"
        except Exception as e:  # IndexError, RuntimeError...: not the named check
            result = f"{type(e).__name__}: {e}"
        print(json.dumps([backend, name, result]), flush=True)
"""


def test_plans_that_do_not_belong_to_the_call_raise_a_value_error_naming_plan():
    backends = ["auto", "torch", "reference"] + (["cpu"] if cpu_attention.available() else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", _CHILD, *backends], capture_output=True, text=True, env=env,
                         timeout=300)
    got = {(b, name): result for b, name, result in map(json.loads, res.stdout.splitlines())}
    assert res.returncode == 0, (f"the child died (rc {res.returncode}) after {len(got)} calls: "
                                 f"{res.stderr[-2000:]}")
    assert set(CASES) <= {name for _, name in got}, "the child and CASES list different cases"
    wrong = {key: result for key, result in got.items()
             if not (result.startswith("ValueError: plan") and CASES[key[1]] in result)}
    assert not wrong, "\n".join(f"{b} / {name}: {result}" for (b, name), result in wrong.items())


def test_the_plan_built_from_the_call_passes_and_gives_the_same_attention():
    """The check does not reject the plans the engine builds: decode, prefill (with max_ctx and
    max_query_len given, as the engine gives them) and with a slot_mapping that has padding."""
    kv = random_paged_kv([5, 20], block_size=8, num_kv_heads=2, head_dim=64, seed=1)
    bt, cl = kv.block_tables, kv.context_lens
    q = torch.randn(2, 4, 64)
    plan = plan_gather(bt, cl, 8, max_ctx=20)
    assert plan_mismatch(plan, 8, bt, cl) is None
    args = (kv.k_cache, kv.v_cache, bt, cl)
    torch.testing.assert_close(paged_attention_decode(q, *args, 0.125, plan=plan),
                               paged_attention_decode(q, *args, 0.125, backend="reference"), atol=1e-5,
                               rtol=1e-5)
    qsl = torch.tensor([0, 2, 6], dtype=torch.int32)
    slots = torch.tensor([3, -1, 40, 41, 42, -1])
    plan = plan_gather(bt, cl, 8, max_ctx=20, query_start_loc=qsl, slot_mapping=slots, max_query_len=4)
    assert plan_mismatch(plan, 8, bt, cl, query_start_loc=qsl, slot_mapping=slots) is None
    qp = torch.randn(6, 4, 64)
    torch.testing.assert_close(paged_attention_prefill(qp, *args, qsl, 0.125, plan=plan, max_query_len=4),
                               paged_attention_prefill(qp, *args, qsl, 0.125, backend="reference"),
                               atol=1e-5, rtol=1e-5)


def test_max_query_len_below_the_longest_query_is_refused():
    kv = random_paged_kv([5, 20], block_size=8, num_kv_heads=2, head_dim=64, seed=1)
    qsl = torch.tensor([0, 2, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match="max_query_len 3 is less than the longest query, 4 tokens"):
        paged_attention_prefill(torch.randn(6, 4, 64), kv.k_cache, kv.v_cache, kv.block_tables,
                                kv.context_lens,
                                qsl, 0.125, max_query_len=3)
