"""Small HTTP/1.1 servers for the http tests, on raw sockets so that they can send what a
well-behaved server never would (tests only; every one on 127.0.0.1, stopped by `close`).

- `ScriptedServer`: answers each path with fixed bytes (chunked bodies, Server-Timing,
  `Connection: close`, every malformed case), counts the connections it accepted.
- `WorkerServer`: W workers (one by default) serve the requests of every connection in
  arrival order, each for a known service time, and say so in `Server-Timing: app;dur=MS`:
  its capacity is W / service time (tests/capacity_server.py measures it).

`Listening` and `Accepting` are the listener every raw-socket test server is built on (these
and tests/hostile_http_servers.py's).
"""

from __future__ import annotations

import queue
import socket
import threading
import time

#: A request head longer than this is refused (the tests send small ones).
MAX_HEAD_BYTES = 64 << 10
#: Bytes read per recv.
READ_BYTES = 65536
#: How often a blocked server thread looks at its stop flag.
TICK_S = 0.2
#: Requests waiting for the one worker; beyond, the connection thread waits (TCP pushes back).
MAX_WAITING = 100_000

Reply = tuple[bytes, str]  # (bytes to send, then: "keep", "close" or "hang")


def _read_request(conn: socket.socket, buf: bytearray) -> str | None:
    """The path of the next request on `conn` (its body read and dropped); None at EOF."""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            return None
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    buf[:] = rest[length:]
    return lines[0].split(" ")[1]


class Listening:
    """A listening socket on 127.0.0.1 and the connections taken from it."""

    def __init__(self, backlog: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        #: Connections accepted so far.
        self.connections = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []

    def _keep(self, conn: socket.socket) -> None:
        with self._lock:
            self.connections += 1
            self._conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


class Accepting(Listening):
    """Accepts connections (while `accepts_more()`) and serves each on a daemon thread with
    `handle`; a handler that returns (or fails with OSError) closes its connection."""

    def __init__(self, backlog: int = 128) -> None:
        super().__init__(backlog)
        self.sock.settimeout(TICK_S)
        threading.Thread(target=self._accept, daemon=True).start()

    def accepts_more(self) -> bool:
        return True

    def _accept(self) -> None:
        while not self._stop.is_set() and self.accepts_more():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._keep(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        except OSError:
            pass
        finally:
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError


def _response(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


#: path -> reply. Malformed ones carry the reason knee must record (knee.contract.HTTP_ARGS).
ROUTES: dict[str, Reply] = {
    "/ok": (_response("200 OK", b"hello", "Server-Timing: app;dur=2.5"), "keep"),
    "/notiming": (_response("200 OK", b"hello"), "keep"),
    "/chunked": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
        b'Server-Timing: app;dur=3.5;desc="render, all", db;dur=1.25\r\n\r\n'
        b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n",
        "keep",
    ),
    "/close": (_response("200 OK", b"bye", "Connection: close"), "close"),
    "/malformed": (b"HTTP/1.1 2x0 OK\r\n\r\n", "keep"),
    "/short": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", "close"),
    "/extra": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabcd", "keep"),
    "/bigheader": (_response("200 OK", b"", "X-Big: " + "a" * (100 << 10)), "keep"),
    "/bigbody": (b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n", "close"),
    "/badchunk": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "keep"),
    "/empty": (b"", "close"),
    "/hang": (b"", "hang"),
    "/upgrade": (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", "keep"),
}


class ScriptedServer(Accepting):
    def handle(self, conn: socket.socket) -> None:
        buf = bytearray()
        while (path := _read_request(conn, buf)) is not None:
            reply, then = ROUTES.get(path, (_response("404 Not Found", b""), "keep"))
            conn.sendall(reply)
            if then == "close":
                return
            if then == "hang":
                self._stop.wait()
                return


class WorkerServer(Accepting):
    """Every connection's requests go to W workers, in arrival order: each request holds
    its worker for the service time (slept to a deadline on the monotonic clock, so
    oversleeping one step is not added twice), and says so in Server-Timing."""

    def __init__(self, service_s: float, workers: int = 1, backlog: int = 128) -> None:
        self.service_s = service_s
        self.workers = workers
        self._work: queue.Queue[tuple[socket.socket, threading.Event]] = queue.Queue(MAX_WAITING)
        super().__init__(backlog=backlog)
        for _ in range(workers):
            threading.Thread(target=self._worker, daemon=True).start()

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
