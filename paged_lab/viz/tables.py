"""Rows shown as a table, never as a dict dump: HTML in Jupyter, Markdown in ``print``.

One class for every table a notebook shows (a run's numbers, a measurement, the model catalogue):

    display(table({"static": {"steps": 8}, "continuous": {"steps": 6}}, index="batching"))

The header, and a first column of row labels (``index=``), are the notebook's own words: they are
shown in the learner's language (``paged_lab.classroom.i18n``). The other cells are data (numbers, model names,
generated text) and are shown as they are; whole numbers get thousands separators.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from paged_lab.classroom import i18n


class Table:
    """``header`` and ``rows`` (lists of cells); ``labels``: the first column names the rows."""

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[Any]], labels: bool = False):
        self.header, self.rows, self.labels = list(header), [list(r) for r in rows], labels

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
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table class='paged-lab-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def _repr_markdown_(self) -> str:
        header, rows = self._shown()
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)

    __str__ = _repr_markdown_


def table(rows: Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]], index: str | None = None) -> Table:
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
