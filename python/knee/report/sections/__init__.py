"""The report's standard sections, in page order. Each module has `section(rr) -> Section`
and works for any system."""

from __future__ import annotations

from collections.abc import Callable

from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.sections import (
    boxes,
    factors,
    headline,
    load_curve,
    search_path,
    spectrum,
    summary,
    timeseries,
    top1,
    what_ran,
    what_sets,
)

STANDARD: tuple[Callable[[ReportRun], Section], ...] = (
    headline.section,  # the answer first; the run's metadata after (DESIGN.md)
    search_path.section,  # empty (left out) unless the run is a search
    what_sets.section,  # empty (left out) unless a point measured its resources' U
    what_ran.section,
    summary.section,
    load_curve.section,
    spectrum.section,
    boxes.section,
    timeseries.section,
    top1.section,
    factors.section,
)
