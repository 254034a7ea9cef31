"""A WSGI app for gunicorn whose every request takes a fixed time: `GET /` sleeps
KNEE_SLEEP_MS (default 20) and answers 200 with a Server-Timing `app` entry. Under
gunicorn's sync workers (one request per worker at a time), W workers serve at most
W / sleep requests per second: a service of known capacity, run by a server people run
(tests/test_find.py, bench/find_accuracy.py).

KNEE_SLEEP_LOCK=1 sleeps under one lock of the process instead, and says nothing of its
time: a server whose threads queue for a lock while its CPU idles, a limit no resource knee
samples shows (tests/test_resources.py, bench/bottleneck.py)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

SLEEP_S = float(os.environ.get("KNEE_SLEEP_MS", "20")) / 1e3
LOCKED = os.environ.get("KNEE_SLEEP_LOCK") == "1"
LOCK = threading.Lock()
BODY = b"slept\n"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") != "/":
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return [b""]
    t0 = time.perf_counter()
    if LOCKED:
        with LOCK:
            time.sleep(SLEEP_S)
    else:
        time.sleep(SLEEP_S)
    took_ms = (time.perf_counter() - t0) * 1e3
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]
    if not LOCKED:
        headers.append(("Server-Timing", f"app;dur={took_ms:.3f}"))
    start_response("200 OK", headers)
    return [BODY]
