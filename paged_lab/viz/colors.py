"""One colour per request, in every figure of a notebook.

A request's colour follows from its id alone, so two figures that draw request A draw it alike
whatever else they show (notebook 03 once drew A blue in one figure and olive in the next, because
each figure coloured its sequences in the order it met them):

- a one-capital-letter id takes its place in the alphabet: A blue, B orange, C green, ...;
- an id with a number takes that number: ``r2``, ``sample-2``, ``2`` and ``2_req`` are all green;
- any other id (``"first"``, ``"p"``) takes the first colour no numbered or lettered id of the same
  figure has, in the order given.

Ten colours go round: ``r0`` and ``r10`` look alike. Shared blocks are not drawn in a request's colour
(``viz.blocks.SHARED_FILL``). ``seq_name`` is how a figure or a readout writes an id: a bare number
is written ``request 4``, so that "a new block for 4" cannot be read as four tokens.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
_NUMBER = re.compile(r"(\d+)(?!.*\d)")  # the last number in an id: "r12" -> 12, "sample-0" -> 0
_BARE = re.compile(r"\d+(?:\.\d+)*")  # "4", "0.1" (a child of request 0)


def natural_index(seq_id: Hashable) -> int | None:
    """The palette slot an id implies (see the module docstring), or None for an id with neither a
    single letter nor a number."""
    if isinstance(seq_id, bool):
        return None
    if isinstance(seq_id, int):
        return seq_id
    text = str(seq_id)
    if len(text) == 1 and "A" <= text <= "Z":
        return ord(text) - ord("A")
    found = _NUMBER.search(text)
    return int(found.group(1)) if found else None


def seq_colors(ids: Iterable[Hashable]) -> dict[Hashable, str]:
    """A colour for each id (see the module docstring); the same id gets the same colour in every call
    unless it has neither a letter nor a number, and then only its place among such ids counts."""
    ids = list(dict.fromkeys(ids))
    slots = {sid: natural_index(sid) for sid in ids}
    taken = {s % len(PALETTE) for s in slots.values() if s is not None}
    free = [i for i in range(len(PALETTE)) if i not in taken] or list(range(len(PALETTE)))
    out, k = {}, 0
    for sid in ids:
        if slots[sid] is None:
            slots[sid], k = free[k % len(free)], k + 1
        out[sid] = PALETTE[slots[sid] % len(PALETTE)]
    return out


def seq_name(seq_id: Hashable) -> str:
    """How a figure writes a sequence id: ``request 4`` for a bare number, the id itself otherwise."""
    text = str(seq_id)
    return f"request {text}" if _BARE.fullmatch(text) else text


def _luminance(hex_color: str) -> float:
    r, g, b = (int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


INKS = ("#ffffff", "#222222")


def ink_for(fill: str) -> str:
    """White or near-black text, whichever contrasts more with the colour ``fill`` (``#rrggbb``):
    white on blue, red, purple; dark on orange, green, olive, cyan and light grey."""
    if not (isinstance(fill, str) and re.fullmatch(r"#[0-9a-fA-F]{6}", fill)):
        return "#222222"
    return max(INKS, key=lambda ink: contrast(ink, fill))
