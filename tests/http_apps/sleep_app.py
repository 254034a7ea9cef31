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

from timed_app import timed_app

SLEEP_S = float(os.environ.get("KNEE_SLEEP_MS", "20")) / 1e3
LOCKED = os.environ.get("KNEE_SLEEP_LOCK") == "1"
LOCK = threading.Lock()


def _sleep() -> None:
    if LOCKED:
        with LOCK:
            time.sleep(SLEEP_S)
    else:
        time.sleep(SLEEP_S)


app = timed_app(b"slept\n", _sleep, server_timing=not LOCKED)
