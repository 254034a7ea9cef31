"""The live page's HTTP server: the page, its chart library, /state.json and /metrics, on a
thread of its own beside the runner.

Nothing a client does reaches the run:
- at most MAX_CLIENTS connections are served at once; one beyond is answered 503 and closed
  without reading it;
- every socket read and write times out after SOCKET_TIMEOUT_S (a client that sends
  nothing, or reads nothing, is dropped);
- the answers are built at most once per change of the state (cached by its version), so
  a flood of requests costs copies of the same bytes, not work on the state's lock;
- stopping closes the listening socket at once and never waits for a connection: handler
  threads are daemons, and the run's end is not delayed by a client.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from knee.live import metrics
from knee.live.page import page_html, plotly_js
from knee.live.state import LiveState

#: Connections served at once (a page polls with one; a few tabs and a scraper fit).
MAX_CLIENTS = 8
#: Seconds a read or a write of one connection may wait.
SOCKET_TIMEOUT_S = 2.0
#: The longest request line and header block read (the page's requests are small).
MAX_REQUEST_BYTES = 8192


class _Cache:
    """One answer per state version, built by whichever request asks first."""

    def __init__(self, build: Callable[[], tuple[int, bytes]]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._version = -1
        self._body = b""

    def get(self, version: int) -> bytes:
        with self._lock:
            if version != self._version:
                self._version, self._body = self._build()
            return self._body


class LiveServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung client's thread never holds the process
    block_on_close = False  # server_close() does not wait for connections

    def __init__(self, address: tuple[str, int], state: LiveState) -> None:
        self.state = state
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self.refused = 0
        self.last_poll = -math.inf  # time.monotonic() of the last /state.json
        self.served_version = -1  # the newest state version a page fetched
        self.state_cache = _Cache(lambda: (state.version, state.state_json()))

        def build_metrics() -> tuple[int, bytes]:
            version, data = state.metric_nodes()
            return version, metrics.exposition(data).encode()

        self.metrics_cache = _Cache(build_metrics)
        self.page = page_html().encode()
        self._thread: threading.Thread | None = None
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            _busy(request)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(SOCKET_TIMEOUT_S)
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away or timed out: nothing to report on the console

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops accepting and closes the listening socket; open connections are left to
        their timeouts (daemon threads)."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=1.0)
        self.server_close()


def _busy(request: socket.socket) -> None:
    try:
        request.settimeout(0.1)
        request.sendall(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
            b"Retry-After: 1\r\nConnection: close\r\n\r\n"
        )
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"  # keep-alive: a polling page reuses its connection
    timeout = SOCKET_TIMEOUT_S

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        state = self.server.state
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", self.server.page)
        elif path == "/plotly.js":
            self._send(200, "application/javascript", plotly_js(), cache=True)
        elif path == "/state.json":
            version = state.version
            self._send(200, "application/json", self.server.state_cache.get(version))
            self.server.last_poll = time.monotonic()
            self.server.served_version = max(self.server.served_version, version)
        elif path == "/metrics":
            body = self.server.metrics_cache.get(state.version)
            self._send(200, metrics.CONTENT_TYPE, body)
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, code: int, kind: str, body: bytes, cache: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        self.end_headers()
        self.wfile.write(body)

    def parse_request(self) -> bool:
        if len(self.raw_requestline) > MAX_REQUEST_BYTES:
            self.send_error(414)
            return False
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # the runner's console is the run's
