"""The report kit: what every section and system report builds its page from.

- `text`: escaping (`esc`, `Html` for markup already safe), notes, findings (a bold
  headline and its evidence, in a box);
- `tables`: header, rows, alignment by column, escaping, verdict colours;
- `figure`: a figure as data (`Figure`, `Trace`, `Axis`, `Marker`), which
  `knee.report.figures` names too;
- `axes`: the axis decisions both renderers apply: whole-number ticks on count axes, time
  axes in the unit that fits the data.

Number formatting is `knee.report.fmt`. The kit imports nothing else of the report, so the
renderers (`knee.report.figures`, `knee.report.png`) can use it.
"""

from knee.report.kit.axes import AxisKind, TimeUnit, for_display, integer_step, time_unit
from knee.report.kit.tables import Cell, Col, Row, lines, table, verdict
from knee.report.kit.text import Finding, Html, esc, finding, findings, markup, note, plural

__all__ = [
    "AxisKind",
    "Cell",
    "Col",
    "Finding",
    "Html",
    "Row",
    "TimeUnit",
    "esc",
    "finding",
    "findings",
    "for_display",
    "integer_step",
    "lines",
    "markup",
    "note",
    "plural",
    "table",
    "time_unit",
    "verdict",
]
