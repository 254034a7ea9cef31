"""Number formatting for the report's tables and text."""

from __future__ import annotations

from typing import Any

from knee.report.kit.axes import NS_PER_UNIT, time_unit


def _missing(value: float | None) -> bool:
    """None, or NaN (what pandas leaves for an empty group)."""
    return value is None or value != value


def num(value: float | None, digits: int = 3) -> str:
    """`digits` significant digits; large values in full ("-" for none or NaN)."""
    if value is None or _missing(value):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"


def ms(ns: float | None, digits: int = 3) -> str:
    """Nanoseconds as milliseconds."""
    return num(None if ns is None else ns / 1e6, digits)


def duration(ns: float | None, digits: int = 3) -> str:
    """Nanoseconds in the unit in which they read 1 to 999: "2.34 ms", "89.6 µs"."""
    if ns is None or _missing(ns):
        return "-"
    unit = time_unit([ns], "ns")
    return f"{num(ns / NS_PER_UNIT[unit], digits)} {unit}"


def pct(fraction: float | None) -> str:
    return "-" if fraction is None or _missing(fraction) else f"{100 * fraction:.1f}%"


def _pair(ci: Any) -> bool:
    return isinstance(ci, list | tuple) and len(ci) == 2 and None not in ci


def interval(ci: Any) -> str:
    """`[lo, hi]` as text; "" when absent or not computable (null in summary.json)."""
    return f"[{num(ci[0])}, {num(ci[1])}]" if _pair(ci) else ""


def ms_interval(ci: Any) -> str:
    """An interval in ns, shown in ms."""
    return f"[{ms(ci[0])}, {ms(ci[1])}]" if _pair(ci) else ""


def bytes_rate(per_s: float | None) -> str:
    if per_s is None:
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {unit}"
    return f"{per_s:.3g} B/s"
