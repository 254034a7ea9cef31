"""An HTTP/1.1 keep-alive server of known capacity, for the tests that look for overload
(tests only; on 127.0.0.1, stopped by `close` or by leaving its `with` block).

`CapacityServer(workers=W, service_s=S)` is tests/http_servers.py's `WorkerServer` with a
deep listen backlog: any number of connections, their requests served in arrival order on
W worker threads, each held for S. Its capacity is W / S by construction
(`nominal_per_s`).

CPython's sleep overshoots a little and the GIL hands the reply over late, so the real
capacity is a bit lower. Measured closed loop with 64 clients (`knee http URL --clients 64
--connections 64 --duration 11s`, 2 cores), W = 4 and S = 20 ms (200/s nominal): 198.3/s
and 197.9/s in two runs (a mean service of 20.14 ms), so `CAPACITY_PER_S` = 198/s. Open
loop, 64 connections, 10 s points: 200/s was still stable, 204/s (3% over) not.
"""

from __future__ import annotations

from types import TracebackType

from http_servers import WorkerServer

#: The server the tests use: 4 workers of 20 ms, 200/s nominal.
WORKERS = 4
SERVICE_S = 0.020
#: Its capacity as measured (module docstring), in requests per second.
CAPACITY_PER_S = 198.0


class CapacityServer(WorkerServer):
    """W workers of a fixed service time behind any number of keep-alive connections."""

    def __init__(self, workers: int = WORKERS, service_s: float = SERVICE_S) -> None:
        super().__init__(service_s, workers, backlog=1024)

    @property
    def nominal_per_s(self) -> float:
        """W / S: what the workers could serve with an exact sleep."""
        return self.workers / self.service_s

    def __enter__(self) -> CapacityServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
