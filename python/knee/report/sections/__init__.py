"""The report's standard sections, in page order. Each module has `section(rr) -> Section`
and works for any system."""

from __future__ import annotations

from collections.abc import Callable

from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.sections import (
    boxes,
    factors,
    load_curve,
    spectrum,
    summary,
    timeseries,
    top1,
    what_ran,
)

STANDARD: tuple[Callable[[ReportRun], Section], ...] = (
    what_ran.section,
    summary.section,
    load_curve.section,
    spectrum.section,
    boxes.section,
    timeseries.section,
    top1.section,
    factors.section,
)
