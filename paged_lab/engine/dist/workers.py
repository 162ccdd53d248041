"""Worker processes and their process group: start them, talk to them, and never leave one behind.

A tensor-parallel engine (``dist.tp``) and the prefill/decode handoff (``dist.handoff``) run ranks 1..N-1
in worker processes; rank 0 is the caller's own process, which schedules and then takes part in every
collective like the others (vLLM V0's "driver worker"; V1 runs every rank in a worker and the scheduler
in an engine-core process, ``MultiprocExecutor`` in ``vllm/v1/executor/multiproc_executor.py``).

    workers = Workers.start(serve, size=3, rank_args=lambda r: (...,))  # spawns ranks 1, 2; waits for them
    group = workers.group                        # rank 0's torch.distributed process group (gloo)
    workers.broadcast("step", batch)             # one pickled message to every worker, in order
    workers.call("pool_info")                    # ask each worker; their replies, rank 1 first

The ranks meet over ``torch.distributed``: a ``TCPStore`` on localhost and a gloo ``ProcessGroupGloo``,
built directly rather than through ``init_process_group``, so one Python process can hold several engines.
``torch.distributed.all_reduce(t, group=...)`` takes such a group; point-to-point goes through the group's
own ``send``/``recv`` (``dist.send`` asks for a registered group). On GPUs the same collectives run on NCCL
(not run here). Workers are spawned (a fresh interpreter each), so a script that starts them must guard its
top level with ``if __name__ == "__main__":``, as any script using vLLM's multiprocessing must.

Stopping, the part that is easy to get wrong:
- a worker ignores SIGINT (a terminal's Ctrl-C reaches every process of its group): the caller decides
  what a Ctrl-C means, and its step finishes first (``paged_lab._interrupts``), so all ranks stay in step;
- a worker dies with its parent (Linux ``PR_SET_PDEATHSIG``), and exits when its pipe closes;
- when one worker fails or dies, ``stop()`` ends every other one (SIGTERM, then SIGKILL) and reaps it, and
  the error names the rank; ``stop()`` also runs when the owner is garbage-collected or Python exits.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import socket
import sys
import traceback
import weakref
from datetime import timedelta
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

START_TIMEOUT_S = 120.0  # a worker that is not up by then is a failed start
COLLECTIVE_TIMEOUT = timedelta(seconds=120)  # gloo gives up on a peer that neither answers nor hangs up


class WorkerError(RuntimeError):
    """A worker process failed or died; every worker of its group has been stopped."""


def process_group(rank: int, size: int, port: int) -> dist.ProcessGroup:
    """This rank's gloo process group of ``size`` ranks, met through a TCPStore on localhost:``port``
    (rank 0 hosts the store)."""
    store = dist.TCPStore("127.0.0.1", port, size, rank == 0, timeout=COLLECTIVE_TIMEOUT)
    return dist.ProcessGroupGloo(store, rank, size, COLLECTIVE_TIMEOUT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the kernel sends this process SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def worker_main(target, rank: int, size: int, port: int, conn, args: tuple) -> None:
    """A worker process's body: join the group, tell rank 0 it is up, then serve ``target``'s handler
    (``target(rank, group, *args)`` returns ``handle(op, *payload) -> reply``) until told to stop. An
    exception is sent to rank 0 and ends the process (its peers see the connection close)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    try:
        conn.send(("up", rank))  # alive, arguments received: rank 0 may now wait in the group's rendezvous
        group = process_group(rank, size, port)
        handle = target(rank, group, *args)
        conn.send(("ready", rank))
        while True:
            try:
                op, *payload = pickle.loads(conn.recv_bytes())
            except EOFError:  # rank 0 has gone
                return
            if op == "stop":
                return
            reply = handle(op, *payload)
            if reply is not None:
                conn.send(("reply", reply))
    except BaseException:
        conn.send(("error", f"rank {rank}: {traceback.format_exc(limit=4)}"))
        raise SystemExit(1) from None


class Workers:
    """Ranks 1..size-1 in spawned processes, and rank 0's end of their process group and pipes."""

    def __init__(self, procs: list, conns: list, group, size: int):
        self.procs, self.conns, self.group, self.size = procs, conns, group, size
        self.failure: str | None = None  # why the workers were stopped, once they have been
        self._finalizer = weakref.finalize(self, _stop, procs, conns)

    @classmethod
    def start(cls, target, size: int, rank_args=lambda rank: ()) -> Workers:
        """Spawn ranks 1..size-1 running ``worker_main(target, ..., rank_args(rank))``, join the group as
        rank 0 and wait until every worker is up. A worker that fails to start stops them all and raises
        WorkerError. Tensors in the arguments reach the worker in shared memory (torch.multiprocessing)."""
        ctx, port = mp.get_context("spawn"), _free_port()
        procs, conns = [], []
        for rank in range(1, size):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(target, rank, size, port, theirs, rank_args(rank)),
                               name=f"paged_lab-rank{rank}", daemon=True)
            proc.start()
            theirs.close()
            procs.append(proc)
            conns.append(ours)
        workers = cls(procs, conns, None, size)
        try:
            workers.collect("up", timeout=START_TIMEOUT_S)  # (a worker that died at start is seen here)
            workers.group = process_group(0, size, port)
            workers.collect("ready", timeout=START_TIMEOUT_S)
        except BaseException as err:
            workers.stop(f"start failed: {err}")
            raise
        return workers

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def broadcast(self, op: str, *payload) -> None:
        """Send ``(op, *payload)`` to every worker (pickled once)."""
        self.check()
        data = pickle.dumps((op, *payload))
        try:
            for conn in self.conns:
                conn.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError, OSError) as err:
            raise self.fail(f"a worker's pipe closed: {err}") from err

    def call(self, op: str, *payload, timeout: float = START_TIMEOUT_S) -> list:
        """Send ``(op, *payload)`` and return every worker's reply, rank 1 first."""
        self.broadcast(op, *payload)
        return self.collect("reply", timeout)

    def collect(self, kind: str, timeout: float) -> list:
        """One message of ``kind`` from each worker, in rank order. A worker that reports an error, dies
        or stays silent past ``timeout`` seconds stops them all (WorkerError)."""
        got: dict[int, object] = {}
        while len(got) < len(self.conns):
            waiting = {c: i for i, c in enumerate(self.conns) if i not in got}
            sentinels = {p.sentinel: i for i, p in enumerate(self.procs) if i not in got}
            ready = wait([*waiting, *sentinels], timeout)
            if not ready:
                raise self.fail(f"no answer from rank(s) {[i + 1 for i in waiting.values()]} in {timeout} s")
            for r in ready:
                if r in waiting and r.poll():
                    tag, value = r.recv()
                    if tag == "error":
                        raise self.fail(value)
                    if tag != kind:
                        raise self.fail(f"rank {waiting[r] + 1} sent {tag!r}, expected {kind!r}")
                    got[waiting[r]] = value
                elif r in sentinels:
                    raise self.fail(self.cause(f"rank {sentinels[r] + 1} exited (exit code "
                                               f"{self.procs[sentinels[r]].exitcode})"))
        return [got[i] for i in range(len(self.conns))]

    def cause(self, default: str) -> str:
        """The first error a worker sent before it exited, else ``default``."""
        for conn in self.conns:
            try:
                while conn.poll():
                    tag, value = conn.recv()
                    if tag == "error":
                        return value
            except (EOFError, OSError):
                continue
        return default

    def check(self) -> None:
        if self.failure is not None:
            raise WorkerError(f"the workers were stopped ({self.failure}); make a new engine")

    def fail(self, why: str) -> WorkerError:
        """Stop every worker and return the error to raise."""
        self.stop(why)
        return WorkerError(f"a worker failed, so every worker was stopped: {why}")

    def stop(self, why: str = "stopped") -> None:
        """End every worker (politely, then SIGTERM, then SIGKILL) and reap it. Idempotent."""
        if self.failure is None:
            self.failure = why
        self._finalizer()


def _stop(procs: list, conns: list) -> None:
    """Tell each worker to stop, wait briefly, then terminate and kill what is left, and reap them all."""
    for conn in conns:
        try:
            conn.send_bytes(pickle.dumps(("stop",)))
        except (OSError, ValueError):
            pass
    for proc in procs:
        proc.join(timeout=2.0)
        if proc.is_alive():  # blocked in a collective whose peer is gone: SIGTERM ends it
            proc.terminate()
            proc.join(timeout=2.0)
        if proc.is_alive():
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()
