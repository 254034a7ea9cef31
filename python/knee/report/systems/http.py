"""The http system's section: per point, the HTTP status codes of the responses, why the
other requests failed, the server/network split from Server-Timing, or that it was
unavailable (no response carried the entries: the split is then unknown, not zero), and
the requests that waited for a connection to be made, with their connect time; the protocol
spoken, and over HTTP/2 the streams in use against the server's limit, the requests held for
a free stream, and the server's GOAWAYs and resets (docs/http2.md).

Every number comes from `knee.analysis.http`.
"""

from __future__ import annotations

from typing import Literal

from knee.analysis import http as analysis
from knee.models.types import SeriesModels
from knee.report import calls, fmt
from knee.report.data import ReportRun
from knee.report.html import Section
from knee.report.kit import Col, Finding, Html, note
from knee.stats.summary import HttpDone

TITLE = "HTTP: statuses, failures, connects and the Server-Timing split"
#: What the section's table counts, said before it.
INTRO = Html(
    "<p>Every request to the HTTP service is one sample: its status code, or why there "
    "was none (a malformed response, a lying Content-Length, a connection closed "
    "mid-response, a timeout; the connection is then made again). A request that found "
    "its connection closed (the server closes after each response, or closed it idle) "
    "waited for a new one: its connect time (TCP, and TLS for https) is part of its "
    "latency, shown apart here. Server time comes "
    "from the responses' <code>Server-Timing</code> header (the entries "
    "<code>driver.server_timing</code> names); where no response carried them, the "
    "split is unavailable, and the standard sections' server column reads 0 for it.</p>"
)
#: The HTTP/2 events counted per point: (key in its `http`, the table's name).
H2_EVENTS: tuple[tuple[Literal["goaways", "resets_received", "refused_resent"], str], ...] = (
    ("goaways", "GOAWAY"),
    ("resets_received", "RST"),
    ("refused_resent", "resent"),
)


def _protocol(http: HttpDone | None) -> str:
    return http.get("protocol", "-") if http is not None else "-"


def _streams(http: HttpDone | None) -> str:
    """The most streams in use at once of the limit (connections x the server's
    SETTINGS_MAX_CONCURRENT_STREAMS, or the client's cap): HTTP/2 only."""
    if http is None or http.get("protocol") != "h2":
        return "-"
    limit = http.get("streams_limit_total")
    return f"{http.get('max_streams_in_use', 0)} of {limit if limit is not None else 'no limit'}"


def _held(p: analysis.PointHttp) -> str:
    if p.held is None:
        return "-"
    if not p.held:
        return "0"
    return f"{p.held} (p99 {fmt.ms(p.held_p99_ns)} ms)"


def _h2_events(http: HttpDone | None) -> str:
    if http is None or http.get("protocol") != "h2":
        return "-"
    return ", ".join(f"{name} {http.get(k) or 0}" for k, name in H2_EVENTS)


def _split(p: analysis.PointHttp) -> str:
    if p.with_split == 0:
        return "unavailable"
    return fmt.pct(p.split_share)


def sections(rr: ReportRun, models: list[SeriesModels]) -> list[Section]:
    pts = analysis.points(rr.run)
    if not pts:
        return [Section("http", TITLE, [INTRO, note("No samples.")])]
    labels = calls.labels(rr)
    #: A point's `http` (None: no generator's done line was kept).
    done: dict[int, HttpDone | None] = {p["point"]: p.get("http") for p in rr.points}
    rows = [
        [
            labels.get(p.point, str(p.point)),
            _protocol(done.get(p.point)),
            p.requests,
            calls.counts(p.codes, "-"),
            calls.reasons(p),
            _split(p),
            fmt.ms(p.server_mean_ns) if p.with_split else "unavailable",
            fmt.ms(p.detail_mean_ns),
            *calls.connect_cells(p),
            _held(p),
            _streams(done.get(p.point)),
            _h2_events(done.get(p.point)),
        ]
        for p in pts
    ]
    cols = [
        Col("point", left=True),
        Col("protocol", left=True, tip="what the generator spoke: http/1.1 or h2"),
        Col("requests", tip="after warm-up"),
        Col("HTTP statuses", left=True, tip="responses by status code; 2xx are ok"),
        Col("failures", left=True, tip="requests without a usable response, by reason"),
        Col("split", tip="share of responses with the Server-Timing server entries"),
        Col("server (ms)", tip="mean server time over the responses with the split"),
        Col("detail (ms)", tip="mean of driver.server_timing_detail's entry"),
        *calls.connect_cols(
            "requests", "a full accept queue shows here: the kernel retries a SYN after 1 s"
        ),
        Col(
            "held",
            tip="requests that waited for a free stream (HTTP/2) or connection (HTTP/1.1), "
            "and the p99 of that wait: part of their latency",
        ),
        Col(
            "streams",
            tip="HTTP/2: the most streams in use at once, of connections x the server's "
            "SETTINGS_MAX_CONCURRENT_STREAMS (or the client's max_streams)",
        ),
        Col("GOAWAY, RST", tip="HTTP/2: GOAWAYs and RST_STREAMs received, refused streams resent"),
    ]
    found = []
    without = [p for p in pts if p.answered and p.with_split == 0]
    if without:
        found.append(
            Finding(
                "Split unavailable.",
                Html(
                    f"{len(without)} of {len(pts)} points had no response carrying the "
                    "Server-Timing entries: their server and network times are unknown "
                    "(not zero)."
                ),
            )
        )
    failed = calls.most_failed(
        pts, labels, "Failed requests.", "requests without a usable response", calls.reasons
    )
    if failed:
        found.append(failed)
    all_good = "Every request got a response, and every response carried the split."
    return calls.section("http", TITLE, INTRO, found, all_good, cols, rows)
