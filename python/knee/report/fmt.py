"""Number formatting for the report's tables and text."""

from __future__ import annotations

from typing import Any


def ms(ns: float | None, digits: int = 3) -> str:
    """Nanoseconds as milliseconds with a fixed number of significant digits."""
    if ns is None:
        return "-"
    value = ns / 1e6
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"


def num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"


def pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def ms_interval(ci: Any) -> str:
    """`[lo, hi]` in ns as "lo-hi ms"; "-" when absent or not computable."""
    if not isinstance(ci, list | tuple) or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return ""
    return f"[{ms(ci[0])}, {ms(ci[1])}]"


def interval(ci: Any, digits: int = 3) -> str:
    if not isinstance(ci, list | tuple) or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return ""
    return f"[{num(ci[0], digits)}, {num(ci[1], digits)}]"


def bytes_rate(per_s: float | None) -> str:
    if per_s is None:
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {unit}"
    return f"{per_s:.3g} B/s"
