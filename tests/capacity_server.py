"""An HTTP/1.1 keep-alive server of known capacity, for the tests that look for overload
(tests only; on 127.0.0.1, stopped by `close` or by leaving its `with` block).

`CapacityServer(workers=W, service_s=S)` accepts any number of connections (one thread
each, as tests/http_servers.py's `Accepting` does) and serves their requests, in arrival
order, on W worker threads; each request holds its worker for S (slept to a deadline on the
monotonic clock, so oversleeping one step is not added twice) and says so in
`Server-Timing: app;dur=MS`. Its capacity is W / S by construction (`nominal_per_s`).

CPython's sleep overshoots a little and the GIL hands the reply over late, so the real
capacity is a bit lower. Measured closed loop with 64 clients (`knee http URL --clients 64
--connections 64 --duration 11s`, 2 cores), W = 4 and S = 20 ms (200/s nominal): 198.3/s
and 197.9/s in two runs (a mean service of 20.14 ms), so `CAPACITY_PER_S` = 198/s. Open
loop, 64 connections, 10 s points: 200/s was still stable, 204/s (3% over) not.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from types import TracebackType

from http_servers import MAX_WAITING, Accepting, _read_request, _response

#: The server the tests use: 4 workers of 20 ms, 200/s nominal.
WORKERS = 4
SERVICE_S = 0.020
#: Its capacity as measured (module docstring), in requests per second.
CAPACITY_PER_S = 198.0


class CapacityServer(Accepting):
    """W workers of a fixed service time behind any number of keep-alive connections."""

    def __init__(self, workers: int = WORKERS, service_s: float = SERVICE_S) -> None:
        self.workers = workers
        self.service_s = service_s
        self._work: queue.Queue[tuple[socket.socket, threading.Event]] = queue.Queue(MAX_WAITING)
        super().__init__(backlog=1024)
        for _ in range(workers):
            threading.Thread(target=self._worker, daemon=True).start()

    @property
    def nominal_per_s(self) -> float:
        """W / S: what the workers could serve with an exact sleep."""
        return self.workers / self.service_s

    def handle(self, conn: socket.socket) -> None:
        buf = bytearray()
        done = threading.Event()
        while _read_request(conn, buf) is not None:
            done.clear()
            self._work.put((conn, done))
            done.wait()  # one request in flight per connection (no pipelining)

    def _worker(self) -> None:
        while not self._stop.is_set():
            try:
                conn, done = self._work.get(timeout=0.2)
            except queue.Empty:
                continue
            start = time.monotonic()
            deadline = start + self.service_s
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(left)
            ms = (time.monotonic() - start) * 1e3
            try:
                conn.sendall(_response("200 OK", b"done", f"Server-Timing: app;dur={ms:.3f}"))
            except OSError:
                pass
            done.set()

    def __enter__(self) -> CapacityServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
