"""knee's one percentile: the order statistic x_(ceil(n q)) of n values ("inverted CDF").

Every percentile knee shows, in summary.json, the report's figures and tables and the
per-system analyses, is this one: a measured value, never an interpolation between two.
The rank is computed in integer arithmetic on q in billionths, so that n * 0.99 is not
9900.000000000002; on the usual quantiles (whole thousandths: p50, p99, p99.9) it is exactly
`knee.stats.intervals.quantile_rank`, and it agrees with numpy's method="inverted_cdf"
wherever numpy's floating point does not round across an integer.

- `rank(n, q)` and `ranks(n, q)`: the 1-based rank, for one count or an array of counts;
- `order_statistic(values, q)`: the q-quantile(s) of one set of values;
- `order_statistics(grouped, qs)`: the q-quantiles of every group of a pandas
  ``SeriesGroupBy`` (one sort of all values, no loop over groups or rows);
- `order_statistics_by_bin(bins, values, qs)`: the same over integer bins such as seconds,
  selecting the ranks in each bin instead of sorting (for many values in few bins);
- `above(values, q)`, `above_by(grouped, q)`: which values rank above the q-quantile (the
  n - rank(n, q) largest; of equal values, the later rows rank higher).

Missing values (NaN) are left out, as pandas' own quantiles do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where a frame is built: reading a spec's SLO needs only ranks
    import pandas as pd

#: q is taken in units of 1e-9: exact integer ranks for any q written with 9 decimals.
_SCALE = 1_000_000_000


def _units(q: Any) -> np.ndarray:
    qa = np.asarray(q, dtype=np.float64)
    if np.any((qa < 0) | (qa > 1)) or np.any(np.isnan(qa)):
        raise ValueError(f"quantiles must lie in [0, 1], got {q!r}")
    return np.round(qa * _SCALE).astype(np.int64)


def rank(n: int, q: float) -> int:
    """1-based rank of the q-quantile of n values: ceil(n q), at least 1."""
    units = int(_units(q))
    return max(1, -(-int(n) * units // _SCALE))


def ranks(n: Any, q: Any) -> np.ndarray:
    """`rank` over arrays (n and q broadcast): int64, at least 1."""
    counts = np.asarray(n, dtype=np.int64)
    return np.maximum(1, -(-counts * _units(q) // _SCALE))


def _finite_sorted(values: Any) -> np.ndarray:
    v = np.asarray(values)
    if v.dtype.kind == "f":
        v = v[~np.isnan(v)]
    return np.sort(v)


def _finite(values: Any) -> np.ndarray:
    v = np.asarray(values)
    return v[~np.isnan(v)] if v.dtype.kind == "f" else v


def _select(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index] as if `values` were sorted: a partial sort (np.partition) that puts
    only those ranks in place, O(n) per distinct rank instead of a full sort."""
    return np.partition(values, np.unique(index))[index]


def order_statistic(values: Any, q: Any, sorted_values: np.ndarray | None = None) -> Any:
    """x_(ceil(n q)) of `values` (any order) for one q (a float) or several (an array).
    NaN when there are no values. Pass `sorted_values` (ascending, no NaN) if at hand;
    without them the ranks are selected, not sorted for."""
    scalar = np.ndim(q) == 0
    v = _finite(values) if sorted_values is None else np.asarray(sorted_values)
    if len(v) == 0:
        return float("nan") if scalar else np.full(np.shape(q), np.nan)
    index = ranks(len(v), q) - 1
    out = v[index] if sorted_values is not None else _select(v, np.atleast_1d(index))
    out = np.asarray(out, dtype=np.float64)
    return float(out.reshape(-1)[0]) if scalar else out


def above(values: Any, q: float, sorted_values: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask over `values` (in their order): the n - rank(n, q) values ranked above
    the q-quantile. Values equal to the quantile fill the remaining places from the last
    row backwards, so the count is exact whatever the ties. O(n) given `sorted_values`."""
    v = np.asarray(values)
    valid = ~np.isnan(v) if v.dtype.kind == "f" else np.ones(len(v), dtype=bool)
    s = _finite_sorted(v) if sorted_values is None else np.asarray(sorted_values)
    n = len(s)
    mask = np.zeros(len(v), dtype=bool)
    if n == 0:
        return mask
    r = rank(n, q)
    k = n - r
    if k == 0:
        return mask
    threshold = s[r - 1]
    mask = valid & (v > threshold)
    ties = np.flatnonzero(valid & (v == threshold))
    missing = k - int(mask.sum())
    if missing > 0:
        mask[ties[len(ties) - missing :]] = True
    return mask


def _sorted_groups(
    grouped: Any,
) -> tuple[pd.Index, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(group keys, rows in (group, value) order, the sorted values, each group's count and
    start in that order) of a SeriesGroupBy; rows with a missing key or value are left out."""
    codes = np.asarray(grouped.ngroup(), dtype=np.float64)
    sizes = grouped.size()
    keys = sizes[sizes > 0].index
    values = np.asarray(grouped.obj)
    valid = ~np.isnan(codes)
    if values.dtype.kind == "f":
        valid &= ~np.isnan(values)
    rows = np.flatnonzero(valid)
    c = codes[rows].astype(np.int64)
    order = rows[np.lexsort((values[rows], c))]  # stable: ties keep their row order
    counts = np.bincount(c, minlength=len(keys))
    if len(counts) != len(keys):
        raise ValueError("group codes do not match the groups (an unsupported groupby)")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    return keys, order, values[order], counts, starts


def order_statistics(grouped: Any, qs: float | Sequence[float]) -> pd.DataFrame | pd.Series:
    """The order statistic of every group of a pandas SeriesGroupBy, e.g.
    ``order_statistics(df.groupby("point")["latency_ns"], [0.5, 0.99])``: a DataFrame with
    one row per group and one column per q (a Series for a single q), float, NaN for a
    group with no values. Like ``grouped.quantile(qs).unstack()``, but the order statistic."""
    import pandas as pd

    keys, _, sorted_values, counts, starts = _sorted_groups(grouped)
    has = counts > 0
    cols = {}
    for q in np.atleast_1d(qs).tolist():  # a loop over the few quantiles
        out = np.full(len(keys), np.nan)
        out[has] = sorted_values[starts[has] + ranks(counts[has], q) - 1]
        cols[q] = out
    frame = pd.DataFrame(cols, index=keys)
    return frame[qs] if np.ndim(qs) == 0 else frame


def order_statistics_by_bin(
    bins: np.ndarray, values: np.ndarray, qs: Sequence[float]
) -> pd.DataFrame:
    """`order_statistics` of `values` grouped by the integers `bins` (e.g. the second each
    one happened in): one row per bin present, in bin order, one column per q. Rows are
    grouped by a stable argsort of the bins, cheap when they come nearly in order (time
    stamps do), then the ranks are selected within each bin: a loop over bins, not rows,
    with no sort of the values."""
    import pandas as pd

    v = np.asarray(values)
    b = np.asarray(bins)
    if v.dtype.kind == "f":
        keep = ~np.isnan(v)
        v, b = v[keep], b[keep]
    if len(v) == 0:
        return pd.DataFrame(
            np.empty((0, len(qs))), index=pd.Index(b[:0], name="bin"), columns=list(qs)
        )
    order = np.argsort(b, kind="stable")
    b, v = b[order], v[order]
    starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    counts = np.diff(np.append(starts, len(b)))
    index = np.stack([ranks(counts, q) - 1 for q in qs], axis=1)
    out = np.empty((len(starts), len(qs)))
    for i, (start, count) in enumerate(zip(starts.tolist(), counts.tolist(), strict=True)):
        out[i] = _select(v[start : start + count], index[i])
    return pd.DataFrame(out, index=pd.Index(b[starts], name="bin"), columns=list(qs))


def above_by(grouped: Any, q: float) -> np.ndarray:
    """`above` within each group of a SeriesGroupBy: a boolean mask over the rows of
    ``grouped.obj``, True for the n - rank(n, q) largest values of each group (of equal
    values, the later rows rank higher, as in `above`)."""
    keys, order, _, counts, starts = _sorted_groups(grouped)
    mask = np.zeros(len(grouped.obj), dtype=bool)
    if len(order) == 0:
        return mask
    group = np.repeat(np.arange(len(keys)), counts)
    position = np.arange(len(order)) - starts[group]  # 0-based rank within the group
    mask[order] = position >= ranks(counts, q)[group]
    return mask
