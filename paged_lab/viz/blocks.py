"""Pure figures for block tables, copy-on-write and prefix sharing (notebooks 03 and 04).

The main picture, ``fig_block_tables``, reads a :class:`~paged_lab.memory.PoolState` -- the live
``bm.state()`` or ``replay(bm.events, ...)`` up to some step -- and draws three things left to right:

    logical blocks of each sequence  ->  its block table  ->  the physical pool as a grid

A block is drawn as a box whose coloured part is the share of its slots that hold tokens, so the
waste in a last, half-empty block is visible. Nothing here mutates state; the ``*_playground`` and
``fig_prefix_sharing`` functions run the real BlockManager on the numbers a slider picks, then draw.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.memory import BlockManager, Event, PoolState, replay
from paged_lab.memory.scenarios import prefix_sharing_summary, random_requests

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
FREE, CACHED, SHARED_EDGE = "#f2f2f2", "#c7c7c7", "#222222"
SHARED_FILL = "#525252"  # a block several tables list has its own look, not its first owner's colour
GAP = 0.25  # space between boxes, in box widths


def _colors(order: Sequence[Hashable]) -> dict[Hashable, str]:
    return {sid: PALETTE[i % len(PALETTE)] for i, sid in enumerate(order)}


def seq_order(events: Iterable[Event]) -> list[Hashable]:
    """Sequence ids in order of first appearance in the log (keeps colours stable across steps)."""
    out: dict[Hashable, None] = {}
    for e in events:
        if e.kind in ("allocate", "fork"):
            out.setdefault(e.seq_id, None)
    return list(out)


def _as_state(state: PoolState | BlockManager) -> PoolState:
    return state.state() if isinstance(state, BlockManager) else state


def fig_block_tables(state: PoolState | BlockManager, block_size: int, title: str | None = None,
                     cols: int = 8, order: Sequence[Hashable] | None = None,
                     highlight: Iterable[int] = (), max_arrows_seqs: int = 12) -> go.Figure:
    """Logical blocks -> block table -> physical pool, for every live sequence.

    ``order`` fixes the colour of each sequence (default: the order of ``state.tables``).
    ``highlight`` outlines physical blocks in red (e.g. the blocks the last event touched).
    In the pool, a white box is free, a light grey box is free but still holds cached content, and a
    dark grey box with a thick black edge is shared by more than one table (its refcount is written
    in it). A label sits in white on a filled box and in black on an empty one. Arrows from each table
    to its blocks (for up to ``max_arrows_seqs`` sequences) run left of the pool and then along the
    gap under the target's row, so they never cross another block.
    """
    state = _as_state(state)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    order = list(order or []) + [s for s in state.tables if s not in (order or [])]
    color = _colors(order)
    fill = state.fill(block_size)
    owners = state.owners()
    highlight = set(highlight)
    seqs = [s for s in order if s in state.tables]
    max_logical = max((len(state.tables[s]) for s in seqs), default=1)
    step = 1 + GAP
    x_table = max_logical * step + 0.4  # where the block table text starts
    widest = max((len(str(s)) + len(str(state.tables[s])) for s in seqs), default=4)
    x_pool = x_table + 0.16 * widest + 2.0  # where the pool grid starts
    pool_rows = -(-state.num_blocks // cols)
    fig = go.Figure()
    shapes, arrows = [], []
    labels: dict[str, list[list]] = {g: [[], [], [], [], []] for g in ("pool", "logical", "tables")}  # x, y, text, hover, colour

    def box(x, y, frac, fillcolor, edge="#999999", width=1):
        shapes.append(dict(type="rect", x0=x, x1=x + 1, y0=y, y1=y + 1, line=dict(color=edge, width=width),
                           fillcolor="white", layer="below"))
        if frac > 0:
            shapes.append(dict(type="rect", x0=x, x1=x + frac, y0=y, y1=y + 1, line=dict(width=0),
                               fillcolor=fillcolor, layer="below"))

    def label(group, x, y, t, h, frac=0.0):
        ink = "white" if frac >= 0.5 else "#222222"  # the label's centre sits on the fill when frac >= 0.5
        for column, value in zip(labels[group], (x, y, t, h, ink)):
            column.append(value)

    # physical pool: block b at column b % cols, row b // cols (row 0 at the top). The grid sits
    # a little higher than the sequences and its rows are spaced out, so that arrows reach each
    # block's bottom edge between the rows instead of running through other blocks.
    row_step = 1 + 2.5 * GAP

    def pool_xy(b):
        return x_pool + (b % cols) * step, 1.2 - (b // cols) * row_step

    free_rank = {b: i for i, b in enumerate(state.free_queue)}
    for b in range(state.num_blocks):
        x, y = pool_xy(b)
        rc = state.refcounts[b]
        if rc:
            first = owners[b][0]
            shared = rc > 1
            frac = fill[b] / block_size
            box(x, y, frac, SHARED_FILL if shared else color.get(first, PALETTE[-1]),
                edge="red" if b in highlight else (SHARED_EDGE if shared else "#999999"),
                width=3 if shared or b in highlight else 1)
            label("pool", x + 0.5, y + 0.5, f"<b>{b}</b>" + (f"<br>x{rc}" if shared else ""),
                  f"block {b}: {fill[b]}/{block_size} slots, refcount {rc}, held by "
                  + ", ".join(map(str, owners[b])), frac)
        else:
            cached = b in state.cached
            box(x, y, 1.0 if cached else 0.0, CACHED, edge="red" if b in highlight else "#bbbbbb",
                width=3 if b in highlight else 1)
            label("pool", x + 0.5, y + 0.5, str(b), f"block {b}: free ({'cached content, ' if cached else ''}"
                  f"#{free_rank.get(b, 0) + 1} in the free queue)")

    # sequences: logical blocks, then the table; arrows run from the table to the pool
    for row, sid in enumerate(seqs):
        y = -row * step
        table = state.tables[sid]
        n = state.num_tokens[sid]
        for j, b in enumerate(table):
            x = j * step
            k = max(0, min(block_size, n - j * block_size))
            box(x, y, k / block_size, color[sid])
            label("logical", x + 0.5, y + 0.5, f"L{j}", f"{sid}: logical block {j} -> physical {b} ({k}/{block_size} tokens)",
                  k / block_size)
        text = f"<b>{sid}</b>: {table}"
        label("tables", x_table, y + 0.5, text, f"{sid}: {n} tokens, block table {table}")
        tail = x_table + 0.16 * (len(str(sid)) + len(str(table)) + 2)  # about where the text ends
        lane = 0.15 + 0.3 * (row % 4) / 3  # each sequence its own lane in the gap, below the target row
        for b in table if len(seqs) <= max_arrows_seqs else ():
            px, py = pool_xy(b)
            gy = py - (row_step - 1) * lane
            shapes.append(dict(type="path", path=f"M {tail},{y + 0.5} L {x_pool - 0.3},{gy} L {px + 0.5},{gy}",
                               line=dict(color=color[sid], width=1.2), opacity=0.55, layer="above"))
            arrows.append(dict(x=px + 0.5, y=py, ax=px + 0.5, ay=gy, xref="x", yref="y", axref="x",
                               ayref="y", showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1.2,
                               arrowcolor=color[sid], opacity=0.8, text=""))

    for group, (xs, ys, ts, hs, inks) in labels.items():
        fig.add_trace(go.Scatter(x=xs, y=ys, text=ts, hovertext=hs, mode="text", hoverinfo="text",
                                 textposition="middle right" if group == "tables" else "middle center",
                                 textfont=dict(size=12, color="#222222" if group == "tables" else inks),
                                 showlegend=False, name=group))
    kinds = [(str(sid), color[sid], "#999999") for sid in seqs]  # legend entries only
    if any(r > 1 for r in state.refcounts):
        kinds.append(("shared (x refcount)", SHARED_FILL, SHARED_EDGE))
    if state.cached and any(not state.refcounts[b] for b in state.cached):
        kinds.append(("free, content still cached", CACHED, "#bbbbbb"))
    kinds.append(("free", "white", "#bbbbbb"))
    for name, fillcolor, edge in kinds:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=fillcolor, line=dict(color=edge, width=1))))
    heads = [dict(x=max_logical * step / 2, y=1.6, text="logical blocks", showarrow=False),
             dict(x=x_table + 1.2, y=1.6, text="block table", showarrow=False),
             dict(x=x_pool + cols * step / 2, y=2.8, text=f"physical pool ({state.num_blocks} blocks)",
                  showarrow=False)]
    bottom = min(-(len(seqs) - 1) * step, 1.2 - (pool_rows - 1) * row_step) - 0.3
    rows = (3.0 - bottom) / step
    fig.update_layout(
        title=title or f"{len(seqs)} sequence(s), {sum(1 for r in state.refcounts if r)} of "
                       f"{state.num_blocks} blocks used",
        shapes=shapes, annotations=arrows + heads, plot_bgcolor="white",
        height=120 + 48 * rows, margin=dict(t=70, b=10, l=10, r=10),
        xaxis=dict(visible=False, range=[-0.3, x_pool + cols * step]),
        yaxis=dict(visible=False, range=[bottom, 3.0], scaleanchor="x"),
        legend=dict(orientation="h", y=-0.02),
    )
    return fig


def fig_event_step(events: Sequence[Event], num_blocks: int, block_size: int, step: int,
                   cols: int = 8) -> go.Figure:
    """The pool after the first ``step`` events (0: empty), titled with the last event applied.

    Events are numbered from 0, as ``Event.index`` and the printed log number them: ``step = k + 1``
    shows the pool right after event ``k``. ``event_slider(events)`` labels a slider that way."""
    if not 0 <= step <= len(events):
        raise ValueError(f"step must be in [0, {len(events)}], got {step}")
    state = replay(events, num_blocks, upto=step)
    ev = events[step - 1] if step else None
    last = len(events) - 1
    title = (f"after event {ev.index} (of 0–{last}): {ev.describe()}" if ev
             else f"before event 0 (of 0–{last}): the empty pool")
    return fig_block_tables(state, block_size, title=title, cols=cols, order=seq_order(events),
                            highlight=ev.block_ids if ev else ())


def event_slider(events: Sequence[Event], after: int | None = None):
    """A slider over a run's log, labelled with the event numbers the printed log shows (0-based);
    its value is the ``step`` of ``fig_event_step`` (events applied). ``after``: the event shown first."""
    import ipywidgets as W

    options = [("start", 0)] + [(str(e.index), i + 1) for i, e in enumerate(events)]
    value = 0 if after is None else after + 1
    if not 0 <= value <= len(events):
        raise ValueError(f"after must be an event number in [0, {len(events) - 1}], got {after}")
    return W.SelectionSlider(options=options, value=value, description="after event",
                             style={"description_width": "initial"}, layout=W.Layout(width="95%"))


def fig_refcounts(state: PoolState | BlockManager, title: str = "Refcount of every physical block"
                  ) -> go.Figure:
    """One bar per physical block: how many block tables hold it (shared blocks stand out)."""
    state = _as_state(state)
    rc = list(state.refcounts)
    colors = ["#d62728" if r > 1 else ("#1f77b4" if r == 1 else (CACHED if b in state.cached else FREE))
              for b, r in enumerate(rc)]
    owners = state.owners()
    fig = go.Figure(go.Bar(x=list(range(len(rc))), y=rc, marker_color=colors,
                           hovertext=[f"block {b}: refcount {r}" + (f", held by {owners[b]}" if r else "")
                                      for b, r in enumerate(rc)], hoverinfo="text"))
    fig.update_layout(title=title, xaxis_title="physical block id", yaxis_title="refcount",
                      yaxis=dict(dtick=1), height=300, margin=dict(t=60, b=40), plot_bgcolor="white")
    return fig


def fig_free_queue(state: PoolState | BlockManager, title: str = "The free queue (left: handed out next)"
                   ) -> go.Figure:
    """The free blocks in the order they will be handed out; grey ones still hold cached content,
    which is lost (evicted) when the block is handed out."""
    state = _as_state(state)
    q = list(state.free_queue)
    fig = go.Figure(go.Bar(
        x=[f"#{i + 1}" for i in range(len(q))], y=[1] * len(q), text=[str(b) for b in q],
        textposition="inside", marker_color=[CACHED if b in state.cached else FREE for b in q],
        marker_line=dict(color="#888888", width=1),
        hovertext=[f"block {b}: {'cached content, evicted when handed out' if b in state.cached else 'empty'}"
                   for b in q], hoverinfo="text"))
    fig.update_traces(textfont=dict(size=14))
    fig.update_layout(title=title, yaxis=dict(visible=False), xaxis_title="position in the free queue",
                      height=200, bargap=0.1, margin=dict(t=60, b=40), plot_bgcolor="white")
    return fig


def fig_prefix_sharing(k: int = 8, system_len: int = 48, block_size: int = 16, user_len: int = 12
                       ) -> go.Figure:
    """``k`` requests with one system prompt: blocks used without and with prefix caching.

    The bars are drawn as a share of the blocks without sharing, on an axis that never moves: as a
    slider changes, the green bar itself grows or shrinks (the labels keep the block counts)."""
    s = prefix_sharing_summary(k, system_len, user_len, block_size)
    names = ["without sharing", "with prefix caching"]
    used = [s["blocks_without_sharing"], s["blocks_with_sharing"]]
    fig = go.Figure(go.Bar(x=names, y=[u / used[0] for u in used], marker_color=["#7f7f7f", "#2ca02c"],
                           text=[f"{u} blocks" for u in used], textposition="outside",
                           hovertext=[f"{u} blocks, {u / used[0]:.0%} of the blocks without sharing" for u in used],
                           hoverinfo="text"))
    saved = 1 - used[1] / used[0]
    fig.update_layout(
        title=f"{k} requests x ({system_len} shared + {user_len} own tokens), block_size={block_size}<br>"
              f"{saved:.0%} fewer blocks, hit rate {s['hit_rate']:.0%}",  # two lines: fits a 700 px widget
        yaxis=dict(title="physical blocks in use<br>(share of without sharing)", range=[0, 1.2],
                   tickformat=".0%", tickvals=[0, 0.25, 0.5, 0.75, 1]),
        height=380, margin=dict(t=90, b=40))
    return fig


def prefix_sharing_readout(fig: go.Figure | None = None, k: int = 8, system_len: int = 48, block_size: int = 16,
                           user_len: int = 12) -> str:
    """One line under the prefix-sharing sliders: what sharing saved, and why not more."""
    s = prefix_sharing_summary(k, system_len, user_len, block_size)
    full = system_len // block_size  # only full blocks have a hash, so only they are shared
    saved = s["blocks_without_sharing"] - s["blocks_with_sharing"]
    line = (f"{s['blocks_without_sharing']} → <b>{s['blocks_with_sharing']} blocks</b>: the system prompt's "
            f"{full} full block(s) are stored once instead of {k} times ({saved} saved)")
    rest = system_len % block_size
    if rest:
        line += f"; its last {rest} token(s) share a block with each request's own text, so they are not shared"
    return line if k > 1 else line + "; one request has nobody to share with"


def fig_sharing_vs_block_size(system_len: int = 50, block_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
                              k: int = 8, user_len: int = 12) -> go.Figure:
    """Why bigger blocks share less: only *full* blocks of the shared prefix can be cached, so up to
    ``block_size - 1`` tokens of it are recomputed and stored again by every request."""
    shared_tokens, hit_rates = [], []
    for bs in block_sizes:
        s = prefix_sharing_summary(k, system_len, user_len, bs)
        shared_tokens.append(s["prefix_cache_hits"] // max(1, k - 1))  # tokens each later request reuses
        hit_rates.append(s["hit_rate"])
    x = [str(bs) for bs in block_sizes]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=x, y=shared_tokens, name="tokens reused per request", marker_color="#2ca02c",
                         text=shared_tokens, textposition="outside"), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=hit_rates, name="hit rate", mode="lines+markers",
                             line=dict(color="#d62728")), secondary_y=True)
    fig.update_layout(title=f"A {system_len}-token system prompt, {k} requests: what each block size can share",
                      xaxis_title="block_size", height=380, margin=dict(t=70, b=40),
                      legend=dict(orientation="h", y=1.1))
    fig.update_yaxes(title_text="reused tokens", range=[0, system_len * 1.2], secondary_y=False)
    fig.update_yaxes(title_text="hit rate", range=[0, 1], tickformat=".0%", secondary_y=True)
    return fig


def block_size_tradeoff(lengths: Sequence[int], block_sizes: Sequence[int]) -> list[dict]:
    """For each block size: allocate every length in ``lengths`` in one big pool and report the
    wasted slots (the empty tail of each last block) and the block-table entries."""
    rows = []
    for bs in block_sizes:
        bm = BlockManager(sum(-(-n // bs) for n in lengths), bs)
        for i, n in enumerate(lengths):
            bm.allocate(i, [0] * n)
        slots = bm.num_used_blocks * bs
        rows.append({"block_size": bs, "blocks": bm.num_used_blocks, "used_slots": slots,
                     "wasted_slots": slots - sum(lengths), "waste": 1 - sum(lengths) / slots,
                     "table_entries": bm.num_used_blocks})
    return rows


def block_table_playground(block_size: int = 4, num_requests: int = 6, seed: int = 0,
                           num_blocks: int = 32) -> go.Figure:
    """Random requests arrive (some finish) in a pool of ``num_blocks``; draw the final block tables."""
    bm, turned_away = random_requests(num_requests, block_size, num_blocks=num_blocks, seed=seed)
    tokens = sum(bm.num_tokens(s) for s in bm.seq_ids)
    slots = bm.num_used_blocks * block_size
    waste = f"{slots - tokens} of {slots} reserved slots empty" if slots else "nothing allocated"
    title = (f"block_size={block_size}: {len(bm.seq_ids)} running, {tokens} tokens in "
             f"{bm.num_used_blocks} blocks ({waste})"
             + (f", {turned_away} turned away" if turned_away else ""))
    return fig_block_tables(bm, block_size, title=title, cols=8)


def block_table_readout(fig: go.Figure | None = None, block_size: int = 4, num_requests: int = 6, seed: int = 0,
                        num_blocks: int = 32) -> str:
    """One line under the block-table sliders: where the empty slots are, and why."""
    bm, turned_away = random_requests(num_requests, block_size, num_blocks=num_blocks, seed=seed)
    running = bm.seq_ids
    tokens = sum(bm.num_tokens(s) for s in running)
    empty = bm.num_used_blocks * block_size - tokens
    line = (f"{len(running)} running request(s) hold {tokens} tokens in {bm.num_used_blocks} of {num_blocks} blocks: "
            f"<b>{empty} empty slots</b>, all in last blocks (at most {block_size - 1} per request, so at most "
            f"{len(running) * (block_size - 1)})")
    if turned_away:
        line += f"; {turned_away} turned away: the pool of {num_blocks} × {block_size} slots was full"
    return line
