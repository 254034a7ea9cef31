"""Exact mean value analysis of a closed loop: N clients, each thinking for Z (a delay
station: think time plus any fixed network delay) and then queueing at one station of c
servers with mean service time D (FIFO, exponential service: a product-form network).

c = 1 is Reiser and Lavenberg's MVA: R(n) = D (1 + Q(n-1)), X(n) = n / (Z + R(n)),
Q(n) = X(n) R(n). For c > 1 the station is load-dependent (rate min(j, c) / D with j
customers present) and the recursion carries the queue-length probabilities p(j | n):

    R(n) = sum_{j=1..n} j D / min(j, c) * p(j-1 | n-1)
    X(n) = n / (Z + R(n))
    p(j | n) = X(n) D / min(j, c) * p(j-1 | n-1) for j >= 1, p(0 | n) = 1 - sum_{j>=1} p(j | n)

which reduces to the c = 1 form. p(0 | n) is clamped at 0 against rounding. The means do
not depend on the think-time distribution (the delay station is insensitive). Times in
seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from knee.contract import MAX_CLIENTS as MAX_CLIENTS  # the largest population solved: O(N^2)


@dataclass(frozen=True)
class MvaResult:
    """Index n-1 holds the solution for n clients."""

    throughput_per_s: np.ndarray
    response_s: np.ndarray  # time at the station (wait + service), think excluded
    queue_len: np.ndarray  # mean customers at the station


def mva(clients: int, service_s: float, think_s: float, servers: int = 1) -> MvaResult:
    if not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"clients must be in [1, {MAX_CLIENTS}], got {clients}")
    if service_s <= 0 or think_s < 0 or servers < 1:
        raise ValueError("need service_s > 0, think_s >= 0, servers >= 1")
    x = np.zeros(clients)
    r = np.zeros(clients)
    q = np.zeros(clients)
    p = np.array([1.0])  # p(j | n) for j = 0..n, starting from n = 0
    for n in range(1, clients + 1):
        j = np.arange(1, n + 1)
        per_visit = j * service_s / np.minimum(j, servers)  # j / mu(j)
        resp = float(np.dot(per_visit, p))
        thr = n / (think_s + resp)
        tail = thr * service_s / np.minimum(j, servers) * p
        p = np.concatenate(([max(0.0, 1.0 - float(tail.sum()))], tail))
        x[n - 1], r[n - 1], q[n - 1] = thr, resp, thr * resp
    return MvaResult(x, r, q)
