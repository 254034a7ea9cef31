"""A WSGI app for gunicorn whose every request computes for a fixed CPU time: `GET /` spins
until KNEE_SPIN_MS (default 10) of its thread's CPU time has passed, and answers 200 with a
Server-Timing `app` entry. Under sync workers a CPU-bound service: W workers on C cores
serve at most min(W, C) / spin requests per second (tests/test_target_cores.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

SPIN_S = float(os.environ.get("KNEE_SPIN_MS", "10")) / 1e3
BODY = b"spun\n"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") != "/":
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return [b""]
    t0 = time.perf_counter()
    end = time.thread_time() + SPIN_S
    while time.thread_time() < end:  # CPU time: a worker that waits for a core spins longer
        pass
    took_ms = (time.perf_counter() - t0) * 1e3
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]
    headers.append(("Server-Timing", f"app;dur={took_ms:.3f}"))
    start_response("200 OK", headers)
    return [BODY]
