"""Pure figures for block tables, copy-on-write and prefix sharing (notebooks 03 and 04).

The main picture, ``fig_block_tables``, reads a :class:`~paged_lab.memory.PoolState` -- the live
``bm.state()`` or ``replay(bm.events, ...)`` up to some step -- and draws three things left to right:

    logical blocks of each sequence  ->  its block table  ->  the physical pool as a grid

A block is drawn as a box whose coloured part is the share of its slots that hold tokens, so the
waste in a last, half-empty block is visible. Nothing here mutates state; the ``*_playground`` and
``fig_prefix_sharing`` functions run the real BlockManager on the numbers a slider picks, then draw.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, reduce

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paged_lab.kv_math import cdiv
from paged_lab.memory import BlockManager, Event, PoolState, replay
from paged_lab.memory.events import _Replayer
from paged_lab.memory.scenarios import prefix_sharing_summary, random_requests
from paged_lab.viz.colors import PALETTE, ink_for, seq_colors, seq_name

FREE, CACHED, SHARED_EDGE = "#f2f2f2", "#c7c7c7", "#222222"
SHARED_FILL = "#525252"  # a block several tables list has its own look, not its first owner's colour
GAP = 0.25  # space between boxes, in box widths
STRIP = 0.3  # a partly filled block: its fill is a bar this high along the box's bottom, its label above
TINT_OPACITY = 0.15  # the rest of a partly filled box, in its owner's colour
MARK_LINE = dict(color="#111111", width=2.5, dash="dash")  # a touched block's frame: no request's colour
MARK_PAD = 0.08  # the frame's distance from the box, in box widths (the arrows' lanes start below it)
# The scale the layout is planned for: px per box at a plot this wide (JupyterLab at 1440 px and Colab
# both give the figure about 900-1000 px), and the px a box gets from the figure's height.
REF_PLOT_WIDTH, PX_PER_UNIT = 900, 38
CHAR_PX = 0.62  # the width of a character of the labels' font, in font sizes (bold digits, Open Sans)
TEXT_PX = 0.55  # the same for the block tables' text (regular weight, digits, commas and spaces)


def _colors(order: Sequence[Hashable]) -> dict[Hashable, str]:
    return seq_colors(order)


def seq_order(events: Iterable[Event]) -> list[Hashable]:
    """Sequence ids in order of first appearance in the log (keeps colours stable across steps)."""
    out: dict[Hashable, None] = {}
    for e in events:
        if e.kind in ("allocate", "fork"):
            out.setdefault(e.seq_id, None)
    return list(out)


def _as_state(state: PoolState | BlockManager) -> PoolState:
    return state.state() if isinstance(state, BlockManager) else state


TABLE_CHARS = 40  # a longer block table is shown as its first and last entries (all of it on hover)
MAX_LOGICAL = 10  # logical blocks past this many are one box "+k" (blocks of 1 token made 30 a row)


def _shown_table(table: Sequence[int]) -> str:
    """``[7, 1, 3]``; a table too long for the figure keeps its ends: ``[11, 10, 9, …, 0] (20)``."""
    text = str(list(table))
    if len(text) <= TABLE_CHARS:
        return text
    head = []
    for b in table[:-1]:
        if len(", ".join(map(str, head + [b]))) + len(str(table[-1])) + 12 > TABLE_CHARS:
            break
        head.append(b)
    return f"[{', '.join(map(str, head))}, …, {table[-1]}] ({len(table)})"


def _table_text(sid: Hashable, table: Sequence[int]) -> str:
    return f"{seq_name(sid)}: {_shown_table(table)}"


@dataclass(frozen=True)
class BlockFrame:
    """What a series of block-table figures must make room for: sequence rows, logical blocks in the
    longest table, the widest table text, and the legend's kinds. Figures drawn in one frame (every
    step of a log, every position of a slider) keep their size and their axes."""

    rows: int = 1
    logical: int = 1
    table_chars: int = 4
    shared: bool = False  # some block is held by more than one table
    cached: bool = False  # some free block still holds cached content

    @classmethod
    def of(cls, state: PoolState | BlockManager) -> BlockFrame:
        state = _as_state(state)
        return cls(rows=max(1, len(state.tables)),
                   logical=max([1] + [min(len(t), MAX_LOGICAL) for t in state.tables.values()]),
                   table_chars=max([4] + [len(_table_text(s, t)) for s, t in state.tables.items()]),
                   shared=any(r > 1 for r in state.refcounts),
                   cached=any(not state.refcounts[b] for b in state.cached))

    def __or__(self, other: BlockFrame) -> BlockFrame:
        return BlockFrame(max(self.rows, other.rows), max(self.logical, other.logical),
                          max(self.table_chars, other.table_chars), self.shared or other.shared,
                          self.cached or other.cached)


def frame_of(states: Iterable[PoolState | BlockManager]) -> BlockFrame:
    """The frame that holds every one of ``states``."""
    frame = None
    for st in states:
        frame = BlockFrame.of(st) if frame is None else frame | BlockFrame.of(st)
    return frame or BlockFrame()


def frame_of_log(events: Sequence[Event], num_blocks: int) -> BlockFrame:
    """The frame that holds the pool after every prefix of ``events`` (each step of an event slider)."""
    pool = _Replayer(num_blocks)
    frame = BlockFrame.of(pool.state)
    for ev in events:
        pool.apply(ev)
        frame = frame | BlockFrame.of(pool.state)
    return frame


def _label_px(text: str, size: float) -> tuple[float, float]:
    """About how wide and tall a label is drawn, in px (its tags removed, one line per ``<br>``)."""
    lines = re.sub(r"<(?!br)[^>]+>", "", text).split("<br>")
    return CHAR_PX * size * max(len(line) for line in lines), 1.25 * size * len(lines)


def fig_block_tables(state: PoolState | BlockManager, block_size: int, title: str | None = None,
                     cols: int = 8, order: Sequence[Hashable] | None = None,
                     highlight: Iterable[int] = (), max_arrows_seqs: int = 12,
                     frame: BlockFrame | None = None, highlight_name: str | None = None) -> go.Figure:
    """Logical blocks -> block table -> physical pool, for every live sequence.

    A request's colour follows from its id (``viz.colors``), the same in every figure. ``order``
    lists the sequences top to bottom (default: the order of ``state.tables``). ``highlight``
    frames physical blocks with a dashed line, with a legend entry ``highlight_name`` when given. ``frame``
    (``BlockFrame``) is the room the figure keeps: every figure drawn in one frame has the same size
    and axes, so a slider that steps through a log moves the blocks, not the picture.

    A full block is a box in its owner's colour, its label in white or dark ink, whichever reads better
    on that colour (``viz.colors.ink_for``); a partly filled one keeps
    its label on a pale tint of that colour, above a bar along its bottom whose length is the share
    of its slots that hold tokens, so no fill is ever drawn under a label. In the pool a white box is
    free, a grey one is free but still holds cached content, and a dark grey box with a thick black
    edge is shared by more than one table (``2 ×3``: block 2, three tables). Arrows from each table to
    its blocks (for up to ``max_arrows_seqs`` sequences) run right from the table to a vertical line of
    the sequence's own left of the pool, then along a lane of its own in the gap under the target's row,
    so they never cross another block and no two tables' lines merge.
    """
    state = _as_state(state)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    frame = (frame or BlockFrame.of(state)) | BlockFrame.of(state)
    order = list(order or []) + [s for s in state.tables if s not in (order or [])]
    color = _colors(order)
    fill = state.fill(block_size)
    owners = state.owners()
    highlight = set(highlight)
    seqs = [s for s in order if s in state.tables]
    step = 1 + GAP
    row_step = 1 + 2.5 * GAP  # pool rows are spaced out: arrows reach each block along the gap below it
    pool_rows = cdiv(state.num_blocks, cols)
    top = 3.0
    bottom = min(-(frame.rows - 1) * step, 1.2 - (pool_rows - 1) * row_step) - 0.3
    x_table = frame.logical * step + 0.4  # where the block table text starts
    # The table text is the one thing whose width is in px, not in boxes: plan for the scale the
    # figure will have (its height sets PX_PER_UNIT; a narrow output can lower it to fit the width).
    fixed = x_table + 2.0 + cols * step + 0.3 + 0.3  # everything but the table text
    text_px = TEXT_PX * 12 * (frame.table_chars + 3)  # + the colour square
    scale = min(PX_PER_UNIT, (REF_PLOT_WIDTH - text_px) / fixed)
    x_pool = x_table + text_px / scale + 2.0  # where the pool grid starts
    x_range = [-0.3, x_pool + cols * step + 0.3]
    fig = go.Figure()
    shapes, arrows = [], []
    labels: dict[str, list[list]] = {g: [[], [], [], [], [], []] for g in ("pool", "logical", "tables")}

    def label_size(texts: Iterable[str], room: float) -> int | None:
        """The largest font (12 down to 8 px) at which each of ``texts`` fits ``room`` boxes wide and
        above a partly filled block's bar; None when even 8 px does not (then the labels are left out:
        the hover still tells)."""
        for size in (12, 11, 10, 9, 8):
            if all(_label_px(t, size)[0] <= room * scale - 4
                   and _label_px(t, size)[1] <= (1 - STRIP) * scale - 2
                   for t in texts):
                return size
        return None

    def block(x, y, frac, fillcolor, text, hover, group, edge="#999999", width=1):
        """A box, its fill and its label: full -> fill and white label; partial -> tint, bottom bar and
        a dark label above the bar; empty -> white box, dark label."""
        shapes.append(dict(type="rect", x0=x, x1=x + 1, y0=y, y1=y + 1, line=dict(color=edge, width=width),
                           fillcolor="white", layer="below", name="box"))
        if frac >= 1:
            shapes.append(dict(type="rect", x0=x, x1=x + 1, y0=y, y1=y + 1, line=dict(width=0),
                               fillcolor=fillcolor, layer="below", name="fill"))
            ink, ly = ink_for(fillcolor), y + 0.5
        elif frac > 0:
            shapes.append(dict(type="rect", x0=x, x1=x + 1, y0=y, y1=y + 1, line=dict(width=0),
                               fillcolor=fillcolor,
                               opacity=TINT_OPACITY, layer="below", name="tint"))
            shapes.append(dict(type="rect", x0=x, x1=x + frac, y0=y, y1=y + STRIP, line=dict(width=0),
                               fillcolor=fillcolor, layer="below", name="fill"))
            ink, ly = "#222222", y + STRIP + (1 - STRIP) / 2
        else:
            ink, ly = "#222222", y + 0.5
        for column, value in zip(labels[group], (x + 0.5, ly, text, hover, ink, None)):
            column.append(value)

    # physical pool: block b at column b % cols, row b // cols (row 0 at the top)
    def pool_xy(b):
        return x_pool + (b % cols) * step, 1.2 - (b // cols) * row_step

    free_rank = {b: i for i, b in enumerate(state.free_queue)}
    logical = {}  # physical block -> "A L0", every table entry that points at it (the hover says)
    for sid, j, b in ((s, j, b) for s in seqs for j, b in enumerate(state.tables[s])):
        logical.setdefault(b, []).append(f"{seq_name(sid)} L{j}")
    for b in range(state.num_blocks):
        x, y = pool_xy(b)
        rc = state.refcounts[b]
        if rc:
            shared = rc > 1
            block(x, y, fill[b] / block_size, SHARED_FILL if shared else color.get(owners[b][0], PALETTE[-1]),
                  f"<b>{b}</b>" + (f" ×{rc}" if shared else ""),
                  f"block {b}: {fill[b]}/{block_size} slots, refcount {rc}, held by "
                  + ", ".join(logical.get(b) or [seq_name(o) for o in owners[b]]), "pool",
                  edge=SHARED_EDGE if shared else "#999999", width=3 if shared else 1)
        else:
            cached = b in state.cached
            block(x, y, 1.0 if cached else 0.0, CACHED, str(b),
                  f"block {b}: free ({'cached content, ' if cached else ''}#{free_rank.get(b, 0) + 1} in the "
                  "free queue)",
                  "pool", edge="#bbbbbb", width=1)
        if b in highlight:
            shapes.append(dict(type="rect", x0=x - MARK_PAD, x1=x + 1 + MARK_PAD, y0=y - MARK_PAD,
                               y1=y + 1 + MARK_PAD, line=MARK_LINE, fillcolor="rgba(0,0,0,0)", name="mark"))

    # sequences: logical blocks, then the table; arrows run from the table to the pool
    for row, sid in enumerate(seqs):
        y = -row * step
        table = state.tables[sid]
        n = state.num_tokens[sid]
        for j, b in enumerate(table):
            k = max(0, min(block_size, n - j * block_size))
            if j == MAX_LOGICAL - 1 and len(table) > MAX_LOGICAL:  # the rest in one box
                block(j * step, y, 0.0, color[sid], f"+{len(table) - j}",
                      f"{seq_name(sid)}: logical blocks {j}-{len(table) - 1} -> physical {table[j:]}",
                      "logical")
                break
            block(j * step, y, k / block_size, color[sid], f"L{j}",
                  f"{seq_name(sid)}: logical block {j} -> physical {b} ({k}/{block_size} tokens)", "logical")
        text = f"<span style='color:{color[sid]}'>■</span> <b>{seq_name(sid)}</b>: {_shown_table(table)}"
        for column, value in zip(labels["tables"], (x_table, y + 0.5, text, f"{seq_name(sid)}: {n} tokens, "
                                                    f"block table {table}", "#222222", None)):
            column.append(value)
        # about where the text ends
        tail = x_table + TEXT_PX * 12 * (len(_table_text(sid, table)) + 3.5) / scale
        # each table its own vertical left of the pool and its own lane under a pool row: lines never merge
        share = row / max(1, len(seqs) - 1)
        trunk = x_pool - 1.6 + 1.3 * share
        lane = 0.2 + 0.7 * share  # in the gap's height, below the target row
        for b in table if len(seqs) <= max_arrows_seqs else ():
            px, py = pool_xy(b)
            gy = py - MARK_PAD - (row_step - 1 - MARK_PAD) * lane
            shapes.append(dict(type="path",
                               path=(f"M {tail},{y + 0.5} L {trunk},{y + 0.5} L {trunk},{gy} "
                                     f"L {px + 0.5},{gy}"),
                               line=dict(color=color[sid], width=1.2), opacity=0.7, layer="above",
                               name="arrow"))
            arrows.append(dict(x=px + 0.5, y=py, ax=px + 0.5, ay=gy, xref="x", yref="y", axref="x",
                               ayref="y", showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1.2,
                               arrowcolor=color[sid], opacity=0.8, text=""))

    sizes = {"pool": label_size(labels["pool"][2], 1.0), "logical": label_size(labels["logical"][2], 1.0),
             "tables": 12}
    for group, (xs, ys, ts, hs, inks, _) in labels.items():
        if sizes[group] is None:  # boxes too small for any label (blocks of one token): hover only
            ts, sizes[group] = [""] * len(ts), 8
        fig.add_trace(go.Scatter(x=xs, y=ys, text=ts, hovertext=hs, mode="text", hoverinfo="text",
                                 textposition="middle right" if group == "tables" else "middle center",
                                 textfont=dict(size=sizes[group], color=inks), showlegend=False, name=group))
    kinds = []  # the legend: the same entries in every figure of a frame
    if frame.shared:
        kinds.append(("shared (× refcount)", SHARED_FILL, SHARED_EDGE))
    if frame.cached:
        kinds.append(("free, content still cached", CACHED, "#bbbbbb"))
    kinds.append(("free", "white", "#bbbbbb"))
    for name, fillcolor, edge in kinds:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=fillcolor,
                                             line=dict(color=edge, width=1))))
    if highlight_name:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=highlight_name, line=MARK_LINE))
    heads = [dict(x=frame.logical * step / 2 - GAP / 2, y=1.6, text="logical blocks", showarrow=False),
             dict(x=x_table, y=1.6, text="block table", showarrow=False, xanchor="left"),
             dict(x=x_pool + cols * step / 2, y=2.8, text=f"physical pool ({state.num_blocks} blocks)",
                  showarrow=False)]
    fig.update_layout(
        title=title or f"{len(seqs)} sequence(s), {sum(1 for r in state.refcounts if r)} of "
                       f"{state.num_blocks} blocks used",
        shapes=shapes, annotations=arrows + heads, plot_bgcolor="white",
        # two title lines always (titles wrap at viz.widgets.TITLE_CHARS), so a longer title never
        # moves the plot; the plot's height gives each box PX_PER_UNIT px
        height=round(PX_PER_UNIT * (top - bottom)) + 100 + 50, margin=dict(t=100, b=50, l=10, r=10),
        xaxis=dict(visible=False, range=x_range, constrain="domain"),
        yaxis=dict(visible=False, range=[bottom, top], scaleanchor="x", constrain="domain"),
        legend=dict(orientation="h", x=0, y=0, yanchor="top", yref="paper"),
        meta={"px_per_unit": scale},  # the scale the labels were sized for (tests read it)
    )
    return fig


def fig_event_step(events: Sequence[Event], num_blocks: int, block_size: int, step: int,
                   cols: int = 8) -> go.Figure:
    """The pool after the first ``step`` events (0: empty), titled with the last event applied.

    Events are numbered from 0, as ``Event.index`` and the printed log number them: ``step = k + 1``
    shows the pool right after event ``k``. ``event_slider(events)`` labels a slider that way. Every
    step is drawn in the frame of the whole log, so the figure keeps its size as the slider moves."""
    if not 0 <= step <= len(events):
        raise ValueError(f"step must be in [0, {len(events)}], got {step}")
    state = replay(events, num_blocks, upto=step)
    ev = events[step - 1] if step else None
    last = len(events) - 1
    title = (f"after event {ev.index} (of 0–{last}): {ev.describe()}" if ev
             else f"before event 0 (of 0–{last}): the empty pool")
    return fig_block_tables(state, block_size, title=title, cols=cols, order=seq_order(events),
                            highlight=ev.block_ids if ev else (), frame=frame_of_log(events, num_blocks),
                            highlight_name="dashed frame: the blocks this event touched")


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


def _blocks(n: int) -> str:
    return f"{n:,} block" + ("" if n == 1 else "s")


def fig_prefix_sharing(k: int = 8, system_len: int = 48, block_size: int = 16, user_len: int = 12,
                       bounds: Mapping[str, tuple[int, int]] | None = None) -> go.Figure:
    """``k`` requests with one system prompt: physical blocks in use without and with prefix caching.

    The ratio is the lesson: each bar is its share of the blocks without sharing on a linear 0-100% axis
    (32 blocks against 11: 100% against 34%), the same for every control value (``bounds``: unused)."""
    s = prefix_sharing_summary(k, system_len, user_len, block_size)
    names = ["without sharing", "with prefix caching"]
    used = [s["blocks_without_sharing"], s["blocks_with_sharing"]]
    share = [100 * u / used[0] for u in used]
    fig = go.Figure(go.Bar(x=names, y=share, marker_color=["#7f7f7f", "#2ca02c"],
                           text=[f"{_blocks(u)} ({p:.0f}%)" for u, p in zip(used, share)],
                           textposition="outside", cliponaxis=False,
                           hovertext=[f"{_blocks(u)}, {p:.0f}% of the blocks without sharing"
                                      for u, p in zip(used, share)],
                           hoverinfo="text"))
    saved = 1 - used[1] / used[0]
    fig.update_layout(
        title=f"{k} requests x ({system_len} shared + {user_len} own tokens), block_size={block_size}<br>"
              f"{saved:.0%} fewer blocks, hit rate {s['hit_rate']:.0%}",  # two lines: fits a 700 px widget
        yaxis=dict(title="blocks in use (% of those without sharing)", range=[0, 118],
                   tickvals=[0, 25, 50, 75, 100], ticktext=["0%", "25%", "50%", "75%", "100%"]),
        height=400, margin=dict(t=90, b=40))
    return fig


def prefix_sharing_readout(fig: go.Figure | None = None, k: int = 8, system_len: int = 48,
                           block_size: int = 16,
                           user_len: int = 12) -> str:
    """One line under the prefix-sharing sliders: what sharing saved, and why not more."""
    s = prefix_sharing_summary(k, system_len, user_len, block_size)
    full = system_len // block_size  # only full blocks have a hash, so only they are shared
    saved = s["blocks_without_sharing"] - s["blocks_with_sharing"]
    line = (f"{s['blocks_without_sharing']} → <b>{s['blocks_with_sharing']} blocks</b>: the system prompt's "
            f"{full} full block(s) are stored once instead of {k} times ({saved} saved)")
    rest = system_len % block_size
    if rest:
        line += (f"; its last {rest} token(s) share a block with each request's own text, "
                 "so they are not shared")
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
    fig.update_layout(title=f"A {system_len}-token system prompt, {k} requests: what each block size can "
                            "share",
                      xaxis_title="block_size", height=380, margin=dict(t=70, b=40),
                      legend=dict(orientation="h", y=1.1))
    fig.update_yaxes(title_text="reused tokens", range=[0, system_len * 1.2], secondary_y=False)
    fig.update_yaxes(title_text="hit rate", range=[0, 1], tickformat=".0%", secondary_y=True)
    return fig


def _bound(bounds, name: str, value: int) -> range:
    lo, hi = (bounds or {}).get(name, (value, value))
    return range(int(lo), int(hi) + 1)


@lru_cache(maxsize=64)
def _playground_frame(block_size: int, num_blocks: int, requests: range, seeds: range) -> BlockFrame:
    return frame_of(random_requests(n, block_size, num_blocks=num_blocks, seed=s)[0]
                    for n in requests for s in seeds)


def block_table_playground(block_size: int = 4, num_requests: int = 6, seed: int = 0,
                           num_blocks: int = 32,
                           bounds: Mapping[str, tuple[int, int]] | None = None) -> go.Figure:
    """Random requests arrive (some finish) in a pool of ``num_blocks``; draw the final block tables.

    ``bounds`` (``viz.widgets.slider_bounds(controls)``: ``{"num_requests": (1, 30), "seed": (0, 9),
    "block_size": (1, 16)}``) are the controls' ranges: the figure makes room for the most sequences
    and the longest table any of their positions gives at any block size in range, so it holds still
    while they move, the block size dropdown included (its x range went from 26.5 to 19.9)."""
    bm, turned_away = random_requests(num_requests, block_size, num_blocks=num_blocks, seed=seed)
    tokens = sum(bm.num_tokens(s) for s in bm.seq_ids)
    slots = bm.num_used_blocks * block_size
    waste = f"{slots - tokens} of {slots} reserved slots empty" if slots else "nothing allocated"
    title = (f"block_size={block_size}: {len(bm.seq_ids)} running, {tokens} tokens in "
             f"{bm.num_used_blocks} blocks ({waste})"
             + (f", {turned_away} turned away" if turned_away else ""))
    sizes, reqs, seeds = (_bound(bounds, k, v) for k, v in (("block_size", block_size),
                                                          ("num_requests", num_requests), ("seed", seed)))
    frame = reduce(operator.or_, (_playground_frame(size, num_blocks, reqs, seeds) for size in sizes))
    return fig_block_tables(bm, block_size, title=title, cols=8, frame=frame)


def block_table_readout(fig: go.Figure | None = None, block_size: int = 4, num_requests: int = 6,
                        seed: int = 0,
                        num_blocks: int = 32) -> str:
    """One line under the block-table sliders: where the empty slots are, and why."""
    bm, turned_away = random_requests(num_requests, block_size, num_blocks=num_blocks, seed=seed)
    running = bm.seq_ids
    tokens = sum(bm.num_tokens(s) for s in running)
    empty = bm.num_used_blocks * block_size - tokens
    line = (f"{len(running)} running request(s) hold {tokens} tokens in {bm.num_used_blocks} of {num_blocks} "
            f"blocks: <b>{empty} empty slots</b>, all in last blocks (at most {block_size - 1} per request, "
            f"so at most {len(running) * (block_size - 1)})")
    if turned_away:
        line += f"; {turned_away} turned away: the pool of {num_blocks} × {block_size} slots was full"
    return line
