"""A minimal client of knee's wire protocol, for the integration tests.

Frame: u32 LE length + payload. Request payload: request_id u64 | op u16 | flags u16 (12 B)
then the body. Reply payload: request_id u64 | status u16 | flags u16 | server_ns u64 |
queue_ns u64 | service_ns u64 | detail_ns u64 (44 B) then the body. All little-endian.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

import numpy as np

LENGTH = struct.Struct("<I")
REQUEST_HEADER = struct.Struct("<QHH")
REPLY_HEADER = struct.Struct("<QHHQQQQ")
assert REQUEST_HEADER.size == 12
assert REPLY_HEADER.size == 44

STATUS_OK = 0
STATUS_BAD_REQUEST = 1
STATUS_UNKNOWN_OP = 2
STATUS_OVERLOADED = 3
STATUS_SERVER_ERROR = 4

OP_ECHO = 1
OP_POWER = 1
FLAG_CACHE_HIT = 1

#: Default socket timeout of the helpers: long enough for a loaded CI machine, short enough
#: that a server that never answers fails the test instead of hanging it.
TIMEOUT_S = 10.0


class ConnectionClosed(ConnectionError):
    """The peer closed the connection before a whole frame arrived."""


@dataclass(frozen=True)
class Reply:
    request_id: int
    status: int
    flags: int
    server_ns: int
    queue_ns: int
    service_ns: int
    detail_ns: int
    body: bytes

    @property
    def reason(self) -> str:
        """The body as text (the reason of an error reply)."""
        return self.body.decode("utf-8")


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def frame(payload: bytes) -> bytes:
    """One frame: length prefix + payload."""
    return LENGTH.pack(len(payload)) + payload


def request_payload(request_id: int, op: int, body: bytes = b"", flags: int = 0) -> bytes:
    return REQUEST_HEADER.pack(request_id, op, flags) + body


def encode_request(request_id: int, op: int, body: bytes = b"", flags: int = 0) -> bytes:
    """A whole request frame, ready to send."""
    return frame(request_payload(request_id, op, body, flags))


def decode_reply(payload: bytes) -> Reply:
    if len(payload) < REPLY_HEADER.size:
        raise ValueError(f"reply of {len(payload)} bytes is shorter than a reply header")
    fields = REPLY_HEADER.unpack_from(payload)
    return Reply(*fields, body=bytes(payload[REPLY_HEADER.size :]))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes; ConnectionClosed if the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionClosed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (length,) = LENGTH.unpack(recv_exact(sock, LENGTH.size))
    return recv_exact(sock, length)


def read_reply(sock: socket.socket) -> Reply:
    return decode_reply(read_frame(sock))


def connect(addr: str, timeout_s: float = TIMEOUT_S) -> socket.socket:
    sock = socket.create_connection(parse_addr(addr), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def wait_closed(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True if the peer closes the connection (EOF or reset) within the timeout, discarding
    whatever it sends first; False if it is still open when the timeout expires."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


class Client:
    """One connection: numbered requests, blocking replies with a socket timeout."""

    def __init__(self, addr: str, timeout_s: float = TIMEOUT_S) -> None:
        self.sock = connect(addr, timeout_s)
        self.next_id = 1

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, op: int, body: bytes = b"", flags: int = 0) -> int:
        """Sends one request; returns its id."""
        request_id = self.next_id
        self.next_id += 1
        self.sock.sendall(encode_request(request_id, op, body, flags))
        return request_id

    def recv(self) -> Reply:
        return read_reply(self.sock)

    def request(self, op: int, body: bytes = b"", flags: int = 0) -> Reply:
        request_id = self.send(op, body, flags)
        reply = self.recv()
        if reply.request_id != request_id:
            raise AssertionError(f"reply to {reply.request_id}, expected {request_id}")
        return reply


# --- echo ---------------------------------------------------------------------------------


def echo_body(reply_bytes: int, padding: int = 0) -> bytes:
    return struct.pack("<I", reply_bytes) + bytes(padding)


def echo(client: Client, reply_bytes: int = 16, padding: int = 12) -> Reply:
    """One echo request; checks the reply is well formed."""
    reply = client.request(OP_ECHO, echo_body(reply_bytes, padding))
    if reply.status != STATUS_OK or reply.body != bytes(reply_bytes):
        raise AssertionError(f"bad echo reply: {reply}")
    return reply


# --- matrix -------------------------------------------------------------------------------


def stochastic_matrix(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random row-stochastic matrix: every power stays bounded (entries in (0, 1])."""
    m = 0.05 + rng.random((n, n))
    return m / m.sum(axis=1, keepdims=True)


def matrix_body(m: np.ndarray, p: int) -> bytes:
    n = m.shape[0]
    assert m.shape == (n, n)
    return struct.pack("<II", n, p) + np.ascontiguousarray(m, dtype="<f8").tobytes()


def decode_matrix(body: bytes) -> np.ndarray:
    (n,) = struct.unpack_from("<I", body)
    if len(body) != 4 + 8 * n * n:
        raise ValueError(f"a {n} x {n} result is {4 + 8 * n * n} bytes, got {len(body)}")
    return np.frombuffer(body, dtype="<f8", offset=4).reshape(n, n)
