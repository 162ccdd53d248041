"""Figures of notebook 10, speculative decoding as KV rollback: pure functions of the package's numbers.

- ``fig_spec_step``: one request's slots through one step with drafts, in four rows: draft (slots
  allocated ahead), verify (one forward pass writes them all), accept (the longest agreeing prefix),
  roll back (``num_computed_tokens`` goes back; the slots and blocks stay). Its input, ``SpecStepView``,
  is read from the engine's own record of the step (``step_view``).
- ``fig_expected_tokens``: tokens per step against the acceptance rate, ``(1 − a^(k+1)) / (1 − a)``.
- ``fig_sampled_shares``: the rejection sampler's output shares beside the target's distribution.
- ``fig_spec_replay`` and ``spec_replay_readout``: the playground, one bar per step of a greedy run
  replayed with ``k`` drafts (``engine.spec_decode.rules.replay_greedy``).

Nothing here runs a model or a manager.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from paged_lab.engine.spec_decode.speedup import ReplayStep, expected_tokens_per_step
from paged_lab.memory import Event, replay

# one look per state of a slot, in every figure of the notebook
KINDS = {  # kind: (colour, legend); a kind ending in "slot" is drawn as an outline: allocated, not written
    "verified": ("#1f77b4", "KV of a verified token"),
    "last slot": ("#9467bd", "slot for the last token"),
    "draft slot": ("#ff7f0e", "slot allocated ahead for a draft"),
    "last": ("#9467bd", "the last token's KV, written"),
    "draft": ("#ff7f0e", "a draft's KV, written, not verified"),
    "accepted": ("#2ca02c", "a draft the target accepted"),
    "rejected": ("#d62728", "a draft the target rejected"),
    "stale": ("#c7c7c7", "rolled back: slot kept, written over later"),
    "empty": ("#ffffff", "empty slot of a held block"),
}
GAP = 0.6  # between two blocks, in slots


@dataclass(frozen=True)
class SpecStepView:
    """What one step with drafts did to one request, as the figure needs it.

    ``num_computed_tokens``: tokens whose KV was written before the step (the request's last token is the
    next, scheduled with the drafts); ``block_table``: the request's table after ``allocate_slots`` for
    the step (it stays so after the roll-back); ``target_token_id``: the token the target picked at the
    first rejected draft (or after the last draft: the bonus token), None where it is not known."""

    block_size: int
    block_table: tuple[int, ...]
    num_computed_tokens: int
    num_drafts: int
    num_accepted: int
    target_token_id: int | None = None

    def __post_init__(self):
        k = self.num_drafts
        if not 0 <= self.num_accepted <= k:
            raise ValueError(f"num_accepted must be in [0, {k}] (the drafts), got {self.num_accepted}")
        slots = len(self.block_table) * self.block_size
        if self.num_computed_tokens + 1 + k > slots:
            raise ValueError(f"block_table holds {slots} slots, fewer than num_computed_tokens + 1 + drafts "
                             f"= {self.num_computed_tokens + 1 + k}")

    @property
    def num_computed_after(self) -> int:
        """``num_computed_tokens`` after the roll-back: the last token and the accepted drafts count."""
        return self.num_computed_tokens + 1 + self.num_accepted

    @property
    def blocks_of_rejected_only(self) -> list[int]:
        """Blocks of the table that hold rejected drafts and nothing verified: vLLM keeps them."""
        first = self.num_computed_after
        return [b for j, b in enumerate(self.block_table)
                if j * self.block_size >= first
                and j * self.block_size < self.num_computed_tokens + 1 + self.num_drafts]


def spec_steps(events: Sequence[Event], seq_id: Hashable) -> list[dict]:
    """The steps with drafts of request ``seq_id``, read from the engine's event log (a whole log, from the
    engine's start: positions in it are what ``replay`` counts). For each ``draft`` event: the step
    (``clock``), its position in the log (``at``), the known tokens then (``num_tokens``, the pending one
    included: the request's last ``append`` or ``allocate``), the drafts (the ``draft`` event's
    ``num_tokens``, its slot end, less that) and the accepted ones (the step's ``accept`` event, or its
    ``rollback`` when none was accepted)."""
    out, known, current = [], 0, None
    for at, e in enumerate(events):
        if e.seq_id != seq_id:
            continue
        if e.kind in ("append", "allocate"):
            known = e.num_tokens
        elif e.kind == "draft":
            current = {"clock": e.clock, "at": at, "num_tokens": known, "num_drafts": e.num_tokens - known}
        elif e.kind in ("accept", "rollback") and current is not None and e.clock == current["clock"]:
            # accept: num_tokens = known + accepted; none accepted: only the rollback, to the same count
            out.append({**current, "num_accepted": e.num_tokens - current["num_tokens"]})
            current = None
    return out


def step_view(events: Sequence[Event], seq_id: Hashable, clock: int, num_blocks: int, block_size: int,
              token_ids: Sequence[int] | None = None) -> SpecStepView:
    """The ``SpecStepView`` of request ``seq_id``'s step ``clock``, from the engine's event log: its table
    right after the drafts got their slots (``replay``), the tokens computed before the step (the known
    ones but the pending one), the drafts and the accepted ones. ``token_ids`` (prompt + output) names
    the target's own token at the first rejected draft."""
    found = [s for s in spec_steps(events, seq_id) if s["clock"] == clock]
    if not found:
        raise ValueError(f"request {seq_id!r} verified no drafts at step {clock}")
    s = found[0]
    table = replay(events, num_blocks, upto=s["at"] + 1).tables[seq_id]
    n, a = s["num_tokens"], s["num_accepted"]
    target = int(token_ids[n + a]) if token_ids is not None and n + a < len(token_ids) else None
    return SpecStepView(block_size, tuple(table), n - 1, s["num_drafts"], a, target)


def _stage_kinds(view: SpecStepView) -> list[list[str]]:
    """The state of every slot of the table in each of the four rows (draft, verify, accept, roll back)."""
    c, k, n = view.num_computed_tokens, view.num_drafts, view.num_accepted
    slots = len(view.block_table) * view.block_size

    def row(last, accepted, rejected, after=None):
        out = []
        for s in range(slots):
            if s < c or (after is not None and s < after):
                out.append("verified")
            elif s == c:
                out.append(last)
            elif s <= c + k:
                out.append(accepted if s - c - 1 < n else rejected)
            else:
                out.append("empty")
        return out

    return [row("last slot", "draft slot", "draft slot"), row("last", "draft", "draft"),
            row("verified", "accepted", "rejected"), row("verified", "verified", "stale",
                                                         after=view.num_computed_after)]


def _x(slot: int, block_size: int) -> float:
    return slot + (slot // block_size) * GAP


def fig_spec_step(view: SpecStepView, title: str | None = None, max_blocks: int = 4) -> go.Figure:
    """Four rows, one request's slots in each, block by block: draft → verify → accept → roll back. Only
    the table's last ``max_blocks`` blocks are drawn (the earlier ones hold verified tokens only)."""
    k, n = view.num_drafts, view.num_accepted
    kept = view.blocks_of_rejected_only
    rows = [f"1 · draft {k}: slots allocated ahead",
            f"2 · verify: one forward pass writes {1 + k} slots",
            f"3 · accept {n} of {k}" + ("" if view.target_token_id is None
                                        else f"; the target picks {view.target_token_id}"),
            f"4 · roll back: num_computed_tokens = {view.num_computed_after}"
            + (f"; block {', '.join(map(str, kept))} stays" if kept else "")]
    kinds = _stage_kinds(view)
    bs = view.block_size
    first = max(0, len(view.block_table) - max_blocks)  # the first block drawn
    size = max(8, min(20, round(520 / (min(max_blocks, len(view.block_table)) * bs))))  # px per slot
    fig = go.Figure()
    for kind, (color, name) in KINDS.items():
        xs, ys, hover = [], [], []
        for r, states in enumerate(kinds):
            for s, state in enumerate(states):
                if state == kind and s >= first * bs:
                    b = view.block_table[s // bs]
                    xs.append(_x(s - first * bs, bs))
                    ys.append(len(rows) - 1 - r)
                    hover.append(f"position {s}: slot {b * bs + s % bs} (block {b}, offset {s % bs}); {name}")
        outline = kind.endswith("slot")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, hovertext=hover, hoverinfo="text",
                                 marker=dict(symbol="square", size=size, color="white" if outline else color,
                                             line=dict(color=color if outline else "#777777",
                                                       width=3 if outline else 1))))
    heads = [dict(x=_x(j * bs, bs) + (bs - 1) / 2, y=len(rows) - 0.45, text=f"block {b}", showarrow=False,
                  yanchor="bottom") for j, b in enumerate(view.block_table[first:])]
    if first:
        heads.append(dict(x=-1, y=len(rows) - 0.45, text=f"(+{first} earlier)", showarrow=False,
                          xanchor="right", yanchor="bottom"))
    fig.update_layout(
        title=title or f"One step with {k} drafts, block size {bs}: {n} accepted, "
                       f"{k - n} rolled back",
        annotations=heads, plot_bgcolor="white", height=380, margin=dict(t=90, b=40, l=10, r=10),
        xaxis=dict(visible=False, range=[-1, _x((len(view.block_table) - first) * bs, bs)]),
        yaxis=dict(tickvals=list(range(len(rows))), ticktext=rows[::-1], range=[-0.6, len(rows) + 0.1],
                   showgrid=False, zeroline=False),
        legend=dict(orientation="h", x=0, y=-0.05, yanchor="top"))
    return fig


def fig_expected_tokens(ks: Sequence[int] = (1, 2, 3, 5, 8), points: int = 51,
                        marked: Mapping[str, tuple[float, float]] | None = None,
                        title: str = "Tokens per step with k drafts: (1 − aᵏ⁺¹) / (1 − a)") -> go.Figure:
    """One line per ``k``: the expected tokens a step yields against the acceptance rate ``a``; ``marked``
    adds measured points (name → (acceptance rate, tokens per step))."""
    rates = [i / (points - 1) for i in range(points)]
    fig = go.Figure()
    for k in ks:
        fig.add_trace(go.Scatter(x=rates, y=[expected_tokens_per_step(a, k) for a in rates], mode="lines",
                                 name=f"k = {k}"))
    for name, (a, tokens) in (marked or {}).items():
        fig.add_trace(go.Scatter(x=[a], y=[tokens], mode="markers+text", name=name, text=[name],
                                 textposition="top left" if a > 0.5 else "top right",  # inside the plot
                                 marker=dict(size=10, symbol="diamond")))
    fig.update_layout(title=title, xaxis_title="acceptance rate a (per draft)",
                      yaxis_title="tokens per step", height=420)
    return fig


def fig_sampled_shares(target_probs: Sequence[float], shares: Mapping[str, Sequence[float]],
                       title: str = "Rejection sampling keeps the target's distribution") -> go.Figure:
    """Bars per token: the target's probabilities, then the shares each draft's run produced."""
    tokens = [f"token {i}" for i in range(len(target_probs))]
    fig = go.Figure(go.Bar(x=tokens, y=list(target_probs), name="target p", marker_color="#1f77b4"))
    for name, values in shares.items():
        if len(values) != len(target_probs):
            raise ValueError(f"shares[{name!r}] has {len(values)} entries, the target {len(target_probs)}")
        fig.add_trace(go.Bar(x=tokens, y=list(values), name=name))
    fig.update_layout(title=title, barmode="group", yaxis_title="share of the output", height=400)
    return fig


def replay_totals(steps: Sequence[ReplayStep]) -> dict[str, int]:
    """A replayed run's counts: steps, tokens emitted, drafts verified and accepted."""
    return {"steps": len(steps), "tokens": sum(s.num_emitted for s in steps),
            "drafts": sum(s.num_drafts for s in steps), "accepted": sum(s.num_accepted for s in steps)}


def fig_spec_replay(k: int, prompt_kind: str, replays: Mapping[str, Mapping[int, Sequence[ReplayStep]]]
                    ) -> go.Figure:
    """The playground: one bar per step of the greedy run of ``prompt_kind`` replayed with ``k`` drafts
    (``replays[kind][k]``, from ``speedup.replay_greedy``): the target's own token, the accepted drafts,
    and the rejected ones (their slots written and rolled back). The axes are fixed by the longest run
    and the largest ``k`` among ``replays``, so only the bars move."""
    if prompt_kind not in replays or k not in replays[prompt_kind]:
        raise ValueError(f"no replay for prompt_kind={prompt_kind!r}, k={k}; replays has "
                         f"{ {kind: sorted(r) for kind, r in replays.items()} }")
    steps = replays[prompt_kind][k]
    x = list(range(1, len(steps) + 1))
    own = [1 if s.num_emitted > s.num_accepted else 0 for s in steps]
    parts = [("the target's own token", own, KINDS["verified"][0]),
             ("accepted drafts", [s.num_accepted for s in steps], KINDS["accepted"][0]),
             ("rejected drafts (rolled back)", [s.num_drafts - s.num_accepted for s in steps],
              KINDS["rejected"][0])]
    fig = go.Figure([go.Bar(x=x, y=y, name=name, marker_color=color) for name, y, color in parts])
    t = replay_totals(steps)
    longest = max(len(r) for runs in replays.values() for r in runs.values())
    top = max(runs_k for runs in replays.values() for runs_k in runs) + 1
    fig.update_layout(
        barmode="stack", height=420,
        title=f"{prompt_kind}, k = {k}: {t['tokens']} tokens in {t['steps']} steps "
              f"(one token a step: {t['tokens']} steps)",
        xaxis=dict(title="engine step (step 1: the prompt)", range=[0.5, longest + 0.5]),
        yaxis=dict(title="tokens scheduled after the step's own", range=[0, top + 0.2], dtick=1),
        legend=dict(orientation="h", x=0, y=-0.2, yanchor="top"))
    return fig


def spec_replay_readout(fig: go.Figure | None = None, k: int = 3, prompt_kind: str = "repetitive",
                        replays: Mapping[str, Mapping[int, Sequence[ReplayStep]]] | None = None) -> list[str]:
    """The playground's readout: acceptance, steps saved, and what the rejected drafts cost in slots."""
    if replays is None:
        raise ValueError("replays is required: {prompt kind: {k: replay_greedy(...)}}")
    t = replay_totals(replays[prompt_kind][k])
    rate = t["accepted"] / t["drafts"] if t["drafts"] else 0.0
    return [f"{t['drafts']} drafts verified, {t['accepted']} accepted: acceptance rate {rate:.0%}",
            f"{t['steps']} steps instead of {t['tokens']}: {t['tokens'] / t['steps']:.2f} tokens per step, "
            f"{1 - t['steps'] / t['tokens']:.0%} fewer steps",
            f"{t['drafts'] - t['accepted']} KV slots written for rejected drafts and rolled back"]
