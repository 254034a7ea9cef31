"""What sleep_app.py and spin_app.py share: a WSGI app whose `GET /` does the app's work and
answers 200 with its body and a Server-Timing `app` entry of the work's wall time (unless
told to say nothing of it); anything else 404."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def timed_app(body: bytes, work: Callable[[], None], *, server_timing: bool = True) -> WsgiApp:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/":
            headers = [("Content-Type", "text/plain"), ("Content-Length", "0")]
            start_response("404 Not Found", headers)
            return [b""]
        t0 = time.perf_counter()
        work()
        took_ms = (time.perf_counter() - t0) * 1e3
        headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
        if server_timing:
            headers.append(("Server-Timing", f"app;dur={took_ms:.3f}"))
        start_response("200 OK", headers)
        return [body]

    return app
