"""The HTML report and its figures (`knee report RUN`, `knee compare RUN_A RUN_B`).

`build(run_dir)` writes run_dir/report.html (one self-contained file, plotly.js inline) and
run_dir/figures/*.png. Sections are in `knee.report.sections`; a system adds its own in
`knee.report.systems.<system>` (docs/report.md).
"""

from knee.report.data import ReportRun
from knee.report.figures import Axis, Figure, Marker, Trace
from knee.report.html import Section
from knee.report.writer import build

__all__ = ["Axis", "Figure", "Marker", "ReportRun", "Section", "Trace", "build"]
