"""A WSGI app for gunicorn whose every request computes for a fixed CPU time: `GET /` spins
until KNEE_SPIN_MS (default 10) of its thread's CPU time has passed, and answers 200 with a
Server-Timing `app` entry. Under sync workers a CPU-bound service: W workers on C cores
serve at most min(W, C) / spin requests per second (tests/test_target_cores.py)."""

from __future__ import annotations

import os
import time

from timed_app import timed_app

SPIN_S = float(os.environ.get("KNEE_SPIN_MS", "10")) / 1e3


def _spin() -> None:
    end = time.thread_time() + SPIN_S
    while time.thread_time() < end:  # CPU time: a worker that waits for a core spins longer
        pass


app = timed_app(b"spun\n", _spin)
