"""The closed-loop model: exact MVA for N clients with think time Z at one station of c
servers, predicting the latency a client measures (station response plus the fixed delay
outside the server, which also lengthens each client's cycle)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from knee.models.fit import Fit
from knee.models.mva import MAX_CLIENTS, MvaResult, mva
from knee.models.types import CurvePoint


@dataclass(frozen=True)
class ClosedModel:
    servers: int
    fit: Fit
    think_s: float
    max_clients: int
    limited_by: str = "threads"
    kind: str = "MVA"
    has_quantiles: bool = False

    @property
    def capacity_per_s(self) -> float:
        return self.servers / self.fit.service_s

    @cached_property
    def solution(self) -> MvaResult:
        """Solved up to max_clients, or further to show where the knee lies (three times
        the population at which the station saturates: c (D + Z + delay) / D)."""
        s = self.fit
        saturation = self.servers * (s.service_s + self.think_s + s.delay_s) / s.service_s
        top = min(MAX_CLIENTS, max(self.max_clients, int(np.ceil(3 * saturation))))
        return mva(top, s.service_s, self.think_s + s.delay_s, self.servers)

    def latency_ns(self, clients: float, q: float | None = None) -> float | None:
        n = int(clients)
        if q is not None or not 1 <= n <= len(self.solution.response_s):
            return None
        return self._mean_ns(n)

    def _mean_ns(self, n: int) -> float:
        """The mean latency of n clients, 1 <= n <= the clients solved for."""
        return (float(self.solution.response_s[n - 1]) + self.fit.delay_s) * 1e9

    def knee_x(self) -> float:
        """The population maximizing Kleinrock's power, throughput / mean latency."""
        sol = self.solution
        power = sol.throughput_per_s / (sol.response_s + self.fit.delay_s)
        return float(np.argmax(power) + 1)

    def curve(self, x_max: float) -> list[CurvePoint]:
        top = min(int(x_max), len(self.solution.response_s))
        return [
            {"x": float(n), "mean_ns": self._mean_ns(n), "p50_ns": None, "p99_ns": None}
            for n in range(1, top + 1)
        ]
