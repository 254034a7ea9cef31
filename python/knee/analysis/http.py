"""The http system's numbers, from the run directory only: per point, the HTTP status codes
of the responses, why the other requests failed, whether the server/network split was
there (the Server-Timing entries named by driver.server_timing), with its means, and how
many requests had to wait for their connection to be made, and how long.

An http sample's `flags` is its HTTP status code (0: no response), `arg` its failure reason
(knee.contract.HTTP_ARGS; 0: none), `service` 1 when the response carried the split,
`queue_ns` its connect time (TCP connect and TLS handshake; 0 on a connection already open),
`held_ns` its wait for a free stream (HTTP/2) or a free connection (HTTP/1.1), from its
intended time (docs/http2.md; absent from runs written before it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knee.analysis.calls import connects, failure_reasons, post_warmup
from knee.contract import HTTP_ARGS
from knee.results import Run, node_lines
from knee.stats.quantiles import order_statistic
from knee.stats.summary import HttpDone

COLUMNS = [
    "status",
    "http_status",
    "fail_reason",
    "service",
    "server_ns",
    "detail_ns",
    "queue_ns",
    "held_ns",
    "sent_ns",
    "warmup",
]


@dataclass(frozen=True)
class PointHttp:
    point: int
    requests: int  # after warm-up
    codes: dict[int, int]  # HTTP status -> responses
    reasons: dict[str, int]  # failure reason -> requests
    answered: int  # requests with a response (any status)
    with_split: int  # responses that carried the split
    server_mean_ns: float | None  # over the responses with the split
    detail_mean_ns: float | None
    sent: int  # requests written to a connection
    connected: int  # of those, sent on a connection made for them (the others: one open)
    connect_p50_ns: float | None  # their connect time (TCP and TLS)
    connect_max_ns: float | None
    held: int | None  # requests that waited for a stream or connection (None: not recorded)
    held_p99_ns: float | None  # the 99th percentile of that wait, over those requests

    @property
    def split_share(self) -> float:
        return self.with_split / self.answered if self.answered else 0.0


def point_http(run: Run, point: int) -> PointHttp:
    df = post_warmup(run, point, COLUMNS)
    http_status = df["http_status"].to_numpy(dtype=np.int64)
    fail_reason = df["fail_reason"].to_numpy(dtype=np.int64)
    split = df["service"].to_numpy(dtype=np.int64) == 1
    answered = http_status > 0
    codes, code_counts = np.unique(http_status[answered], return_counts=True)
    server = df["server_ns"].to_numpy(dtype=np.float64)[split]
    detail = df["detail_ns"].to_numpy(dtype=np.float64)[split]
    c = connects(df)
    waits = df["held_ns"].to_numpy(dtype=np.float64) if "held_ns" in df else None
    held = waits[waits > 0] if waits is not None else None
    return PointHttp(
        point=point,
        requests=len(df),
        codes={int(c): int(n) for c, n in zip(codes, code_counts, strict=True)},
        reasons=failure_reasons(fail_reason, HTTP_ARGS),
        answered=int(answered.sum()),
        with_split=int(split.sum()),
        server_mean_ns=float(server.mean()) if len(server) else None,
        detail_mean_ns=float(detail.mean()) if len(detail) and detail.any() else None,
        sent=c.sent,
        connected=c.connected,
        connect_p50_ns=c.p50_ns,
        connect_max_ns=c.max_ns,
        held=len(held) if held is not None else None,
        held_p99_ns=float(order_statistic(held, 0.99)) if held is not None and len(held) else None,
    )


def points(run: Run) -> list[PointHttp]:
    return [point_http(run, p) for p in run.sample_points()]


def done_fields(run_dir: Path, point: int, nodes: list[str]) -> HttpDone | None:
    """The http generators' `done` fields of one point, as summary.json keeps them (the
    point's `http`): `protocol` ("h2", "http/1.1", or "mixed"), `server_max_streams` the
    smallest the server sent (None: none), `max_streams_in_use` the largest peak of one
    generator, and the http role's own counters (docs/http2.md) summed. None when no
    generator's done line was kept."""
    done = [e for n in nodes for e in node_lines(run_dir, n, point) if e.get("event") == "done"]
    if not done:
        return None
    protocols = {str(d.get("protocol", "http/1.1")) for d in done}
    limits = [int(d["server_max_streams"]) for d in done if d.get("server_max_streams")]

    def total(key: str) -> int | None:
        known = [int(v) for d in done if (v := d.get(key)) is not None]
        return sum(known) if known else None

    return {
        "protocol": protocols.pop() if len(protocols) == 1 else "mixed",
        "server_max_streams": min(limits) if limits else None,
        "max_streams_in_use": max(int(d.get("max_streams_in_use") or 0) for d in done),
        "connections_opened": total("connections_opened"),
        "connect_failures": total("connect_failures"),
        "streams_limit_total": total("streams_limit_total"),
        "goaways": total("goaways"),
        "resets_received": total("resets_received"),
        "refused_resent": total("refused_resent"),
    }
