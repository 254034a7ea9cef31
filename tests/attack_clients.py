"""Clients that try to exhaust a knee server (many idle connections, slowloris, a client
that never reads its replies), and what the server costs meanwhile (psutil). Used by
tests/test_exhaustion.py, which asserts the bounds, and bench/exhaustion.py, which prints
them."""

from __future__ import annotations

import errno
import resource
import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from wire_client import LENGTH, Client, echo_body, encode_request, parse_addr

#: An operation no system has: every server answers it (UnknownOp) without other work, so
#: it shows that the server still serves, whatever the system.
OP_NONE = 0xFFFF
MiB = 1 << 20
#: The framed-TCP systems attacked (stream's service is UDP: no connections to hold).
SYSTEMS = ("echo", "matrix", "chat", "share")


@dataclass(frozen=True)
class Usage:
    """A process's resident memory and thread count at one moment."""

    rss_bytes: int
    threads: int


def usage(pid: int) -> Usage:
    proc = psutil.Process(pid)
    return Usage(proc.memory_info().rss, proc.num_threads())


def wait_threads(pid: int, at_most: int, timeout_s: float = 10.0) -> int:
    """The process's thread count once it is at most `at_most` (or at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        n = psutil.Process(pid).num_threads()
        if n <= at_most or time.monotonic() >= deadline:
            return n
        time.sleep(0.05)


def raise_open_files(want: int) -> int:
    """Raises this process's soft open-files limit towards `want` (capped by the hard limit);
    the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def served(client: Client) -> bool:
    """Whether the server answers one request on this (already open) connection."""
    reply = client.request(OP_NONE)
    return reply.request_id == client.next_id - 1


def open_idle(addr: str, count: int) -> list[socket.socket]:
    """`count` connections that send nothing. Those the server refuses are closed by it at
    once; the caller closes them all."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.settimeout(10.0)
            s.connect(parse_addr(addr))
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def is_closed(sock: socket.socket) -> bool:
    """Whether the peer closed (EOF or reset) this connection, without waiting."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def slowloris(addr: str, count: int, announced_bytes: int) -> list[socket.socket]:
    """`count` connections that start a request and then trickle it (see `trickle`). Half
    announce a frame of `announced_bytes` at once (the server must not allocate it before
    its bytes come); the other half send even the length prefix a byte at a time."""
    socks = open_idle(addr, count)
    for s in socks[: count // 2]:
        s.sendall(LENGTH.pack(announced_bytes))
    return socks


def trickle(socks: list[socket.socket], timeout_s: float, period_s: float = 1.0) -> float:
    """Sends one byte every `period_s` on every connection still open until the server has
    closed them all; seconds that took (`timeout_s` if some were still open then)."""
    start = time.monotonic()
    next_send = start
    while (elapsed := time.monotonic() - start) < timeout_s:
        open_socks = [s for s in socks if not is_closed(s)]
        if not open_socks:
            return elapsed
        if time.monotonic() >= next_send:
            for s in open_socks:
                try:
                    s.send(b"\x01", socket.MSG_DONTWAIT)
                except OSError:
                    pass  # closed meanwhile: the next pass sees it
            next_send += period_s
        time.sleep(0.05)
    return timeout_s


def never_read(addr: str, request: bytes, max_bytes: int) -> tuple[socket.socket, int]:
    """A connection that sends `request` again and again (up to `max_bytes`) and never reads
    a reply: it stops sending once the server stops taking its bytes for half a second.
    Returns the socket and the bytes sent."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A small receive buffer: the server's replies back up into its own buffers sooner.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10.0)
    s.connect(parse_addr(addr))
    s.setblocking(False)
    batch = request * max(1, 65536 // len(request))
    sent = 0
    stuck_since = None
    while sent < max_bytes:
        try:
            sent += s.send(batch)
            stuck_since = None
        except BlockingIOError:
            now = time.monotonic()
            stuck_since = stuck_since or now
            if now - stuck_since > 0.5:
                break
            time.sleep(0.01)
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.ECONNRESET):
                break
            raise
    return s, sent


def request_bytes(op: int, body: bytes = b"") -> bytes:
    """One request frame (id 1: the server does not care that they repeat)."""
    return encode_request(1, op, body)


def server_params(system: str, scratch: Path) -> dict[str, Any]:
    """The server section of each attacked system, its files in `scratch`."""
    return {
        "echo": {},
        "matrix": {"algorithm": "naive", "threads": 1, "cache": 0},
        "chat": {"replica": 0, "sqlite_path": str(scratch / "chat.db")},
        # A peer's obtain sends an 8 MiB file with sendfile(2): the write timeout covers it too.
        "share": {
            "role": "peer",
            "index": "none",
            "share_dir": str(scratch / "share"),
            "peer_index": 0,
            "files": 1,
            "file_bytes": 8 * MiB,
            "seed": 1,
        },
    }[system]


def heavy_request(system: str) -> bytes:
    """A request with a large reply where the system has one (echo 64 KiB, share's 8 MiB
    file), else op none (a small one)."""
    if system == "echo":
        return request_bytes(1, echo_body(64 * 1024))
    if system == "share":
        name = b"f0-0000.bin"
        return request_bytes(4, len(name).to_bytes(2, "little") + name)
    return request_bytes(OP_NONE)
