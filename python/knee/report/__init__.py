"""The HTML report and its figures (`knee report RUN`, `knee compare RUN_A RUN_B`).

`build(run_dir)` writes run_dir/report.html (one self-contained file, plotly.js inline) and
run_dir/figures/*.png. Sections are in `knee.report.sections`; a system adds its own in
`knee.report.systems.<system>` (docs/report.md).
"""

from typing import TYPE_CHECKING

from knee import lazy

if TYPE_CHECKING:
    from knee.report.data import ReportRun
    from knee.report.figures import Axis, Figure, Marker, Trace
    from knee.report.html import Section
    from knee.report.writer import build

#: Where each name lives (imported on first use: knee.lazy), so that a module of this
#: package (its types, fmt) does not load the report's whole stack (the models, scipy: about
#: a second).
_LAZY = {
    "ReportRun": "knee.report.data",
    "Axis": "knee.report.figures",
    "Figure": "knee.report.figures",
    "Marker": "knee.report.figures",
    "Trace": "knee.report.figures",
    "Section": "knee.report.html",
    "build": "knee.report.writer",
}

__getattr__ = lazy.attributes(__name__, _LAZY)

__all__ = ["Axis", "Figure", "Marker", "ReportRun", "Section", "Trace", "build"]
