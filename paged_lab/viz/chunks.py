"""Chunked prefill as a picture (notebook 05): step by step, what the Scheduler computed.

``simulate(..., record_chunks=True)`` runs the real Scheduler (requests join at their step) and keeps
each step's ``ScheduledSeq`` entries as ``Chunk`` rows; ``fig_chunked_steps`` draws them: one
stacked bar per step, one colour per request, each prompt chunk labelled with the positions it computed
(``[6:12]``), each decode ``decode``, and the step's token budget ``max_num_batched_tokens`` as a line.
Nothing here decides anything the Scheduler does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from paged_lab.sim import paged, simulate
from paged_lab.sim.simulate import Chunk
from paged_lab.sim.workloads import Request
from paged_lab.viz.colors import seq_colors


def chunked_prefill_story(prompt_len: int = 20, num_chats: int = 2, chat_prompt_len: int = 3,
                          chat_tokens: int = 8, budget: int = 8, block_size: int = 4,
                          num_blocks: int = 32) -> list[list[Chunk]]:
    """``num_chats`` short chats start decoding; one step later a ``prompt_len``-token ``document``
    arrives, and every step may compute at most ``budget`` tokens (``max_num_batched_tokens``).
    Returns what each step of ``simulate()`` computed (``SimResult.chunks``)."""
    chats = [Request(f"chat{i}", list(range(100 * i, 100 * i + chat_prompt_len)), chat_tokens, 0)
             for i in range(num_chats)]
    document = Request("document", list(range(1000, 1000 + prompt_len)), 2, 1)
    res = simulate(chats + [document], paged(num_blocks, block_size),
                   {"max_num_seqs": num_chats + 1, "max_num_batched_tokens": budget}, record_chunks=True)
    return res.chunks


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
