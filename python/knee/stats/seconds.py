"""Time in whole seconds: the one per-second binning of knee's per-second figures and
tables (the report's time series, slices' throughput per second), counts per second, and
order statistics per second built a piece of samples at a time.

A time stamp t (ns) falls in second floor((t - zero) / 1 s): integer floor division, so
a time before `zero` falls in a negative second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from knee.stats.quantiles import order_statistic, order_statistics_by_bin

#: Width of a bin, in seconds and in ns.
BIN_S = 1.0
BIN_NS = 1_000_000_000

#: Reads the (time stamps in ns, values) again of the seconds [first, last], in pieces.
Reread = Callable[[int, int], Iterable[tuple[np.ndarray, np.ndarray]]]


def second_of(t_ns: np.ndarray | pd.Series, zero_ns: int = 0) -> np.ndarray:
    """The second each time stamp falls in, counted from `zero_ns` (int64)."""
    return (np.asarray(t_ns, dtype=np.int64) - zero_ns) // BIN_NS


def counts(seconds: np.ndarray) -> pd.Series:
    """How many of `seconds` fall in each second present (one bincount, no per-row loop)."""
    if not len(seconds):
        return pd.Series([], dtype=np.int64)
    lo = int(seconds.min())
    per = np.bincount(seconds - lo)
    present = np.flatnonzero(per)
    return pd.Series(per[present], index=present + lo)


def plus(total: pd.Series | None, more: pd.Series) -> pd.Series:
    """Counts per second added up over pieces (`total` None before the first)."""
    return more if total is None else total.add(more, fill_value=0).astype(np.int64)


class OrderStatsBySecond:
    """Order statistics `qs` of each second's values over a whole run, built one piece of
    samples at a time (pieces of points, in the file's order). A piece's first and last
    seconds can also hold values of the pieces before and after it, so theirs wait until a
    piece that starts later shows they are complete; a second met again after that (samples
    out of time order: several recorders in a point, replies slower than a piece lasts) is
    recomputed at the end from what `finish` reads again. Memory: a piece, and two seconds'
    values."""

    def __init__(self, qs: Sequence[float]) -> None:
        self.qs = tuple(qs)
        self.settled: dict[int, np.ndarray] = {}  # second -> the qs order statistics
        self.pending: dict[int, list[np.ndarray]] = {}  # edge seconds: values so far
        self.revisit: set[int] = set()

    def add(self, seconds: np.ndarray, values: np.ndarray) -> None:
        if not len(seconds):
            return
        lo, hi = int(seconds.min()), int(seconds.max())
        for b in [b for b in self.pending if b < lo]:
            self._settle(b)
        for b in {lo, hi}:
            if b in self.settled:
                self.revisit.add(b)
            self.pending.setdefault(b, []).append(values[seconds == b])
        every = order_statistics_by_bin(seconds, values, self.qs)  # edges left out below
        for b, row in zip(every.index.tolist(), every.to_numpy(), strict=True):
            if b in (lo, hi):
                continue
            if b in self.settled or b in self.pending:
                self.revisit.add(b)
            self.settled[b] = row

    def _settle(self, b: int) -> None:
        self.settled[b] = order_statistic(np.concatenate(self.pending.pop(b)), list(self.qs))

    def finish(self, reread: Reread, per_second: pd.Series, limit_rows: int) -> pd.DataFrame:
        """One row per second with values (in order), one column per q, in the values'
        unit. The seconds met out of order are read again by `reread`, a span of at most
        `limit_rows` values at a time (`per_second` counts them)."""
        for b in list(self.pending):
            self._settle(b)
        for first, last in windows(sorted(self.revisit), per_second, limit_rows):
            seconds, values = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
            for t_ns, v in reread(first, last):
                in_s = second_of(t_ns)
                keep = np.isin(in_s, list(self.revisit))
                seconds.append(in_s[keep])
                values.append(v[keep])
            again = order_statistics_by_bin(
                np.concatenate(seconds), np.concatenate(values), self.qs
            )
            self.settled.update(zip(again.index.tolist(), again.to_numpy(), strict=True))
        keys = sorted(self.settled)
        rows = np.array([self.settled[b] for b in keys]).reshape(len(keys), len(self.qs))
        return pd.DataFrame(rows, index=pd.Index(keys, dtype=np.int64), columns=list(self.qs))


def windows(seconds: list[int], per_second: pd.Series, limit: int) -> list[tuple[int, int]]:
    """`seconds` (sorted) as spans [first, last] each holding at most `limit` values by
    `per_second` (values per second), a second with more alone: a loop over seconds, not
    rows."""
    total = per_second.sort_index().cumsum()

    def upto(b: int) -> int:  # values in the seconds up to b
        i = int(total.index.searchsorted(b, side="right"))
        return int(total.iloc[i - 1]) if i else 0

    out: list[tuple[int, int]] = []
    for b in seconds:
        if out and upto(b) - upto(out[-1][0] - 1) <= limit:
            out[-1] = (out[-1][0], b)
        else:
            out.append((b, b))
    return out
