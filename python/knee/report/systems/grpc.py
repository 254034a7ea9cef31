"""The grpc system's section: per point, the calls by gRPC status code (by name), why the
failed ones failed (the server's status, a deadline, a connection, a reply that broke the
protocol), and the calls that waited for a connection to be made.

Every number comes from `knee.analysis.grpc`.
"""

from __future__ import annotations

from knee.analysis import grpc as analysis
from knee.models.types import SeriesModels
from knee.report import calls
from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.kit import Col, Html, note

TITLE = "gRPC: status codes, failures and connects"
#: What the section's table counts, said before it.
INTRO = Html(
    "<p>Every call is one sample with its gRPC status code: the server's "
    "(<code>grpc-status</code>), or, when no status came, the one a gRPC client library "
    "gives (DEADLINE_EXCEEDED for a deadline, UNAVAILABLE for a connection that failed, "
    "INTERNAL for a reply that broke the protocol). Only OK is a success. A call that "
    "found its connection closed waited for a new one: its connect time (TCP, and TLS "
    "for https) is part of its latency, shown apart here.</p>"
)


def _codes(p: analysis.PointGrpc) -> str:
    return calls.counts(p.codes, "-")


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    pts = analysis.points(rr.run)
    if not pts:
        return [Section("grpc", TITLE, [INTRO, note("No samples.")])]
    labels = calls.labels(rr)
    rows = [
        [labels.get(p.point, str(p.point)), p.calls, _codes(p), calls.reasons(p)]
        + calls.connect_cells(p)
        for p in pts
    ]
    cols = [
        Col("point", left=True),
        Col("calls", tip="after warm-up"),
        Col("status codes", left=True, tip="calls by gRPC status code; OK is a success"),
        Col("failures", left=True, tip="calls that were not OK, by reason"),
        *calls.connect_cols("calls"),
    ]
    failed = calls.most_failed(
        pts,
        labels,
        "Failed calls.",
        "calls that were not OK",
        lambda p: f"{_codes(p)} ({calls.reasons(p)})",
    )
    found = [failed] if failed else []
    return calls.section("grpc", TITLE, INTRO, found, "Every call was OK.", cols, rows)
