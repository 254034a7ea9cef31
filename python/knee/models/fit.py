"""What a model needs from the measurements: each point's settings (as the run directory
recorded them), whether it is stable, and the service time and the
delay outside the server pooled over the stable points of a group, with a result cache's
steady-state hit ratio when the server has one (docs/statistics.md, "Models")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats as sps

from knee.config_values import TomlTable, TomlValue
from knee.models.types import CacheFitJson, CachePointJson, FitJson

#: The setting that is the number of servers (matrix: the worker pool).
SERVERS_KEY = "server.threads"
#: The setting that sizes a result cache (matrix); a point's "cache" figures are used only
#: where it is above 0 (other systems use reply flag bit 0 for other things).
CACHE_KEY = "server.cache"


#: A point's value of "section.name" (the point as summary.json has it).
Settings = Callable[[Mapping[str, Any], str], Any]


def settings_of(source: TomlTable | Settings) -> Settings:
    """How the models look up a point's settings: a function as given (the report passes
    what the run directory recorded for each point, `knee.run_params`), or, for a caller
    that holds only a resolved spec (a notebook, a test), the point's swept value, else its
    series' override, else the spec's top level (the resolved spec has every default)."""
    if callable(source):
        return source
    spec = source

    def from_spec(point: Mapping[str, Any], dotted: str) -> Any:
        swept = point.get("swept") or {}
        if dotted in swept:
            return swept[dotted]
        section, _, key = dotted.partition(".")
        series = _table(_table(spec.get("series")).get(point.get("series", "")))
        overrides = _table(series.get(section))
        if key in overrides:
            return overrides[key]
        return _table(spec.get(section)).get(key)

    return from_spec


def _table(value: TomlValue | None) -> TomlTable:
    """A spec's table; an empty one for a table it does not have."""
    return value if isinstance(value, dict) else {}


def setting(point: Mapping[str, Any], spec: Settings, dotted: str) -> Any:
    return spec(point, dotted)


def servers(point: Mapping[str, Any], spec: Settings) -> int:
    value = setting(point, spec, SERVERS_KEY)
    return int(value) if value else 1


def declared_servers(point: Mapping[str, Any], spec: Settings) -> int | None:
    """The number of servers the system declares (`server.threads`); None for a system
    without the setting (an http service: its concurrency is estimated from the data)."""
    value = setting(point, spec, SERVERS_KEY)
    return int(value) if value else None


def cache_setting(point: Mapping[str, Any], spec: Settings) -> int:
    """The entries of the point's result cache; 0 without one."""
    value = setting(point, spec, CACHE_KEY)
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def ok_latency(point: Mapping[str, Any]) -> dict[str, Any]:
    """The distribution of OK latencies: `latency_ok_ns`, or `latency_ns` in runs written
    before the headline distribution counted failures."""
    return point.get("latency_ok_ns") or point.get("latency_ns") or {}


def unstable(point: Mapping[str, Any]) -> bool:
    """Whether the point's stability verdict says it was not keeping up (over capacity):
    such a point is fitted by no model. Points without a verdict count as stable."""
    return (point.get("stability") or {}).get("verdict") == "unstable"


@dataclass(frozen=True)
class Pooled:
    """The count, mean and (n - 1) variance of the union of several samples."""

    n: int
    mean: float
    var: float


def pool(parts: Iterable[tuple[int, float, float | None]]) -> Pooled | None:
    """Pools samples given as (n, mean, std) each: the mean weighted by count, and the
    variance of all the values together, within-sample plus between-sample sums of squares:
    (sum (n_i - 1) s_i^2 + sum n_i (m_i - m)^2) / (N - 1). A std of None (n = 1) counts as
    0. None when no sample has a value."""
    rows = [(int(n), float(m), float(s or 0.0)) for n, m, s in parts if n and n > 0]
    if not rows:
        return None
    total = sum(n for n, _, _ in rows)
    mean = sum(n * m for n, m, _ in rows) / total
    squares = sum((n - 1) * s * s + n * (m - mean) ** 2 for n, m, s in rows)
    return Pooled(total, mean, squares / (total - 1) if total > 1 else 0.0)


@dataclass(frozen=True)
class CachePoint:
    """One point's cache figures as the fit sees them."""

    point: int
    x: float
    hit_ratio_steady: float  # over its steady part (fit._steady_part)
    n_steady: int
    n_hits_steady: int
    hit_ratio_whole: float
    full: bool  # whether the cache had surely filled when the steady part began

    def to_json(self) -> CachePointJson:
        return {
            "point": self.point,
            "x": self.x,
            "hit_ratio_steady": self.hit_ratio_steady,
            "n_steady": self.n_steady,
            "n_hits_steady": self.n_hits_steady,
            "hit_ratio_whole": self.hit_ratio_whole,
            "full": self.full,
        }


@dataclass(frozen=True)
class CacheFit:
    """A result cache's steady state, pooled over a group's stable points.

    `hit_ratio` is the steady-state hit ratio h: hits over requests in the steady part of
    the points whose cache had filled by then (`_steady_part`; when none had, the second
    half of every point), summed over those points; `whole_hit_ratio` is the same over
    whole points, cold start included. The
    service times of hits and of misses are pooled over whole points (a hit's or a miss's
    work does not depend on how full the cache is).
    """

    hit_ratio: float
    hit_ratio_ci: tuple[float, float]
    n_steady: int
    whole_hit_ratio: float
    hit: Pooled  # service ns of hits
    miss: Pooled  # service ns of misses
    points: tuple[CachePoint, ...]

    def moments(self, hit_ratio: float) -> tuple[float, float]:
        """E[S] (s) and cs2 of the service time as a mixture: a hit with probability h,
        else a miss, each with its pooled mean and variance:
        E[S] = h E[S_hit] + (1 - h) E[S_miss],
        E[S^2] = h (var_hit + E[S_hit]^2) + (1 - h) (var_miss + E[S_miss]^2)."""
        h, hit, miss = hit_ratio, self.hit, self.miss
        mean_ns = h * hit.mean + (1 - h) * miss.mean
        second = h * (hit.var + hit.mean**2) + (1 - h) * (miss.var + miss.mean**2)
        return mean_ns / 1e9, max(0.0, second - mean_ns**2) / mean_ns**2

    def to_json(self) -> CacheFitJson:
        return {
            "hit_ratio_steady": self.hit_ratio,
            "hit_ratio_steady_ci": list(self.hit_ratio_ci),
            "n_steady": self.n_steady,
            "hit_ratio_whole": self.whole_hit_ratio,
            "hit_service_mean_ns": self.hit.mean,
            "miss_service_mean_ns": self.miss.mean,
            "points": [c.to_json() for c in self.points],
        }


@dataclass(frozen=True)
class Fit:
    """The service time (mean `service_s`, squared coefficient of variation `cs2`) and the
    mean time a request spends outside the server (`delay_s`: network, middleware, client
    lateness; latency minus server residence), pooled over the stable points `points`
    (loads `xs`, `n` service samples). Models add the delay to the server's sojourn time as
    a fixed delay to predict the latency the client measures."""

    service_s: float
    cs2: float
    delay_s: float
    points: tuple[int, ...] = ()
    xs: tuple[float, ...] = ()
    n: int = 0
    cache: CacheFit | None = None
    #: The 95% interval of service_s (`pooled_mean_ci`); None when the points carry none.
    service_ci_s: tuple[float, float] | None = None

    def to_json(self) -> FitJson:
        return {
            "service_mean_ns": self.service_s * 1e9,
            "service_ci_ns": None
            if self.service_ci_s is None
            else [self.service_ci_s[0] * 1e9, self.service_ci_s[1] * 1e9],
            "service_cs2": self.cs2,
            "delay_ns": self.delay_s * 1e9,
            "points": list(self.points),
            "n": self.n,
            "cache": None if self.cache is None else self.cache.to_json(),
        }


def _dist_part(dist: dict[str, Any] | None) -> tuple[int, float, float | None] | None:
    dist = dist or {}
    n, mean = dist.get("n"), dist.get("mean")
    if not n or mean is None:
        return None
    return int(n), float(mean), dist.get("std")


def _service_part(point: Mapping[str, Any]) -> tuple[int, float, float | None] | None:
    part = _dist_part(point.get("service_ns"))
    return part if part is not None and part[1] > 0 else None


def pooled_mean_ci(dists: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """The 95% interval of the count-weighted mean of several points' means, from each
    mean's own interval (batch means): each side's half-width combined as independent,
    sqrt(sum (w_i h_i)^2) with w_i = n_i / N. None when a point has no interval."""
    got = [(d.get("n") or 0, d.get("mean"), (d.get("ci") or {}).get("mean")) for d in dists]
    rows: list[tuple[int, float, Sequence[float]]] = []
    for n, m, ci in got:  # a loop over the few points
        if not n or m is None:
            continue
        if ci is None:
            return None
        rows.append((int(n), float(m), ci))
    if not rows:
        return None
    total = sum(n for n, _, _ in rows)
    mean = sum(n * m for n, m, _ in rows) / total
    below = sum((n / total * (m - ci[0])) ** 2 for n, m, ci in rows) ** 0.5
    above = sum((n / total * (ci[1] - m)) ** 2 for n, m, ci in rows) ** 0.5
    return mean - below, mean + above


def fit_service(
    points: Sequence[Mapping[str, Any]], xs: Sequence[float], cache_entries: int = 0
) -> Fit | None:
    """The fit from the given (stable) points, their loads `xs` alongside: `service_ns`
    pooled by count (mean and variance, between-point differences included), the delay
    (OK latency mean minus server mean) weighted by each point's OK count; for a server
    with a cache of `cache_entries` > 0, the hit/miss mixture at the steady-state hit ratio
    where the points carry "cache" figures. None when no point has service times."""
    used = [(p, x) for p, x in zip(points, xs, strict=True) if _service_part(p) is not None]
    service = pool(part for p, _ in used if (part := _service_part(p)) is not None)
    if service is None or service.mean <= 0:
        return None
    delays = []
    for p, _ in used:
        latency, server = _dist_part(ok_latency(p)), _dist_part(p.get("server_ns"))
        if latency is not None and server is not None:
            delays.append((latency[0], latency[1] - server[1], 0.0))
    delay = pool(delays)
    mean_s, cs2 = service.mean / 1e9, service.var / service.mean**2
    ci_ns = pooled_mean_ci([p["service_ns"] for p, _ in used])
    ci_s = None if ci_ns is None else (ci_ns[0] / 1e9, ci_ns[1] / 1e9)
    cache = _cache_fit(used, cache_entries) if cache_entries > 0 else None
    if cache is not None:
        mean_s, cs2 = cache.moments(cache.hit_ratio)
        # The mixture's mean moves with h: its interval from h's ends (the dominant term).
        ends = sorted(cache.moments(h)[0] for h in cache.hit_ratio_ci)
        ci_s = (ends[0], ends[1])
    return Fit(
        service_s=mean_s,
        cs2=cs2,
        delay_s=max(0.0, delay.mean / 1e9) if delay is not None else 0.0,
        points=tuple(int(p["point"]) for p, _ in used),
        xs=tuple(float(x) for _, x in used),
        n=service.n,
        cache=cache,
        service_ci_s=ci_s,
    )


def _cache_parts(
    used: list[tuple[Mapping[str, Any], float]],
) -> list[tuple[Mapping[str, Any], float, dict[str, Any]]]:
    """Each point's cache figures; a point whose "cache" is null had no hit at all (every
    request a miss: its service times are the misses'). Points without the key (runs
    written before it existed) are left out."""
    out = []
    for p, x in used:
        if "cache" not in p:
            continue
        c = p["cache"]
        if c is None:
            n, mean, std = _service_part(p) or (0, 0.0, 0.0)
            c = {
                "n_hits": 0,
                "n_misses": n,
                "n_steady": n - n // 2,
                "n_hits_steady": 0,
                "miss_service_mean_ns": mean,
                "miss_service_std_ns": std,
            }
        out.append((p, x, c))
    return out


def _steady_part(
    point: Mapping[str, Any], c: dict[str, Any], entries: int
) -> tuple[int, int, bool]:
    """(requests, hits) of the point's steady state, and whether its cache had surely filled
    by then. A cache of `entries` that stores every miss is full after `entries` misses;
    before each segment of the point (knee.stats.cache) there were the earlier segments'
    misses plus at most one per warm-up request. The steady part starts at the first
    segment with enough misses before it; when no segment has, it is the second half."""
    misses = int(point.get("warmup_count") or 0)
    segments = c.get("segments") or []
    for k, seg in enumerate(segments):
        if misses >= entries:
            rest = segments[k:]
            return sum(int(s["n"]) for s in rest), sum(int(s["hits"]) for s in rest), True
        misses += int(seg["n"]) - int(seg["hits"])
    return int(c.get("n_steady") or 0), int(c.get("n_hits_steady") or 0), False


def _cache_fit(used: list[tuple[Mapping[str, Any], float]], entries: int) -> CacheFit | None:
    parts = _cache_parts(used)
    hits = pool(
        (c["n_hits"], c["hit_service_mean_ns"], c.get("hit_service_std_ns"))
        for _, _, c in parts
        if c.get("n_hits") and c.get("hit_service_mean_ns") is not None
    )
    if hits is None:
        return None  # no hit anywhere: the plain pooled service time is the misses'
    misses = pool(
        (c["n_misses"], c["miss_service_mean_ns"], c.get("miss_service_std_ns"))
        for _, _, c in parts
        if c.get("n_misses") and c.get("miss_service_mean_ns") is not None
    )
    cached = []
    for p, x, c in parts:
        n, n_hits, full = _steady_part(p, c, entries)
        cached.append(
            CachePoint(
                point=int(p["point"]),
                x=float(x),
                hit_ratio_steady=n_hits / n if n else 0.0,
                n_steady=n,
                n_hits_steady=n_hits,
                hit_ratio_whole=int(c["n_hits"]) / max(1, int(c["n_hits"]) + int(c["n_misses"])),
                full=full,
            )
        )
    steady = [cp for cp in cached if cp.full and cp.n_steady] or [
        cp for cp in cached if cp.n_steady
    ]
    n_steady = sum(cp.n_steady for cp in steady)
    hits_steady = sum(cp.n_hits_steady for cp in steady)
    if not n_steady:
        return None
    ci = sps.binomtest(hits_steady, n_steady).proportion_ci(method="exact")
    total = sum(int(c["n_hits"]) + int(c["n_misses"]) for _, _, c in parts)
    return CacheFit(
        hit_ratio=hits_steady / n_steady,
        hit_ratio_ci=(float(ci.low), float(ci.high)),
        n_steady=n_steady,
        whole_hit_ratio=sum(int(c["n_hits"]) for _, _, c in parts) / total,
        hit=hits,
        miss=misses if misses is not None else hits,
        points=tuple(cached),
    )
