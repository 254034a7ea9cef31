"""Tables: a header, rows, each column aligned by what it holds (text left, numbers right),
every value escaped unless it is `Html`, None shown as "-"."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from knee.report.kit.text import Html, esc, markup

#: Verdicts (checks, stability, comparisons) to the page's colours.
VERDICT_CSS = {
    "pass": "v-pass",
    "stable": "v-pass",
    "warn": "v-warn",
    "fail": "v-fail",
    "unstable": "v-fail",
}


@dataclass(frozen=True)
class Col:
    title: str
    left: bool = False  # text reads from the left; numbers line up on the right
    tip: str = ""  # the header's hover text


@dataclass(frozen=True)
class Cell:
    """A cell that needs more than its value: a class (a verdict's colour) or hover text."""

    value: Any
    css: str = ""
    tip: str = ""


@dataclass(frozen=True)
class Row:
    cells: Sequence[Any]
    css: str = ""  # e.g. "unstable": the page's style sets such rows apart


def lines(main: Any, *below: Any) -> Html:
    """A value with smaller grey lines under it (an interval, a second quantity)."""
    extra = "".join(f'<span class="ci">{markup(b, "")}</span>' for b in below if b != "")
    return Html(f"{markup(main)}{extra}")


def verdict(value: Any, tip: str = "") -> Cell:
    """A verdict in its colour ("-" in grey when there is none)."""
    if value is None:
        return Cell("-", "v-na", tip)
    return Cell(value, VERDICT_CSS.get(str(value), "v-na"), tip)


def table(
    cols: Sequence[Col | str],
    rows: Iterable[Row | Sequence[Any]],
    *,
    scroll: bool = False,
    details: str = "",
    heading: str = "",
) -> Html:
    """The table's HTML. A plain string column is a number column (right-aligned).
    `scroll`: wide tables scroll sideways instead of widening the page. `details`: folded
    under that summary line. `heading`: an h3 above."""
    columns = [c if isinstance(c, Col) else Col(c) for c in cols]
    head = "".join(_th(c) for c in columns)
    body = "".join(_tr(r if isinstance(r, Row) else Row(r), columns) for r in rows)
    out = f"<table><tr>{head}</tr>{body}</table>"
    if scroll:
        out = f'<div style="overflow-x:auto">{out}</div>'
    if details:
        out = f"<details><summary>{esc(details)}</summary>{out}</details>"
    if heading:
        out = f"<h3>{esc(heading)}</h3>{out}"
    return Html(out)


def _attrs(css: str, tip: str) -> str:
    return (f' class="{esc(css)}"' if css else "") + (f' title="{esc(tip)}"' if tip else "")


def _th(c: Col) -> str:
    return f"<th{_attrs('l' if c.left else '', c.tip)}>{esc(c.title)}</th>"


def _tr(row: Row, columns: list[Col]) -> str:
    if len(row.cells) != len(columns):
        raise ValueError(f"a row of {len(row.cells)} cells in a table of {len(columns)} columns")
    cells = "".join(_td(v, c) for v, c in zip(row.cells, columns, strict=True))
    return f"<tr{_attrs(row.css, '')}>{cells}</tr>"


def _td(value: Any, col: Col) -> str:
    cell = value if isinstance(value, Cell) else Cell(value)
    css = " ".join(filter(None, ["l" if col.left else "", cell.css]))
    return f"<td{_attrs(css, cell.tip)}>{markup(cell.value)}</td>"
