"""The wire protocol against a real echo server: good requests, and bad frames that must
close only their own connection, with a logged reason, and never the server."""

from __future__ import annotations

import random
import socket
import struct

import pytest
import wire_client as wc
from conftest import Server, StartServer

MAX_FRAME = 1024


@pytest.fixture
def echo_server(start_server: StartServer) -> Server:
    return start_server("echo", {"threads": 0}, max_frame_bytes=MAX_FRAME)


def local_addr(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def test_echo_replies_carry_id_size_and_timings(echo_server: Server) -> None:
    with wc.Client(echo_server.addr) as c:
        for reply_bytes in (0, 1, 16, 1000, 100_000):
            reply = wc.echo(c, reply_bytes)
            assert reply.flags == 0
            # Served on the connection's thread: residence splits exactly into the wait
            # from the request's arrival at the host (its kernel receive timestamp) to
            # being taken up, and the service.
            assert reply.server_ns == reply.queue_ns + reply.service_ns
            assert reply.detail_ns == 0
        # Pipelined requests are answered in order, each with its own id.
        ids = [c.send(wc.OP_ECHO, wc.echo_body(8)) for _ in range(20)]
        replies = [c.recv() for _ in ids]
        assert [r.request_id for r in replies] == ids
        assert all(r.status == wc.STATUS_OK and r.body == bytes(8) for r in replies)


def test_request_id_is_echoed_verbatim(echo_server: Server) -> None:
    with wc.Client(echo_server.addr) as c:
        for request_id in (0, 2**40 + 7, 2**64 - 1):
            c.sock.sendall(wc.encode_request(request_id, wc.OP_ECHO, wc.echo_body(4)))
            reply = c.recv()
            assert reply.request_id == request_id
            assert reply.status == wc.STATUS_OK


# Each bad frame: the bytes sent, whether we close our side afterwards (else the server must),
# and the reason the server must log for that connection.
BAD_FRAMES = {
    "oversized": (
        struct.pack("<I", 1_000_000),
        False,
        f"oversized frame: length 1000000 bytes exceeds the limit of {MAX_FRAME}",
    ),
    "truncated": (
        struct.pack("<I", 100) + bytes(range(10)),
        True,
        "truncated frame: connection closed after 14 of 104 bytes",
    ),
    "malformed": (
        wc.frame(b"abc"),
        False,
        "malformed frame: 3 bytes is shorter than a request header",
    ),
}


@pytest.mark.parametrize("kind", list(BAD_FRAMES))
def test_bad_frame_closes_only_its_connection(echo_server: Server, kind: str) -> None:
    data, we_close, reason = BAD_FRAMES[kind]
    with wc.Client(echo_server.addr) as before:
        wc.echo(before)  # established and served before the bad connection exists
        bad = wc.connect(echo_server.addr)
        bad_addr = local_addr(bad)
        try:
            bad.sendall(data)
            if we_close:
                bad.shutdown(socket.SHUT_WR)
            assert wc.wait_closed(bad, timeout_s=5.0), "the server kept the bad connection open"
        finally:
            bad.close()
        echo_server.wait_stderr(reason)

        # The connection opened before still works, and so does a new one.
        for reply_bytes in (16, 3000):
            wc.echo(before, reply_bytes)
        with wc.Client(echo_server.addr) as after:
            wc.echo(after)
        wc.echo(before)
    assert echo_server.alive()

    assert echo_server.stop() == 0
    log = echo_server.stderr().splitlines()
    # Only the bad connection was closed, with its reason.
    (line,) = [line for line in log if "closing connection" in line]
    assert line.startswith(f"[srv] closing connection from {bad_addr}: "), line
    assert line.endswith(reason), line


def test_malformed_frame_reason_is_logged_as_documented(echo_server: Server) -> None:
    data, _, reason = BAD_FRAMES["malformed"]
    with wc.connect(echo_server.addr) as bad:
        bad_addr = local_addr(bad)
        bad.sendall(data)
        assert wc.wait_closed(bad)
    log = echo_server.wait_stderr(reason)
    assert f"[srv] closing connection from {bad_addr}: {reason}" in log.splitlines()


def test_bad_frames_are_counted_in_stats(echo_server: Server) -> None:
    for data, we_close, _ in BAD_FRAMES.values():
        with wc.connect(echo_server.addr) as bad:
            bad.sendall(data)
            if we_close:
                bad.shutdown(socket.SHUT_WR)
            assert wc.wait_closed(bad)
    with wc.Client(echo_server.addr) as c:
        wc.echo(c)
    stats = echo_server.wait_stats(lambda e: e["bad_frames"] >= 3, timeout_s=5.0)
    assert stats["bad_frames"] == 3
    assert echo_server.alive()


def test_oversized_limit_is_inclusive(echo_server: Server) -> None:
    """A frame of exactly max_frame_bytes is read; one byte more is refused."""
    body = wc.echo_body(4, padding=MAX_FRAME - 12 - 4)
    with wc.Client(echo_server.addr) as c:
        assert len(wc.request_payload(1, wc.OP_ECHO, body)) == MAX_FRAME
        wc.echo(c, 4, padding=MAX_FRAME - 12 - 4)
    with wc.Client(echo_server.addr) as c:
        c.send(wc.OP_ECHO, body + b"x")
        assert wc.wait_closed(c.sock)
    echo_server.wait_stderr(f"length {MAX_FRAME + 1} bytes exceeds the limit of {MAX_FRAME}")


def test_unknown_op_and_bad_bodies_get_error_replies(echo_server: Server) -> None:
    with wc.Client(echo_server.addr) as c:
        reply = c.request(7, wc.echo_body(16))
        assert reply.status == wc.STATUS_UNKNOWN_OP
        assert reply.reason == "echo has no operation 7"
        wc.echo(c)  # the connection stays usable

        reply = c.request(wc.OP_ECHO, b"\x01\x00")
        assert reply.status == wc.STATUS_BAD_REQUEST
        assert "shorter than 4 bytes" in reply.reason
        wc.echo(c)

        reply = c.request(wc.OP_ECHO, wc.echo_body(17 << 20))
        assert reply.status == wc.STATUS_BAD_REQUEST
        assert "exceeds" in reply.reason
        wc.echo(c)
    assert echo_server.alive()
    assert "closing connection" not in echo_server.stderr()


def garbage(rng: random.Random) -> bytes:
    """Random bytes shaped like frames, or not at all."""
    kind = rng.randrange(4)
    if kind == 0:  # anything
        return rng.randbytes(rng.randrange(0, 64))
    if kind == 1:  # a random length prefix (often over the limit) and random bytes
        return struct.pack("<I", rng.getrandbits(32)) + rng.randbytes(rng.randrange(0, 64))
    if kind == 2:  # a plausible length, random payload, maybe cut short
        length = rng.randrange(0, MAX_FRAME + 1)
        return struct.pack("<I", length) + rng.randbytes(rng.randrange(0, length + 1))
    # A whole frame with a random header and body (random op, random reply_bytes).
    payload = wc.request_payload(rng.getrandbits(64), rng.getrandbits(16), rng.randbytes(8))
    return wc.frame(payload) + rng.randbytes(rng.randrange(0, 8))


def test_random_garbage_never_kills_the_server(echo_server: Server) -> None:
    rng = random.Random(20240611)
    with wc.Client(echo_server.addr) as before:
        wc.echo(before)
        for i in range(200):
            with wc.connect(echo_server.addr) as bad:
                try:
                    bad.sendall(garbage(rng))
                except OSError:
                    pass  # the server may already have refused the frame
            if i % 50 == 49:
                assert echo_server.alive(), f"server died after garbage connection {i}"
                wc.echo(before)
        wc.echo(before, 5000)
        with wc.Client(echo_server.addr) as after:
            wc.echo(after)
    assert echo_server.alive()
    assert echo_server.stop() == 0
    assert "closing connection" in echo_server.stderr()
