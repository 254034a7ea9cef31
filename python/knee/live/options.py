"""`--live [ADDR]` and `--no-live`: where the page is served, and whether it is on.

It is on when asked (`--live`), or by default when stdout is a terminal and the run is
expected to last over DEFAULT_AFTER_S; `--no-live` turns it off."""

from __future__ import annotations

import argparse
from typing import Any

#: A run expected to last longer than this gets the page by default (on a terminal).
DEFAULT_AFTER_S = 60.0
DEFAULT_HOST = "127.0.0.1"
#: Seconds a point costs beyond its schedule (nodes started and stopped, statistics).
POINT_OVERHEAD_S = 2.0


class LiveArgsError(ValueError):
    """An ADDR that cannot be read (one line)."""


def add_live_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--live",
        nargs="?",
        const=f"{DEFAULT_HOST}:0",
        metavar="ADDR",
        help="serve a live page of the run and /metrics (Prometheus) at ADDR, HOST:PORT or "
        "PORT (default 127.0.0.1 and a free port; on by default on a terminal when the run "
        f"should last over {DEFAULT_AFTER_S:g} s; docs/live.md)",
    )
    p.add_argument("--no-live", action="store_true", help="no live page")


def address(text: str) -> tuple[str, int]:
    """'8080', ':8080', 'HOST:PORT', 'HOST' -> (host, port); port 0: a free one."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = ("", text) if text.strip().isdigit() else (text, "0")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
    except ValueError:
        raise LiveArgsError(f"--live: expected HOST:PORT or PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise LiveArgsError(f"--live: port {number} is not in 0..65535")
    return host, number


def wanted(args: argparse.Namespace, expected_s: float | None, tty: bool) -> tuple[str, int] | None:
    """Where to serve the page, or None for no page."""
    if getattr(args, "no_live", False):
        return None
    given = getattr(args, "live", None)
    if given is not None:
        return address(given)
    if tty and expected_s is not None and expected_s > DEFAULT_AFTER_S:
        return DEFAULT_HOST, 0
    return None


def expected_run_s(points: list[Any]) -> float | None:
    """How long a run of these points should take: each one's schedule (its duration, or
    its requests at its rate) plus POINT_OVERHEAD_S; None when a point does not say (a
    closed loop bounded by requests)."""
    total = 0.0
    for point in points:
        load = point.load
        if load.get("duration_s"):
            total += float(load["duration_s"])
        elif load.get("requests") and load.get("rate_per_s"):
            total += float(load["requests"]) / float(load["rate_per_s"])
        else:
            return None
        total += POINT_OVERHEAD_S
    return total
