"""Hostile HTTP/2 servers for the h2 load engine's tests and benches, on the maintained `h2`
library (hyper-h2: framing, HPACK, flow control, stream states) over plain sockets on
127.0.0.1: cleartext h2c with prior knowledge, or TLS with ALPN `h2` when given a
certificate. Tests only.

`HostileH2Server(mode, ...)` listens on a free port (`url`, `addr`) and serves every
connection on a daemon thread; `close()` stops it (the listener and every connection are
closed; its threads end within about TICK_S). Each server is bounded: at most
`max_connections` connections are ever served (later ones are closed at once), it stops by
itself after `max_s` seconds, and what it holds per connection is bounded by the streams
the client may open (100, or 1 in `max_streams_1`, advertised in SETTINGS and enforced by
h2 once acknowledged). `stats` counts what it did (requests, answers, resets, GOAWAYs, the
most streams open at once), so a test can check its client against the server's own view.

The modes (`MODES`), each a `mode` of the one server class:

- `ok`: a normal server, the control: 200 with a 3-byte body (`BODY`) and
  `server-timing: app;dur=0` to every request.
- `max_streams_1`: SETTINGS_MAX_CONCURRENT_STREAMS = 1, and each request is answered
  `delay_ms` (default 20) after it is taken up, one at a time in arrival order: a client
  with more requests due must hold them (knee records that wait as held). A client that
  opens a second stream once it has acknowledged the setting gets a PROTOCOL_ERROR GOAWAY
  (h2's enforcement, counted in `stats.protocol_errors`); streams opened before it read the
  setting are served one after another.
- `goaway_mid_run`: answers the first `goaway_after` requests of each connection (or those
  completed before `goaway_after_s` seconds, if given), then sends GOAWAY (NO_ERROR) with
  last_stream_id = the last stream it answered, and closes: the streams above it were never
  processed, so a client may send them again on a new connection (RFC 9113 6.8).
- `goaway_drops_in_flight`: answers the first `goaway_after` requests of each connection; on
  the next one it sends GOAWAY with last_stream_id = the highest stream it received
  (including that request and any other still unanswered), answers none of them, and
  closes: requests the server says it may have processed, and never answered.
- `window_never_opened`: SETTINGS_INITIAL_WINDOW_SIZE = 0 and never a WINDOW_UPDATE, on any
  stream or on the connection: a request without a body (a GET) is answered as in `ok`; a
  request body can never be sent whole. (A body a client sends before it reads the
  SETTINGS may use the protocol's default 65,535-byte windows, RFC 9113 6.9.2; not one byte
  more, ever: neither the stream's nor the connection's window is opened.)
- `rst_every_third`: RST_STREAM INTERNAL_ERROR instead of an answer to every third request
  of each connection (the 3rd, 6th, ...), answers the rest as `ok`.
- `refuse_every_third`: the same with REFUSED_STREAM (the request was not processed: a
  client may retry it).
- `never_answers`: accepts, does the handshake (SETTINGS both ways, acknowledged), reads
  every request, and never answers one (nor closes: the client has to give up).

Run as a program (`python3 tests/hostile_h2_servers.py MODE [--tls-dir DIR]`), it prints
one JSON line `{"event": "ready", "addr": ..., "mode": ...}`, serves until SIGTERM, SIGINT
or `--max-s`, and prints its stats as one JSON line at the end: a process of its own, for a
test that freezes it (SIGSTOP) or runs it beside a load generator.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import ssl
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    SettingsAcknowledged,
    StreamEnded,
    StreamReset,
)
from h2.exceptions import ProtocolError, StreamClosedError
from h2.settings import SettingCodes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_servers import READ_BYTES, TICK_S, Accepting  # noqa: E402

MODES = (
    "ok",
    "max_streams_1",
    "goaway_mid_run",
    "goaway_drops_in_flight",
    "window_never_opened",
    "rst_every_third",
    "refuse_every_third",
    "never_answers",
)
#: The body of every answer.
BODY = b"ok\n"
#: Streams a client may open at once, advertised in every mode but max_streams_1 (nginx's
#: and Go's default is 100 and 250; a bound on what one connection holds).
MAX_STREAMS = 100
#: Connections served over a server's life; later ones are closed at once (a bound for a
#: client that reconnects after every GOAWAY).
MAX_CONNECTIONS = 1024
#: A server stops by itself after this long.
MAX_S = 600.0
#: After a GOAWAY, how long the server reads (and drops) what the client still sends
#: before it closes, so that its close does not reset the connection before the client
#: has read the GOAWAY (unread data at close makes the kernel send RST).
LINGER_S = 1.0
#: TLS handshakes that take longer fail.
HANDSHAKE_S = 5.0


@dataclass
class H2Stats:
    """What a server did, over all its connections."""

    connections: int = 0
    #: Requests received whole (HEADERS, the body if any, END_STREAM).
    requests: int = 0
    answered: int = 0
    reset_internal_error: int = 0
    reset_refused: int = 0
    goaways: int = 0
    #: The last_stream_id of every GOAWAY sent, in order.
    goaway_last_stream_ids: list[int] = field(default_factory=list)
    #: Connections ended by a protocol error of the client (h2 sent GOAWAY with it).
    protocol_errors: int = 0
    #: Streams the client reset itself.
    client_resets: int = 0
    #: Request body bytes received.
    body_bytes: int = 0
    #: The most streams open at once on one connection (received, not yet answered or
    #: reset), and the same counted only once the client acknowledged the SETTINGS.
    max_open_streams: int = 0
    max_open_streams_after_ack: int = 0


@dataclass
class _Conn:
    """One connection's state, for its own thread only."""

    h2: H2Connection
    started: float
    acked: bool = False
    #: Requests received whole on this connection (the 1st, 2nd, ... decides a mode's turn).
    completed: int = 0
    answered: int = 0
    last_answered: int = 0
    #: Streams received and not answered or reset (in arrival order).
    open: set[int] = field(default_factory=set)
    #: max_streams_1: requests waiting for the one slot, and the one being served.
    waiting: deque[int] = field(default_factory=deque)
    serving: int | None = None
    serving_due: float = 0.0
    closing: bool = False


class HostileH2Server(Accepting):
    """An HTTP/2 server in one of MODES (see the module's docstring)."""

    def __init__(
        self,
        mode: str,
        *,
        delay_ms: float = 20.0,
        goaway_after: int = 10,
        goaway_after_s: float | None = None,
        tls: tuple[Path, Path] | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_s: float = MAX_S,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
        self.mode = mode
        self.delay_s = delay_ms / 1e3
        self.goaway_after = goaway_after
        self.goaway_after_s = goaway_after_s
        self.max_connections = max_connections
        self.stats = H2Stats()
        self._stats_lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(str(tls[0]), str(tls[1]))
            self._tls.set_alpn_protocols(["h2"])
        self._deadline = time.monotonic() + max_s
        super().__init__()
        scheme = "https" if tls else "http"
        self.addr = f"127.0.0.1:{self.port}"
        self.url = f"{scheme}://{self.addr}"

    # -- the connection loop ----------------------------------------------------------------

    def handle(self, conn: socket.socket) -> None:
        with self._stats_lock:
            self.stats.connections += 1
            if self.stats.connections > self.max_connections:
                return  # over the bound: closed at once
        stream: socket.socket = conn
        if self._tls is not None:
            conn.settimeout(HANDSHAKE_S)
            try:
                stream = self._tls.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                return
            if stream.selected_alpn_protocol() != "h2":
                return
        config = H2Configuration(client_side=False, header_encoding=None)
        c = _Conn(H2Connection(config=config), time.monotonic())
        c.h2.initiate_connection()
        # Sent as a change, applied by h2 once the client acknowledges it (before that, the
        # client may use the defaults: RFC 9113 6.5.3).
        c.h2.update_settings(self._settings())
        stream.sendall(c.h2.data_to_send())
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            data = self._recv(stream, self._wait_s(c))
            if data == b"":
                return  # the client closed
            if data:
                try:
                    events = c.h2.receive_data(data)
                except ProtocolError:
                    self._count(protocol_errors=1)
                    stream.sendall(c.h2.data_to_send())  # h2's GOAWAY
                    return
                for event in events:
                    self._on_event(c, event)
            self._on_time(c)
            if out := c.h2.data_to_send():
                stream.sendall(out)
            if c.closing:
                self._linger(stream)
                return

    def _settings(self) -> dict[SettingCodes | int, int]:
        settings: dict[SettingCodes | int, int] = {SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS}
        if self.mode == "max_streams_1":
            settings[SettingCodes.MAX_CONCURRENT_STREAMS] = 1
        if self.mode == "window_never_opened":
            settings[SettingCodes.INITIAL_WINDOW_SIZE] = 0
        return settings

    def _wait_s(self, c: _Conn) -> float:
        """How long to wait for the client's next bytes: until the next answer is due."""
        wait = TICK_S
        if c.serving is not None:
            wait = min(wait, max(0.0, c.serving_due - time.monotonic()))
        return max(wait, 0.0005)

    def _recv(self, stream: socket.socket, wait_s: float) -> bytes | None:
        """The next bytes (b"" at EOF), None when nothing came within `wait_s`."""
        stream.settimeout(wait_s)
        try:
            return stream.recv(READ_BYTES)
        except TimeoutError:
            return None
        except ssl.SSLWantReadError:
            return None

    def _linger(self, stream: socket.socket) -> None:
        """After a GOAWAY: no more writes, read and drop what comes until the client closes
        or LINGER_S passes, so that the client reads the GOAWAY before the close."""
        try:
            if isinstance(stream, ssl.SSLSocket):
                stream = stream.unwrap()
            stream.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            return
        end = time.monotonic() + LINGER_S
        while (left := end - time.monotonic()) > 0 and not self._stop.is_set():
            if self._recv(stream, min(left, TICK_S)) == b"":
                return

    # -- what each mode does ----------------------------------------------------------------

    def _on_event(self, c: _Conn, event: object) -> None:
        if isinstance(event, SettingsAcknowledged):
            c.acked = True
        elif isinstance(event, RequestReceived):
            c.open.add(event.stream_id)
            with self._stats_lock:
                s = self.stats
                s.max_open_streams = max(s.max_open_streams, len(c.open))
                if c.acked:
                    s.max_open_streams_after_ack = max(s.max_open_streams_after_ack, len(c.open))
        elif isinstance(event, DataReceived):
            self._count(body_bytes=len(event.data))
            if self.mode != "window_never_opened" and event.flow_controlled_length:
                # Give the window back (stream and connection) as a normal server does.
                c.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, StreamEnded):
            if event.stream_id in c.open:
                c.completed += 1
                self._count(requests=1)
                self._on_request(c, event.stream_id)
        elif isinstance(event, StreamReset):
            c.open.discard(event.stream_id)
            self._count(client_resets=1)
        elif isinstance(event, ConnectionTerminated):
            c.closing = True

    def _on_request(self, c: _Conn, stream_id: int) -> None:
        """A request received whole: the mode decides."""
        mode, n = self.mode, c.completed
        if c.closing:
            return
        if mode in ("ok", "window_never_opened"):
            self._answer(c, stream_id)
        elif mode == "max_streams_1":
            c.waiting.append(stream_id)
            self._take_next(c)
        elif mode == "goaway_mid_run":
            late = self.goaway_after_s is not None and (
                time.monotonic() >= c.started + self.goaway_after_s
            )
            if late:
                self._goaway(c, c.last_answered)
            else:
                self._answer(c, stream_id)
                if self.goaway_after_s is None and c.answered >= self.goaway_after:
                    self._goaway(c, c.last_answered)
        elif mode == "goaway_drops_in_flight":
            if c.answered < self.goaway_after:
                self._answer(c, stream_id)
            else:
                self._goaway(c, c.h2.highest_inbound_stream_id)
        elif mode in ("rst_every_third", "refuse_every_third"):
            if n % 3:
                self._answer(c, stream_id)
            elif mode == "rst_every_third":
                self._reset(c, stream_id, ErrorCodes.INTERNAL_ERROR)
            else:
                self._reset(c, stream_id, ErrorCodes.REFUSED_STREAM)
        # never_answers: nothing, ever.

    def _on_time(self, c: _Conn) -> None:
        """What is due by the clock: max_streams_1's answer, goaway_mid_run's GOAWAY."""
        now = time.monotonic()
        if c.serving is not None and now >= c.serving_due:
            stream_id, c.serving = c.serving, None
            self._answer(c, stream_id)
            self._take_next(c)
        if (
            self.mode == "goaway_mid_run"
            and self.goaway_after_s is not None
            and not c.closing
            and now >= c.started + self.goaway_after_s
        ):
            self._goaway(c, c.last_answered)

    def _take_next(self, c: _Conn) -> None:
        """max_streams_1: the next waiting request takes the one slot for delay_s."""
        if c.serving is None and c.waiting:
            c.serving = c.waiting.popleft()
            c.serving_due = time.monotonic() + self.delay_s

    def _answer(self, c: _Conn, stream_id: int) -> None:
        headers = [
            (b":status", b"200"),
            (b"content-length", str(len(BODY)).encode()),
            (b"content-type", b"text/plain"),
            (
                b"server-timing",
                f"app;dur={self.delay_s * 1e3 if self.mode == 'max_streams_1' else 0:g}".encode(),
            ),
        ]
        try:
            c.h2.send_headers(stream_id, headers)
            c.h2.send_data(stream_id, BODY, end_stream=True)
        except StreamClosedError:
            c.open.discard(stream_id)
            return  # the client reset it meanwhile
        c.open.discard(stream_id)
        c.answered += 1
        c.last_answered = max(c.last_answered, stream_id)
        self._count(answered=1)

    def _reset(self, c: _Conn, stream_id: int, code: ErrorCodes) -> None:
        try:
            c.h2.reset_stream(stream_id, code)
        except StreamClosedError:
            pass
        c.open.discard(stream_id)
        if code == ErrorCodes.REFUSED_STREAM:
            self._count(reset_refused=1)
        else:
            self._count(reset_internal_error=1)

    def _goaway(self, c: _Conn, last_stream_id: int) -> None:
        c.h2.close_connection(ErrorCodes.NO_ERROR, last_stream_id=last_stream_id)
        c.closing = True
        with self._stats_lock:
            self.stats.goaways += 1
            self.stats.goaway_last_stream_ids.append(last_stream_id)

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def snapshot(self) -> H2Stats:
        """A copy of the stats, taken under their lock."""
        with self._stats_lock:
            return H2Stats(
                **{
                    **asdict(self.stats),
                    "goaway_last_stream_ids": list(self.stats.goaway_last_stream_ids),
                }
            )

    def __enter__(self) -> HostileH2Server:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--goaway-after", type=int, default=10)
    parser.add_argument("--goaway-after-s", type=float, default=None)
    parser.add_argument("--max-s", type=float, default=MAX_S)
    parser.add_argument(
        "--tls-dir", type=Path, default=None, help="TLS (ALPN h2) with cert.pem and key.pem here"
    )
    args = parser.parse_args()
    tls = None if args.tls_dir is None else (args.tls_dir / "cert.pem", args.tls_dir / "key.pem")
    server = HostileH2Server(
        args.mode,
        delay_ms=args.delay_ms,
        goaway_after=args.goaway_after,
        goaway_after_s=args.goaway_after_s,
        tls=tls,
        max_s=args.max_s,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(
        json.dumps({"event": "ready", "addr": server.addr, "url": server.url, "mode": args.mode}),
        flush=True,
    )
    stop.wait(args.max_s)
    server.close()
    print(json.dumps({"event": "stats", **asdict(server.snapshot())}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
