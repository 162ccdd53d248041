"""Chunked prefill as a picture (notebook 05): step by step, what the Scheduler computed.

``scheduled_chunks`` runs a real :class:`~paged_lab.sched.Scheduler` (requests join at their step) and
records each step's ``ScheduledSeq`` entries as ``Chunk`` rows; ``fig_chunked_steps`` draws them: one
stacked bar per step, one colour per request, each prompt chunk labelled with the positions it computed
(``[6:12]``), each decode ``decode``, and the step's token budget ``max_num_batched_tokens`` as a line.
Nothing here decides anything the Scheduler does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import plotly.graph_objects as go

from paged_lab.memory import BlockManager
from paged_lab.sched import Scheduler
from paged_lab.sched import Sequence as Request
from paged_lab.viz.colors import seq_colors

SAMPLED_TOKEN = 7  # the token every sampling entry "samples": the scheduler only counts tokens


class Chunk(NamedTuple):
    """``name`` computed the KV of its positions ``start:end`` in engine step ``step``."""

    step: int
    name: str
    start: int
    end: int
    is_prefill: bool

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


def scheduled_chunks(scheduler: Scheduler, arrivals: Mapping[int, Iterable[Request]],
                     max_steps: int = 1000) -> list[list[Chunk]]:
    """Run ``scheduler`` until every request is done; ``arrivals``: step -> the requests that join the
    waiting queue before that step is scheduled. One list of ``Chunk`` per step, in schedule order."""
    pending = {step: list(reqs) for step, reqs in arrivals.items()}
    if any(step < 0 for step in pending):
        raise ValueError(f"arrival steps must be >= 0, got {sorted(pending)}")
    steps: list[list[Chunk]] = []
    while pending or scheduler.has_unfinished():
        if len(steps) >= max_steps:
            raise RuntimeError(f"not done after max_steps={max_steps} steps")
        for req in pending.pop(len(steps), []):
            scheduler.add_request(req)
        out = scheduler.schedule()
        steps.append([Chunk(len(steps), e.seq.name, e.start, e.end, e.is_prefill) for e in out.scheduled])
        scheduler.update(out, [SAMPLED_TOKEN] * len(out.sampling))
    return steps


def chunked_prefill_story(prompt_len: int = 20, num_chats: int = 2, chat_prompt_len: int = 3,
                          chat_tokens: int = 8, budget: int = 8, block_size: int = 4,
                          num_blocks: int = 32) -> list[list[Chunk]]:
    """``num_chats`` short chats start decoding; one step later a ``prompt_len``-token ``document``
    arrives, and every step may compute at most ``budget`` tokens (``max_num_batched_tokens``)."""
    sched = Scheduler(BlockManager(num_blocks, block_size), max_num_seqs=num_chats + 1,
                      max_num_batched_tokens=budget)
    chats = [Request(f"chat{i}", list(range(100 * i, 100 * i + chat_prompt_len)), chat_tokens)
             for i in range(num_chats)]
    document = Request("document", list(range(1000, 1000 + prompt_len)), 2)
    return scheduled_chunks(sched, {0: chats, 1: [document]})


def fig_chunked_steps(steps: Sequence[Sequence[Chunk]], budget: int | None = None,
                      title: str = "Chunked prefill: what each step computed") -> go.Figure:
    """One stacked bar per step: each request's tokens in its colour, a prompt chunk labelled with its
    positions (``[6:12]``), a decode labelled ``decode``; ``budget`` draws the token budget as a dashed
    line. One bar trace per request, named after it: ``y`` holds its tokens per step, ``text`` the labels."""
    if not steps:
        raise ValueError("steps is empty: run scheduled_chunks(...) first")
    names = list(dict.fromkeys(c.name for step in steps for c in step))
    colors = seq_colors(names)
    x = list(range(len(steps)))
    fig = go.Figure()
    for name in names:
        mine = [next((c for c in step if c.name == name), None) for step in steps]
        fig.add_trace(go.Bar(
            x=x, y=[c.num_tokens if c else 0 for c in mine], name=name, marker_color=colors[name],
            text=[("" if c is None else f"[{c.start}:{c.end}]" if c.is_prefill else "decode") for c in mine],
            textposition="inside", insidetextanchor="middle",
            hovertext=[("" if c is None else f"{name}: positions {c.start}-{c.end - 1}"
                        + (" (prompt)" if c.is_prefill else " (decode)")) for c in mine], hoverinfo="text"))
    top = max(sum(c.num_tokens for c in step) for step in steps)
    if budget is not None:
        fig.add_hline(y=budget, line=dict(color="#d62728", dash="dash"),
                      annotation_text=f"max_num_batched_tokens = {budget}", annotation_position="top left")
        top = max(top, budget)
    fig.update_layout(title=title, barmode="stack", height=380, margin=dict(t=70, b=40),
                      xaxis=dict(title="engine step", tickvals=x),
                      yaxis=dict(title="tokens computed", range=[0, top * 1.2]),
                      legend=dict(orientation="h", y=-0.2, yanchor="top", traceorder="normal"))
    return fig
