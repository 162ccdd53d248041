"""Rows shown as a table, never as a dict dump: HTML in Jupyter, Markdown in ``print``.

One class for every table the series shows (a run's numbers, a measurement, the model catalogue, the
glossary's rows):

    display(table({"static": {"steps": 8}, "continuous": {"steps": 6}}, index="batching"))

The header, and a first column of row labels (``index=``), are the notebook's own words: they are
shown in the learner's language (``paged_lab.viz.i18n``). The other cells are data (numbers, model names,
generated text) and are shown as they are; whole numbers get thousands separators.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from paged_lab.viz import i18n


class Table:
    """``header`` and ``rows`` (lists of cells); ``labels``: the first column names the rows.

    Columns by index: ``bold`` ones are shown in bold (the glossary's serving names), ``prose`` ones
    (sentences) aligned left in HTML, where Jupyter aligns cells right; in ``code`` ones a `span` in
    backticks is shown as code in HTML (the Markdown keeps the backticks, which Markdown renders).
    ``note``: a line shown under the table in Jupyter, in the learner's language (the Markdown is the
    table alone)."""

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[Any]], labels: bool = False,
                 bold: Sequence[int] = (), prose: Sequence[int] = (), note: str | None = None,
                 code: Sequence[int] = ()):
        self.header, self.rows, self.labels = list(header), [list(r) for r in rows], labels
        self.bold, self.prose, self.note, self.code = tuple(bold), tuple(prose), note, tuple(code)
        for name, columns in (("bold", self.bold), ("prose", self.prose), ("code", self.code)):
            outside = [j for j in columns if not 0 <= j < len(self.header)]
            if outside:
                raise ValueError(f"{name} must name columns 0 to {len(self.header) - 1}, got {outside}")

    def _shown(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows as the learner reads them: words translated, numbers formatted."""
        def cell(value: Any, is_label: bool) -> str:
            if isinstance(value, int) and not isinstance(value, bool):
                return f"{value:,}"
            return i18n.t(value) if is_label and isinstance(value, str) else str(value)

        rows = [[cell(v, self.labels and j == 0) for j, v in enumerate(r)] for r in self.rows]
        return [i18n.t(h) for h in self.header], rows

    def _repr_html_(self) -> str:
        header, rows = self._shown()

        def esc(text: str) -> str:
            return html.escape(text, quote=False)  # element text: "Ah-Ye's" stays as written

        def td(j: int, text: str) -> str:
            text = f"<b>{esc(text)}</b>" if j in self.bold else esc(text)
            if j in self.code:
                text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
            return f"<td style='text-align:left'>{text}</td>" if j in self.prose else f"<td>{text}</td>"

        head = "".join(f"<th>{esc(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(td(j, c) for j, c in enumerate(row)) + "</tr>" for row in rows)
        note = f"<p style='font-size:85%;color:#555'>{esc(i18n.t(self.note))}</p>" if self.note else ""
        return (f"<table class='paged-lab-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"{note}")

    def _repr_markdown_(self) -> str:
        header, rows = self._shown()

        def md(j: int, text: str) -> str:
            text = text.replace("|", "\\|")
            return f"**{text}**" if j in self.bold else text

        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(md(j, c) for j, c in enumerate(row)) + " |" for row in rows]
        return "\n".join(lines)

    __str__ = _repr_markdown_


def table(rows: Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
          index: str | None = None) -> Table:
    """A ``Table`` from a list of dicts (one row each; the first dict's keys are the columns), or from
    ``{row label: dict}`` with the label in a first column named ``index``."""
    if isinstance(rows, Mapping):
        if index is None:
            raise ValueError("index must name the first column when rows is a {label: row} dict")
        rows = [{index: label, **row} for label, row in rows.items()]
    rows = list(rows)
    if not rows:
        raise ValueError("rows must hold at least one row")
    header = list(rows[0])
    missing = [i for i, r in enumerate(rows) if list(r) != header]
    if missing:
        raise ValueError(f"rows {missing} have other columns than the first row's {header}")
    return Table(header, [[r[h] for h in header] for r in rows], labels=index is not None)
