"""Hostile HTTP targets for the http load engine's bounds (tests/test_http_bounds.py), on raw
sockets on 127.0.0.1: servers that accept and never answer, never accept, answer a byte a
second, reset, keep their listen backlog full, close idle connections, or close without
answering. Tests only.

Every server listens on a free port of 127.0.0.1 (`url`), runs its threads as daemons, reads
into bounded buffers (at most `MAX_HEAD_BYTES` of a request head; bodies are not expected), and
is stopped by `close()`: the listener and every connection it holds are closed, and its threads
end within about a second.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable

from http_servers import MAX_HEAD_BYTES, READ_BYTES, TICK_S, Accepting, Listening

#: The answer every answering server gives: a valid keep-alive HTTP/1.1 200.
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer-Timing: app;dur=1\r\n\r\nok"


class _Accepting(Accepting):
    """An accepting server with the reads the hostile handlers share."""

    def _recv(self, conn: socket.socket, idle_s: float | None = None) -> bytes | None:
        """The next bytes (b"" at EOF); None when the server stops or nothing came for
        `idle_s` (None: wait until the server stops)."""
        deadline = None if idle_s is None else time.monotonic() + idle_s
        while not self._stop.is_set():
            left = TICK_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(min(TICK_S, left))
            try:
                return conn.recv(READ_BYTES)
            except TimeoutError:
                continue
        return None

    def _read_head(self, conn: socket.socket, buf: bytearray, idle_s: float | None = None) -> bool:
        """Reads one request head (through its blank line) out of `buf` and the socket;
        False at EOF, at the stop, after `idle_s` with nothing, or past MAX_HEAD_BYTES."""
        while b"\r\n\r\n" not in buf:
            if len(buf) > MAX_HEAD_BYTES:
                return False
            chunk = self._recv(conn, idle_s if not buf else None)
            if not chunk:
                return False
            buf += chunk
        _, _, rest = bytes(buf).partition(b"\r\n\r\n")
        buf[:] = rest  # knee's GETs have no body
        return True


class AcceptsNeverAnswers(_Accepting):
    """Accepts every connection and reads what comes (dropping it), never writes a byte: every
    request sent is in flight until the client gives up."""

    def handle(self, conn: socket.socket) -> None:
        while self._recv(conn):
            pass


class NeverAccepts(Listening):
    """Listens with a backlog of 1 and never calls accept. The kernel completes the handshakes
    that fit in the accept queue (two with backlog 1 on Linux), and, seen from the client,
    those whose SYN came while there was room (the server then drops their last ACK and keeps
    them half-open): all are connections whose requests are never read. Once the queue is
    full, every later SYN is dropped, so those connects hang until the client's connect
    timeout."""

    def __init__(self) -> None:
        super().__init__(backlog=1)


class FullBacklog(Listening):
    """A listen backlog of 1, filled before the test by the server's own idle connections and
    never accepted: every SYN the client sends is dropped, so every connect of the client hangs
    until its connect timeout (nothing is refused, nothing is reset)."""

    #: A connect not made within this is taken as dropped: the backlog is full.
    PROBE_S = 0.3

    def __init__(self) -> None:
        super().__init__(backlog=1)
        self.fillers: list[socket.socket] = []
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            _, writable, _ = select.select([], [s], [], self.PROBE_S)
            if not writable:
                s.close()  # its SYN was dropped: the backlog is full
                break
            error = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error or len(self.fillers) >= 16:
                s.close()
                self.close()
                raise RuntimeError(f"could not fill a backlog of 1 (error {error})")
            self.fillers.append(s)
        if not self.fillers:
            self.close()
            raise RuntimeError("the first connect to an empty backlog already hung")

    def close(self) -> None:
        for s in self.fillers:
            s.close()
        super().close()


class OneBytePerSecond(_Accepting):
    """Answers each request with a valid 200 (`RESPONSE`, keep-alive), one byte a second: a
    response takes over a minute to arrive whole."""

    def handle(self, conn: socket.socket) -> None:
        buf = bytearray()
        while self._read_head(conn, buf):
            for i in range(len(RESPONSE)):
                conn.sendall(RESPONSE[i : i + 1])
                if self._stop.wait(1.0):
                    return


class ResetsEveryConnection(_Accepting):
    """Accepts each connection and closes it at once with SO_LINGER 0: the kernel sends a
    RST instead of a FIN (the connect itself succeeded: the kernel made it before accept)."""

    def handle(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class ClosesIdle(_Accepting):
    """A keep-alive HTTP/1.1 server (`RESPONSE` to every request) that closes a connection
    (FIN) once it has been idle for `idle_s` (~100 ms, as Node does after its 5 s
    keepAliveTimeout): a client must notice the close before it writes on that connection."""

    def __init__(self, idle_s: float = 0.1) -> None:
        self.idle_s = idle_s
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        buf = bytearray()
        while self._read_head(conn, buf, idle_s=self.idle_s):
            conn.sendall(RESPONSE)
        # Returning closes the connection: a FIN, nothing unread left behind (no RST).


class ClosesAfterReading(_Accepting):
    """Reads each connection's first request head, then closes it without answering (a FIN:
    nothing is left unread, so no RST)."""

    def handle(self, conn: socket.socket) -> None:
        self._read_head(conn, bytearray(), idle_s=5.0)


class AcceptsOnly(_Accepting):
    """Accepts its first `count` connections and answers every request on them at once
    (`RESPONSE`, keep-alive), then never calls accept again. The listen backlog is 1: as with
    `NeverAccepts`, the next connections are made (seen from the client) but never accepted,
    so what they are sent is never answered, and once the queue is full every SYN is dropped,
    so the connects after hang. One target that is healthy on some connections and stalls
    the others."""

    def __init__(self, count: int) -> None:
        self.count = count
        super().__init__(backlog=1)

    def accepts_more(self) -> bool:
        return self.connections < self.count

    def handle(self, conn: socket.socket) -> None:
        buf = bytearray()
        while self._read_head(conn, buf):
            conn.sendall(RESPONSE)


#: Every hostile server's constructor, by name (for parametrized tests).
SERVERS: dict[str, Callable[[], Listening]] = {
    "accepts_never_answers": AcceptsNeverAnswers,
    "never_accepts": NeverAccepts,
    "one_byte_per_second": OneBytePerSecond,
    "resets_every_connection": ResetsEveryConnection,
    "full_backlog": FullBacklog,
    "closes_idle": ClosesIdle,
    "closes_after_reading": ClosesAfterReading,
}
