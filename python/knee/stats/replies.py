"""What the replies of a point said, beside their statuses: the HTTP status codes of the
requests after warm-up (`http_statuses` in summary.json's point), and, when no request
ended OK, one line naming what they got instead (docs/find.md, "Every request failed")."""

from __future__ import annotations

from http import HTTPStatus

import numpy as np
import pandas as pd

from knee.stats.summary import PointStats

#: The HTTP code of a request that got no reply (a timeout, a drop, a refused connection).
NO_REPLY = 0


def http_status_counts(frame: pd.DataFrame) -> dict[str, int] | None:
    """Post-warm-up requests by HTTP status code ("0": no reply); None for a system whose
    samples carry no HTTP status."""
    if "http_status" not in frame.columns:
        return None
    codes = frame.loc[~frame["warmup"].to_numpy(), "http_status"].to_numpy()
    values, counts = np.unique(codes, return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts, strict=True)}


def _phrase(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"HTTP {code}"


def every_request_failed(stats: PointStats) -> str | None:
    """When the point had requests after warm-up and none ended OK: what most of them got,
    with the count ("403 Forbidden (100 of 100)", "timeout (40 of 40)"); else None."""
    count = int(stats.get("count") or 0)
    statuses = stats.get("statuses") or {}
    if not count or int(statuses.get("ok") or 0):
        return None
    codes = {int(k): v for k, v in (stats.get("http_statuses") or {}).items() if int(k)}
    if codes:
        code, n = max(codes.items(), key=lambda kv: kv[1])
        return f"{_phrase(code)} ({n} of {count})"
    name, n = max(((k, int(v)) for k, v in statuses.items() if k != "ok"), key=lambda kv: kv[1])
    return f"{name} ({n} of {count})"
