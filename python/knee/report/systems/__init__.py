"""System-specific report sections.

A module `knee.report.systems.<system>` with `sections(run: ReportRun, models: list[dict])
-> list[Section]` adds its sections after the standard ones for runs of that system (see
docs/report.md).
"""
