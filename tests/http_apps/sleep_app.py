"""A WSGI app that sleeps (tests/test_models_servers.py): each request holds its sync
worker for SLEEP_S, so N workers serve N / SLEEP_S requests per second; the time is
reported as `Server-Timing: app;dur=<ms>`, the server's own time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

SLEEP_S = 0.020
BODY = b"slept\n"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start = time.perf_counter()
    time.sleep(SLEEP_S)
    took_ms = (time.perf_counter() - start) * 1e3
    headers = [
        ("Content-Type", "text/plain"),
        ("Content-Length", str(len(BODY))),
        ("Server-Timing", f"app;dur={took_ms:.3f}"),
    ]
    start_response("200 OK", headers)
    return [BODY]
