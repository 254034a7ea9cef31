"""Open-loop models (Poisson arrivals at rate lambda): M/M/1, M/G/1, M/D/1 and M/M/c, as
predictions of the latency a client measures: the server's sojourn time plus the fixed
delay outside it (`Fit.delay_s`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from knee.models import md1, mg1, mm1, mmc
from knee.models.fit import Fit
from knee.models.types import CurvePoint

#: Points of a curve on a linear grid, plus extra ones approaching capacity.
CURVE_POINTS = 100
_NEAR_CAPACITY = (0.9, 0.95, 0.97, 0.98, 0.99, 0.995)
#: Grid on which Kleinrock's power is maximized.
KNEE_GRID = 4000
#: Below this squared coefficient of variation service counts as constant (M/D/1): the
#: Pollaczek-Khinchine wait, proportional to (1 + cs2), then differs from M/D/1's by < 10%.
CS2_CONSTANT = 0.1


@dataclass(frozen=True)
class OpenModel:
    kind: str  # "M/M/1" | "M/G/1" | "M/D/1" | "M/M/c"
    servers: int
    fit: Fit
    limited_by: str = "threads"  # "cores" when servers was capped at the machine's cores

    @property
    def capacity_per_s(self) -> float:
        return self.servers / self.fit.service_s

    @property
    def has_quantiles(self) -> bool:
        return self.kind in ("M/M/1", "M/M/c")

    def sojourn_mean_s(self, rate_per_s: float) -> float | None:
        s = self.fit.service_s
        if self.kind == "M/M/1":
            return mm1.sojourn_mean_s(rate_per_s, s)
        if self.kind == "M/G/1":
            return mg1.sojourn_mean_s(rate_per_s, s, self.fit.cs2)
        if self.kind == "M/D/1":
            return md1.sojourn_mean_s(rate_per_s, s)
        return mmc.sojourn_mean_s(rate_per_s, s, self.servers)

    def sojourn_quantile_s(self, q: float, rate_per_s: float) -> float | None:
        if self.kind == "M/M/1":
            return mm1.sojourn_quantile_s(q, rate_per_s, self.fit.service_s)
        if self.kind == "M/M/c":
            return mmc.sojourn_quantile_s(q, rate_per_s, self.fit.service_s, self.servers)
        return None

    def latency_ns(self, rate_per_s: float, q: float | None = None) -> float | None:
        """Predicted client latency (mean, or the q-quantile) at a rate; None past capacity
        or without a closed form."""
        t = self.sojourn_mean_s(rate_per_s) if q is None else self.sojourn_quantile_s(q, rate_per_s)
        return None if t is None else (t + self.fit.delay_s) * 1e9

    def knee_x(self) -> float:
        """The rate maximizing Kleinrock's power, rate / mean latency."""
        rates = self.capacity_per_s * np.arange(1, KNEE_GRID) / KNEE_GRID
        power = [r / (self.latency_ns(float(r)) or np.inf) for r in rates]
        return float(rates[int(np.argmax(power))])

    def curve(self, x_max: float) -> list[CurvePoint]:
        """Predictions from rate 0 up to x_max, stopping short of capacity."""
        cap = self.capacity_per_s
        top = min(x_max, cap)
        xs = set(np.linspace(0.0, top, CURVE_POINTS).tolist())
        xs.update(f * cap for f in _NEAR_CAPACITY if f * cap <= top)
        out: list[CurvePoint] = []
        for x in sorted(xs):
            mean = self.latency_ns(x)
            if mean is None:
                continue
            p50, p99 = (
                (self.latency_ns(x, 0.5), self.latency_ns(x, 0.99))
                if self.has_quantiles
                else (None, None)
            )
            out.append({"x": x, "mean_ns": mean, "p50_ns": p50, "p99_ns": p99})
        return out


def open_models(fit: Fit, threads: int, cores: int | None) -> list[OpenModel]:
    """The models of one group of points: M/M/1 (the source report's reference), M/G/1 and
    M/D/1 for one thread; M/M/c for a pool of c threads, and again with c = cores when the
    machine has fewer cores than threads."""
    if threads == 1:
        return [OpenModel(kind, 1, fit) for kind in ("M/M/1", "M/G/1", "M/D/1")]
    models = [OpenModel("M/M/c", threads, fit)]
    if cores is not None and cores < threads:
        models.append(OpenModel("M/M/c", cores, fit, limited_by="cores"))
    return models


def primary_kind(fit: Fit, threads: int) -> str:
    """The open-loop model the data calls for: M/M/c for a pool; for one thread M/D/1 when
    service is nearly constant (cs2 < CS2_CONSTANT), else M/G/1 with the measured cs2."""
    if threads > 1:
        return "M/M/c"
    return "M/D/1" if fit.cs2 < CS2_CONSTANT else "M/G/1"
