"""The grpc system's section: per point, the calls by gRPC status code (by name), why the
failed ones failed (the server's status, a deadline, a connection, a reply that broke the
protocol), and the calls that waited for a connection to be made.

Every number comes from `knee.analysis.grpc`.
"""

from __future__ import annotations

from typing import Any

from knee.analysis import grpc as analysis
from knee.report import fmt
from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.kit import Col, Finding, Html, esc, findings, note, table
from knee.report.types import SeriesModels

TITLE = "gRPC: status codes, failures and connects"


def _codes(p: analysis.PointGrpc) -> str:
    return ", ".join(f"{name}: {n}" for name, n in sorted(p.codes.items())) or "-"


def _reasons(p: analysis.PointGrpc) -> str:
    return ", ".join(f"{name}: {n}" for name, n in sorted(p.reasons.items())) or "none"


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    pts = analysis.points(rr.run)
    intro = Html(
        "<p>Every call is one sample with its gRPC status code: the server's "
        "(<code>grpc-status</code>), or, when no status came, the one a gRPC client library "
        "gives (DEADLINE_EXCEEDED for a deadline, UNAVAILABLE for a connection that failed, "
        "INTERNAL for a reply that broke the protocol). Only OK is a success. A call that "
        "found its connection closed waited for a new one: its connect time (TCP, and TLS "
        "for https) is part of its latency, shown apart here.</p>"
    )
    if not pts:
        return [Section("grpc", TITLE, [intro, note("No samples.")])]
    labels = {p["point"]: str(p.get("label", p["point"])) for p in rr.points}
    rows = [
        [
            labels.get(p.point, str(p.point)),
            p.calls,
            _codes(p),
            _reasons(p),
            f"{p.connected} of {p.sent}" if p.sent else "-",
            fmt.ms(p.connect_p50_ns),
            fmt.ms(p.connect_max_ns),
        ]
        for p in pts
    ]
    cols = [
        Col("point", left=True),
        Col("calls", tip="after warm-up"),
        Col("status codes", left=True, tip="calls by gRPC status code; OK is a success"),
        Col("failures", left=True, tip="calls that were not OK, by reason"),
        Col("new connections", tip="calls sent on a connection made for them, of those sent"),
        Col("connect p50 (ms)", tip="their connect time: TCP connect, and TLS for https"),
        Col("connect max (ms)"),
    ]
    failing = [p for p in pts if p.reasons]
    found = []
    if failing:
        worst = max(failing, key=lambda p: sum(p.reasons.values()))
        found.append(
            Finding(
                "Failed calls.",
                Html(
                    f"{len(failing)} points had calls that were not OK; most at "
                    f"{esc(labels.get(worst.point, worst.point))}: {esc(_codes(worst))} "
                    f"({esc(_reasons(worst))})."
                ),
            )
        )
    blocks: list[Any] = [
        intro,
        findings(found, "Every call was OK."),
        table(cols, rows, scroll=True),
    ]
    return [Section("grpc", TITLE, blocks)]
