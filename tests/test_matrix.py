"""The matrix system over the wire: correct powers, the FIFO cache, bad requests, the
single-worker queue, and a load run."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import wire_client as wc
from conftest import RunLoad, Server, StartServer

STATUS_OK = 0


def power(c: wc.Client, m: np.ndarray, p: int) -> wc.Reply:
    reply = c.request(wc.OP_POWER, wc.matrix_body(m, p))
    assert reply.status == wc.STATUS_OK, reply.body[:200]
    return reply


@pytest.mark.parametrize("algorithm", ["naive", "squaring"])
@pytest.mark.parametrize("n", [1, 5, 50])
def test_powers_match_numpy(start_server: StartServer, algorithm: str, n: int) -> None:
    server = start_server("matrix", {"algorithm": algorithm, "threads": 1, "cache": 0})
    m = wc.stochastic_matrix(n, np.random.default_rng(n))
    with wc.Client(server.addr) as c:
        for p in (1, 2, 7, 64):
            reply = power(c, m, p)
            assert reply.flags & wc.FLAG_CACHE_HIT == 0
            got = wc.decode_matrix(reply.body)
            want = np.linalg.matrix_power(m, p)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=0, err_msg=f"P={p}")
            # Residence time splits exactly into queue and service.
            assert reply.server_ns == reply.queue_ns + reply.service_ns


def test_fifo_cache_hits_and_evictions(start_server: StartServer) -> None:
    server = start_server("matrix", {"algorithm": "squaring", "threads": 1, "cache": 2})
    rng = np.random.default_rng(11)
    m, other = wc.stochastic_matrix(8, rng), wc.stochastic_matrix(8, rng)
    # (matrix, P, hit expected, cache contents afterwards, oldest first)
    steps = [
        (m, 3, False),  # [M3]
        (m, 4, False),  # [M3, M4]
        (m, 3, True),  # [M3, M4]: a hit does not move M3 (FIFO, not LRU)
        (m, 5, False),  # [M4, M5]: evicts M3, the oldest insertion (LRU would evict M4)
        (m, 3, False),  # [M5, M3]: M3 is gone; evicts M4
        (m, 5, True),  # [M5, M3]
        (m, 4, False),  # [M3, M4]: M4 was evicted; evicts M5
        (other, 3, False),  # [M4, O3]: same P, another matrix is another key; evicts M3
        (m, 4, True),  # [M4, O3]
        (other, 3, True),  # [M4, O3]
        (m, 3, False),  # [O3, M3]
    ]
    first_result: dict[tuple[int, int], bytes] = {}
    with wc.Client(server.addr) as c:
        for i, (matrix, p, hit) in enumerate(steps):
            reply = power(c, matrix, p)
            assert bool(reply.flags & wc.FLAG_CACHE_HIT) == hit, f"step {i}: P={p}"
            key = (id(matrix), p)
            first_result.setdefault(key, reply.body)
            # A hit returns exactly the bytes computed; a recomputation is deterministic.
            assert reply.body == first_result[key], f"step {i}"
            np.testing.assert_allclose(
                wc.decode_matrix(reply.body), np.linalg.matrix_power(matrix, p), rtol=1e-9
            )


BAD_BODIES = {
    "short header": (b"\x02\x00\x00", "shorter than its 8-byte header"),
    "wrong length": (struct.pack("<II", 2, 1) + bytes(8 * 3), "a 2 x 2 matrix is 32 bytes"),
    "too long": (struct.pack("<II", 1, 1) + bytes(16), "the request carries 16"),
    "n = 0": (struct.pack("<II", 0, 3), "n = 0 is outside"),
    "p = 0": (struct.pack("<II", 1, 0) + struct.pack("<d", 1.0), "P = 0 is outside"),
    "p too big": (struct.pack("<II", 1, 2_000_000) + struct.pack("<d", 1.0), "P = 2000000"),
}


def test_bad_bodies_are_refused_and_the_connection_survives(start_server: StartServer) -> None:
    server = start_server("matrix", {"algorithm": "naive", "threads": 1})
    m = wc.stochastic_matrix(3, np.random.default_rng(0))
    with wc.Client(server.addr) as c:
        for name, (body, reason) in BAD_BODIES.items():
            reply = c.request(wc.OP_POWER, body)
            assert reply.status == wc.STATUS_BAD_REQUEST, name
            assert reason in reply.reason, (name, reply.reason)
            got = wc.decode_matrix(power(c, m, 2).body)
            np.testing.assert_allclose(got, m @ m, rtol=1e-12)
        reply = c.request(9, wc.matrix_body(m, 2))
        assert reply.status == wc.STATUS_UNKNOWN_OP
        assert reply.reason == "matrix has no operation 9"
        power(c, m, 2)
    assert server.alive()
    assert "closing connection" not in server.stderr()


def test_one_worker_serves_in_arrival_order(start_server: StartServer) -> None:
    server = start_server("matrix", {"algorithm": "naive", "threads": 1, "cache": 0})
    m = wc.stochastic_matrix(50, np.random.default_rng(3))
    # Costs decrease along the pipeline: a server that ran requests side by side would
    # answer the cheap late ones first; one worker must answer in arrival order.
    ps = [3200, 1600, 800, 400, 200]
    with wc.Client(server.addr) as c:
        payload = b"".join(
            wc.encode_request(i + 1, wc.OP_POWER, wc.matrix_body(m, p)) for i, p in enumerate(ps)
        )
        c.sock.sendall(payload)
        replies = [c.recv() for _ in ps]
    assert [r.request_id for r in replies] == [1, 2, 3, 4, 5]
    assert all(r.status == STATUS_OK for r in replies)
    for r in replies:
        assert r.server_ns == r.queue_ns + r.service_ns
    # Every later request waited behind the earlier ones.
    assert all(r.queue_ns > 0 for r in replies[1:]), [r.queue_ns for r in replies]
    for r, p in zip(replies, ps, strict=True):
        np.testing.assert_allclose(
            wc.decode_matrix(r.body), np.linalg.matrix_power(m, p), rtol=1e-9
        )


def test_matrix_load_run(start_server: StartServer, run_load: RunLoad) -> None:
    server: Server = start_server("matrix", {"algorithm": "naive", "threads": 1})
    n = 20
    run = run_load(
        "matrix",
        server.addr,
        {"kind": "closed", "clients": 2, "think_ms": 0},
        requests=100,
        driver={"n": n, "same_matrix": True, "p_min": 10, "p_max": 20},
    )
    r = run.records
    assert len(r) == 100
    assert np.all(r["status"] == STATUS_OK)
    assert np.all((r["arg"] >= 10) & (r["arg"] <= 20))
    assert len(np.unique(r["arg"])) > 1  # P is drawn, not fixed
    assert np.all(r["op"] == wc.OP_POWER)
    assert np.all(r["flags"] == 0)  # no cache configured
    assert np.all(r["bytes_out"] == 4 + 12 + 8 + 8 * n * n)
    assert np.all(r["bytes_in"] == 4 + 44 + 4 + 8 * n * n)
    assert np.all(r["server_ns"] == r["queue_ns"] + r["service_ns"])
    assert set(r["client"].tolist()) == {0, 1}
    assert run.done["ok"] == 100
