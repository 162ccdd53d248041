"""Scheduling: sequences, static and continuous batching, admission, preemption, and simulate().

    from paged_lab.sched import Scheduler, Sequence, simulate, workloads
    from paged_lab.memory import BlockManager
    res = simulate(workloads.windows_story(), BlockManager(64, 4), {"max_num_seqs": 3, "mode": "static"})
    res.makespan   # 8 rounds (continuous: 6)
"""

from paged_lab.sched import workloads
from paged_lab.sched.contiguous import ContiguousAllocator
from paged_lab.sched.scheduler import (
    RequestTooLargeError,
    ScheduledSeq,
    Scheduler,
    SchedulerOutput,
)
from paged_lab.sched.sequence import Sequence, SequenceStatus
from paged_lab.sched.simulate import SimResult, Span, memory_stats, paged, simulate, slot_map, synthetic_token
from paged_lab.sched.workloads import Request, Workload

__all__ = [
    "ContiguousAllocator", "Request", "RequestTooLargeError", "ScheduledSeq", "Scheduler",
    "SchedulerOutput", "Sequence", "SequenceStatus", "SimResult", "Span", "Workload", "memory_stats",
    "paged", "simulate", "slot_map", "synthetic_token", "workloads",
]
