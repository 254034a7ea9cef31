"""What the analyses of a service knee did not write (http, grpc) read alike from a point's
samples: the post-warm-up requests, their failure reasons by name, and the connect time of
those sent on a connection made for them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from knee.results import Run
from knee.stats.quantiles import order_statistic


def post_warmup(run: Run, point: int, columns: list[str]) -> pd.DataFrame:
    """The point's samples after its warm-up (`columns`, "warmup" among them)."""
    df = run.point_samples(point, columns)
    if "warmup" in df:
        df = df[~df["warmup"].to_numpy(dtype=bool)]
    return df


def failure_reasons(fail_reason: np.ndarray, names: dict[int, str]) -> dict[str, int]:
    """Requests per failure reason (`fail_reason` codes, 0: none) named as `names` says."""
    reasons, counts = np.unique(fail_reason[fail_reason > 0], return_counts=True)
    return {names.get(int(r), f"code {r}"): int(n) for r, n in zip(reasons, counts, strict=True)}


@dataclass(frozen=True)
class Connects:
    sent: int  # requests written to a connection
    connected: int  # of those, sent on a connection made for them (the others: one open)
    p50_ns: float | None  # their connect time (TCP and TLS)
    max_ns: float | None


def connects(df: pd.DataFrame) -> Connects:
    """The connect times (`queue_ns`) of the sent requests that waited for one. A connect
    that failed is a drop with its reason (never sent): counted there, not here."""
    sent = df["sent_ns"].to_numpy(dtype=np.int64) >= 0
    connect = df["queue_ns"].to_numpy(dtype=np.float64)
    connect = connect[sent & (connect > 0)]
    return Connects(
        sent=int(sent.sum()),
        connected=len(connect),
        p50_ns=float(order_statistic(connect, 0.5)) if len(connect) else None,
        max_ns=float(connect.max()) if len(connect) else None,
    )
