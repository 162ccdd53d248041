"""Scheduling: sequences, static and continuous batching, admission, preemption (notebook 05).

    from paged_lab.sched import Scheduler, Sequence
    from paged_lab.memory import BlockManager
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=3, mode="static")
    sched.add_request(Sequence("a", prompt_token_ids=[1, 2, 3], max_tokens=4))
    out = sched.schedule()             # this step's work: a SchedulerOutput
    sched.update(out, [42])            # one sampled token per entry of out.sampling

``paged_lab.sim.simulate`` runs this Scheduler over a whole workload with no model.
"""

from paged_lab.sched.output import ScheduledSeq, SchedulerOutput
from paged_lab.sched.scheduler import RequestTooLargeError, Scheduler
from paged_lab.sched.sequence import Sequence, SequenceStatus
from paged_lab.sched.tiered import TieredScheduler

__all__ = ["RequestTooLargeError", "ScheduledSeq", "Scheduler", "SchedulerOutput", "Sequence",
           "SequenceStatus", "TieredScheduler"]
