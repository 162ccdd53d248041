"""Pure figures for the real-model engine (notebook 07): the pool step by step, the run's timeline,
prefix-cache savings and the throughput comparison.

They read what ``LLM.stats()`` returns (the BlockManager's event log and the engine's per-step
timeline) or plain numbers; nothing here runs the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.memory import Event, replay
from paged_lab.viz.blocks import fig_block_tables, frame_of_log, seq_order
from paged_lab.viz.colors import seq_name


def events_until_step(events: Sequence[Event], step: int) -> int:
    """How many events happened in engine steps 0..``step`` (events carry the step as ``clock``)."""
    n = 0
    for ev in events:
        if ev.clock > step:
            break
        n += 1
    return n


def fig_engine_pool(events: Sequence[Event], num_blocks: int, block_size: int, step: int,
                    timeline: Sequence[Mapping] | None = None, cols: int = 16) -> go.Figure:
    """Block tables and the physical pool at the end of engine step ``step`` (replayed from the log).

    The title is one short line (how many sequences hold how many blocks; with ``timeline``,
    ``stats()["timeline"]``, how many wait): what the step ran is ``engine_step_readout``'s. The blocks
    the step touched wear a dashed frame, an encoding no request's colour has (request 3 is red). Every
    step is drawn in the frame of the whole run (``viz.blocks.frame_of_log``): the figure holds still
    while a slider steps through it. Requests are named ``request 4``, not ``4``."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    upto = events_until_step(events, step)
    state = replay(events, num_blocks, upto=upto)
    title = f"after step {step}: {len(state.tables)} sequences hold {sum(1 for r in state.refcounts if r)}" \
            f" of {num_blocks} blocks"
    if timeline is not None and step < len(timeline):
        title += f", {timeline[step]['num_waiting']} waiting"
    touched = {b for ev in events[:upto] if ev.clock == step for b in ev.block_ids}
    return fig_block_tables(state, block_size, title=title, cols=cols, order=seq_order(events),
                            highlight=touched, max_arrows_seqs=6, frame=frame_of_log(events, num_blocks),
                            highlight_name="dashed frame: touched in this step")


def _blocks(n: int) -> str:
    return f"{n} block" + ("" if n == 1 else "s")


def _names(parts: Sequence[str]) -> str:
    # "; " between them: each part a clause of its own, which viz.i18n translates one by one
    return "; ".join(parts) if parts else "nobody"


def _tokens(n: int) -> str:
    return f"{n} token" + ("" if n == 1 else "s")


def engine_step_readout(events: Sequence[Event], timeline: Sequence[Mapping], step: int,
                        block_size: int) -> list[str]:
    """What engine step ``step`` changed in the pool, and why, from the event log: always the same four
    short lines (what ran and the state after it; who was admitted; who grew into a new block; who
    finished and handed blocks back, and any preemption), so the readout keeps its height while a
    slider moves and the figure under it stays where it is."""
    if not 0 <= step < len(timeline):
        raise ValueError(f"step must be in [0, {len(timeline) - 1}], got {step}")
    now = [ev for ev in events if ev.clock == step]
    admitted = [f"{seq_name(ev.seq_id)} ({_tokens(ev.num_tokens)} → {_blocks(len(ev.block_ids))})"
                for ev in now if ev.kind == "allocate"]
    grew = [seq_name(ev.seq_id) for ev in now if ev.kind == "append"
            and ev.num_tokens % block_size == 1 % block_size]
    freed = [f"{seq_name(ev.seq_id)} ({_blocks(len(ev.block_ids))})" for ev in now if ev.kind == "free"]
    t = timeline[step]
    back = f"finished, blocks back to the pool: {_names(freed)}"
    if t["num_preempted"]:
        back += f"; {t['num_preempted']} preempted: the pool had no free block"
    return [f"step {step} ran {t['num_prefill']} prefill + {t['num_decode']} decode → {t['num_running']} "
            f"running, {t['num_waiting']} waiting, {t['kv_usage']:.0%} of the slots hold tokens",
            f"admitted: {_names(admitted)}",
            f"a new block, the last one being full: {_names(grew)}",
            back]


def fig_engine_timeline(timeline: Sequence[Mapping],
                        title: str = "What the engine did, step by step") -> go.Figure:
    """Top: running and waiting sequences per step, preemptions marked. Bottom: KV pool usage (%)."""
    if not timeline:
        raise ValueError("timeline is empty: run llm.generate(...) first")
    steps = [t["step"] for t in timeline]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("sequences", "KV pool used (%)"))
    fig.add_trace(go.Scatter(x=steps, y=[t["num_running"] for t in timeline], name="running",
                             line=dict(shape="hv", color="#1f77b4")), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=[t["num_waiting"] for t in timeline], name="waiting",
                             line=dict(shape="hv", color="#ff7f0e")), row=1, col=1)
    pre = [t for t in timeline if t["num_preempted"]]
    if pre:
        fig.add_trace(go.Scatter(x=[t["step"] for t in pre], y=[t["num_running"] for t in pre],
                                 mode="markers",
                                 name="preemption", marker=dict(symbol="x", size=10, color="#d62728")), row=1,
                      col=1)
    fig.add_trace(go.Scatter(x=steps, y=[100 * t["kv_usage"] for t in timeline], name="KV used",
                             fill="tozeroy", line=dict(shape="hv", color="#2ca02c")), row=2, col=1)
    fig.update_yaxes(range=[0, 105], row=2, col=1)
    fig.update_xaxes(title_text="engine step", row=2, col=1)
    fig.update_layout(title=title, height=420, margin=dict(t=70, b=40, l=50, r=10))
    return fig


def fig_prefix_cache(labels: Sequence[str], prompt_lens: Sequence[int], cached: Sequence[int],
                     title: str = "Prompt tokens: computed vs read from the prefix cache") -> go.Figure:
    """One stacked bar per request: prompt tokens prefilled vs reused from cached blocks."""
    if not len(labels) == len(prompt_lens) == len(cached):
        raise ValueError("labels, prompt_lens and cached must have the same length")
    computed = [n - c for n, c in zip(prompt_lens, cached)]
    fig = go.Figure([
        go.Bar(x=list(labels), y=list(cached), name="from the prefix cache", marker_color="#c7c7c7"),
        go.Bar(x=list(labels), y=computed, name="computed (prefill)", marker_color="#1f77b4"),
    ])
    fig.update_layout(barmode="stack", title=title, yaxis_title="prompt tokens", height=340)
    return fig


def fig_throughput(tokens_per_s: Mapping[str, float], title: str = "Output tokens per second (same workload)"
                   ) -> go.Figure:
    """One bar per method; each bar is labelled with its ratio to the slowest."""
    if not tokens_per_s:
        raise ValueError("tokens_per_s is empty")
    slowest = min(tokens_per_s.values())
    names = list(tokens_per_s)
    values = [tokens_per_s[n] for n in names]
    fig = go.Figure(go.Bar(x=names, y=values, text=[f"{v:.1f} tok/s ({v / slowest:.1f}x)" for v in values],
                           textposition="outside",
                           marker_color=["#1f77b4" if n.startswith("paged_lab") else "#7f7f7f"
                                                                 for n in names]))
    fig.update_layout(title=title, yaxis_title="tokens / s", yaxis_range=[0, max(values) * 1.25], height=360)
    return fig


def fig_step_time(rows: Sequence[Mapping], title: str = "Decode step time: predicted (roofline) "
                                                        "against measured"
                  ) -> go.Figure:
    """Step time (ms) against the number of sequences in the batch, one colour per context length:
    measured (solid, from ``tools.decode_steps.measure_decode_steps``) beside predicted (dashed, the
    roofline). On this axis every shape has a place of its own, and "8 sequences cost about what 1
    costs" reads as a flat line."""
    if not rows:
        raise ValueError("rows is empty: run measure_decode_steps(...) first")
    contexts = sorted({r["context_len"] for r in rows})
    batches = sorted({r["batch_size"] for r in rows})
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
    fig = go.Figure()
    for i, ctx in enumerate(contexts):
        mine = sorted((r for r in rows if r["context_len"] == ctx), key=lambda r: r["batch_size"])
        color = colors[i % len(colors)]
        dodge = 0.12 * (i - (len(contexts) - 1) / 2)  # side by side, not on top of each other
        x = [r["batch_size"] + dodge for r in mine]
        fig.add_trace(go.Scatter(x=x, y=[1e3 * r["measured_s"] for r in mine], mode="lines+markers",
                                 name=f"measured, {ctx} tokens of context", line=dict(color=color),
                                 marker=dict(size=9), legendgroup=str(ctx),
                                 customdata=[r["batch_size"] for r in mine],
                                 hovertemplate="%{customdata} sequences: %{y:.1f} ms "
                                               "measured<extra></extra>"))
        fig.add_trace(go.Scatter(x=x, y=[1e3 * r["predicted_s"] for r in mine], mode="lines+markers",
                                 name=f"predicted, {ctx} tokens of context", legendgroup=str(ctx),
                                 line=dict(color=color, dash="dash"),
                                 marker=dict(size=7, symbol="circle-open"),
                                 customdata=[r["batch_size"] for r in mine],
                                 hovertemplate="%{customdata} sequences: %{y:.1f} ms "
                                               "predicted<extra></extra>"))
    top = max(1e3 * max(r["measured_s"], r["predicted_s"]) for r in rows) * 1.15
    fig.update_xaxes(title_text="sequences in the batch (one decode step)", tickvals=batches,
                     range=[min(batches) - 0.6, max(batches) + 0.6])
    fig.update_yaxes(title_text="step time (ms)", range=[0, top], rangemode="tozero")
    fig.update_layout(title=title, height=440, legend=dict(orientation="h", y=-0.2, yanchor="top"),
                      margin=dict(t=70, b=40))
    return fig
