"""The prefix cache's hash chain as a picture (notebook 04).

Every full block of a prompt is named by ``hash_block(parent hash, its tokens, extra_key)``
(``paged_lab.memory.prefix_cache``), so a block's name stands for its tokens *and every token before
them*. ``fig_hash_chain`` draws those names for a few prompts, one box per distinct hash, left to
right by block position, with an arrow from each parent to its child:

    A:  [h0] -> [h1] -> [h2a]          two prompts with the same first 8 tokens (blocks of 4)
                    \\-> [h2b]          share h0 and h1: the same box, drawn once
    C:  [g0] -> [g1] -> ...            the same tokens under another extra_key: a chain of its own

A partly filled last block gets no hash (its content is still changing): a dashed box. The hashes
are computed here with the package's own ``block_hashes``; nothing is copied or re-implemented.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go

from paged_lab.memory.prefix_cache import BlockHash, block_hashes
from paged_lab.viz.colors import ink_for, seq_colors

SHARED = "#525252"  # a hash two prompts share: the look of a shared block in viz.blocks
BOX_W, BOX_H, STEP_X, STEP_Y = 1.6, 0.8, 2.3, 1.3  # box size and spacing, in axis units
HEX_CHARS = 8  # a hash is shown by its first 8 hex digits (16 bytes in full, on hover)


@dataclass
class ChainNode:
    """One distinct block hash: where it sits in the chain and which prompts reach it."""

    digest: BlockHash
    position: int  # block index in the prompt (0 = the first block)
    tokens: tuple[int, ...]
    parent: BlockHash | None
    prompts: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.digest.hex()[:HEX_CHARS]


def hash_chain(prompts: Mapping[str, Sequence[int]], block_size: int,
               extra_keys: Mapping[str, Hashable] | None = None) -> dict[BlockHash, ChainNode]:
    """The distinct hashes of every full block of ``prompts`` (name -> token ids), in first-seen order.

    ``extra_keys`` salts a prompt's chain (name -> key, e.g. a LoRA id); a prompt not listed has none."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    nodes: dict[BlockHash, ChainNode] = {}
    for name, tokens in prompts.items():
        parent = None
        for j, digest in enumerate(block_hashes(tokens, block_size, (extra_keys or {}).get(name))):
            own = tuple(tokens[j * block_size:(j + 1) * block_size])  # the block's own tokens
            node = nodes.setdefault(digest, ChainNode(digest, j, own, parent))
            node.prompts.append(name)
            parent = digest
    return nodes


def _tokens_text(tokens: Sequence[int]) -> str:
    text = ", ".join(map(str, tokens))
    return f"[{text}]" if len(text) <= 18 else f"[{tokens[0]}, …, {tokens[-1]}]"


def fig_hash_chain(prompts: Mapping[str, Sequence[int]], block_size: int,
                   extra_keys: Mapping[str, Hashable] | None = None,
                   title: str = "The hash chain: each full block is named by its parent's hash, its tokens "
                                "and extra_key") -> go.Figure:
    """One box per distinct block hash of ``prompts`` (``hash_chain``), an arrow parent -> child.

    Each prompt has a row; a hash several prompts reach is drawn once, between their rows, in dark
    grey (shared: the prefix cache stores that block once). A box shows the hash's first 8 hex
    digits over the block's tokens. The boxes are one text trace named ``"block hashes"`` whose
    ``customdata`` holds each full hash (hex); every arrow is an annotation named ``"parent -> child"``
    (first 8 hex digits each), so a test reads what the figure shows."""
    nodes = hash_chain(prompts, block_size, extra_keys)
    names = list(prompts)
    row = {name: i for i, name in enumerate(names)}
    colors = seq_colors(names)

    def xy(node: ChainNode) -> tuple[float, float]:
        """Left edge and centre height: x by block position, y between the rows of the prompts
        that reach it."""
        return node.position * STEP_X, -sum(row[p] for p in node.prompts) / len(node.prompts) * STEP_Y

    fig = go.Figure()
    shapes, notes = [], []
    xs, ys, texts, hovers, digests, inks = [], [], [], [], [], []
    for node in nodes.values():
        x, y = xy(node)
        shared = len(node.prompts) > 1
        fill = SHARED if shared else colors[node.prompts[0]]
        shapes.append(dict(type="rect", x0=x, x1=x + BOX_W, y0=y - BOX_H / 2, y1=y + BOX_H / 2,
                           fillcolor=fill,
                           line=dict(color="#222222" if shared else fill, width=2 if shared else 1),
                           layer="below", name="block"))
        xs.append(x + BOX_W / 2)
        ys.append(y)
        texts.append(f"<b>{node.label}</b><br>{_tokens_text(node.tokens)}")
        hovers.append(f"block {node.position}: hash {node.digest.hex()}, tokens {list(node.tokens)}, "
                      f"parent {node.parent.hex()[:HEX_CHARS] if node.parent else 'none (the first block)'}; "
                      f"reached by {', '.join(node.prompts)}")
        digests.append(node.digest.hex())
        inks.append(ink_for(fill))
        if node.parent is not None:  # the arrow parent -> child: the child's name depends on the parent's
            px, py = xy(nodes[node.parent])
            notes.append(dict(x=x, y=y, ax=px + BOX_W, ay=py, xref="x", yref="y", axref="x", ayref="y",
                              showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor="#555555", text="",
                              name=f"{nodes[node.parent].label} -> {node.label}"))
    fig.add_trace(go.Scatter(x=xs, y=ys, text=texts, hovertext=hovers, customdata=digests, mode="text",
                             hoverinfo="text", textfont=dict(size=11, color=inks), showlegend=False,
                             name="block hashes"))
    for name, tokens in prompts.items():  # the prompt's name at its row, and its partial last block
        y = -row[name] * STEP_Y
        key = (extra_keys or {}).get(name)
        notes.append(dict(x=-0.3, y=y, xref="x", yref="y", showarrow=False, xanchor="right",
                          name=f"prompt {name}",
                          text=f"<b>{name}</b>" + (f"<br>extra_key={key!r}" if key is not None else ""),
                          font=dict(color=colors[name], size=12)))
        rest = len(tokens) % block_size
        if rest:
            x = len(tokens) // block_size * STEP_X
            shapes.append(dict(type="rect", x0=x, x1=x + BOX_W, y0=y - BOX_H / 2, y1=y + BOX_H / 2,
                               line=dict(color=colors[name], width=1, dash="dot"), fillcolor="white",
                               layer="below", name="partial"))
            notes.append(dict(x=x + BOX_W / 2, y=y, xref="x", yref="y", showarrow=False,
                              name=f"partial {name}",
                              text=f"{rest} of {block_size} tokens:<br>no hash yet", font=dict(size=10)))
    longest = max(len(t) for t in prompts.values())
    width = max(1, -(-longest // block_size)) * STEP_X
    fig.update_layout(title=title, shapes=shapes, annotations=notes, plot_bgcolor="white",
                      height=140 + 95 * len(names), margin=dict(t=70, b=20, l=120, r=20),
                      xaxis=dict(visible=False, range=[-0.4, width]),
                      yaxis=dict(visible=False, range=[-(len(names) - 1) * STEP_Y - 0.7, 0.7]))
    return fig
