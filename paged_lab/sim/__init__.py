"""Simulation: the real Scheduler and allocator over a workload, with no model (notebooks 02 and 05).

    from paged_lab.memory import BlockManager
    from paged_lab.sim import simulate, workloads
    res = simulate(workloads.windows_story(), BlockManager(64, 4), {"max_num_seqs": 3, "mode": "static"})
    res.makespan   # 8 rounds (continuous: 6)

``workloads`` makes the requests, ``latency`` and ``timing`` turn a run into waits and seconds,
``sweep`` runs a grid of settings, ``kv_check`` replays a run's KV stores and reads to prove that
no request reads another's tokens.
"""

from paged_lab.sim import workloads
from paged_lab.sim.simulate import (
           Chunk,
           SimResult,
           Span,
           memory_stats,
           paged,
           simulate,
           slot_map,
           synthetic_token,
)
from paged_lab.sim.workloads import Request, Workload

__all__ = ["Chunk", "Request", "SimResult", "Span", "Workload", "memory_stats", "paged", "simulate",
           "slot_map", "synthetic_token", "workloads"]
