"""The grpc system's numbers, from the run directory only: per point, the calls by gRPC
status code (by name: OK, UNAVAILABLE, DEADLINE_EXCEEDED, ...), why the failed ones failed,
and how many calls waited for their connection to be made, and how long.

A grpc sample's `flags` is its status code (`grpc_status`: the server's, else the one a gRPC
client library gives, e.g. DEADLINE_EXCEEDED for a timeout), `arg` its failure reason
(`fail_reason`, knee.contract.GRPC_ARGS; 0: none), `queue_ns` its connect time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from knee.analysis.calls import connects, failure_reasons, post_warmup
from knee.contract import GRPC_ARGS, GRPC_CODES
from knee.results import Run

COLUMNS = ["status", "grpc_status", "fail_reason", "queue_ns", "sent_ns", "warmup"]


def code_name(code: int) -> str:
    """A gRPC status code's name (a code outside gRPC's list: "code N")."""
    return GRPC_CODES.get(code, f"code {code}")


@dataclass(frozen=True)
class PointGrpc:
    point: int
    calls: int  # after warm-up
    codes: dict[str, int]  # status code name -> calls
    reasons: dict[str, int]  # failure reason -> calls
    sent: int  # calls sent on a connection
    connected: int  # of those, sent on a connection made for them
    connect_p50_ns: float | None
    connect_max_ns: float | None

    @property
    def ok(self) -> int:
        return self.codes.get("OK", 0)


def point_grpc(run: Run, point: int) -> PointGrpc:
    df = post_warmup(run, point, COLUMNS)
    code = df["grpc_status"].to_numpy(dtype=np.int64)
    codes, code_counts = np.unique(code, return_counts=True)
    c = connects(df)
    return PointGrpc(
        point=point,
        calls=len(df),
        codes={code_name(int(c)): int(n) for c, n in zip(codes, code_counts, strict=True)},
        reasons=failure_reasons(df["fail_reason"].to_numpy(dtype=np.int64), GRPC_ARGS),
        sent=c.sent,
        connected=c.connected,
        connect_p50_ns=c.p50_ns,
        connect_max_ns=c.max_ns,
    )


def points(run: Run) -> list[PointGrpc]:
    return [point_grpc(run, p) for p in run.sample_points()]
