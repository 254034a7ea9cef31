"""chat: every operation against SQLite and PostgreSQL over real replicas, hostile input,
and failover under load (the primary killed by PID) with the database as the judge."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chat_db import DATABASES, database, rows
from wire_client import Client

from knee import results

LOGIN, LOGOUT, JOIN, POST, FETCH, AUDIT = 1, 2, 3, 4, 5, 6
OK, BAD_REQUEST, SERVER_ERROR = 0, 1, 4
NOT_PRIMARY, DUPLICATE = 1, 2


def s16(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<H", len(b)) + b


def body(client: str, reply_bytes: int, *fields: bytes) -> bytes:
    return s16(client) + struct.pack("<I", reply_bytes) + b"".join(fields)


def u32(x: int) -> bytes:
    return struct.pack("<I", x)


def ack(reply_body: bytes) -> int:
    return struct.unpack_from("<I", reply_body)[0]


def fetched(reply_body: bytes) -> list[tuple[int, str, bytes]]:
    """The messages of a fetch reply: (id, user, text)."""
    (n,) = struct.unpack_from("<I", reply_body, 4)
    at, out = 8, []
    for _ in range(n):
        (mid,) = struct.unpack_from("<Q", reply_body, at)
        (ulen,) = struct.unpack_from("<H", reply_body, at + 8)
        user = reply_body[at + 10 : at + 10 + ulen].decode()
        at += 10 + ulen
        (tlen,) = struct.unpack_from("<I", reply_body, at)
        out.append((mid, user, reply_body[at + 4 : at + 4 + tlen]))
        at += 4 + tlen
    return out


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The database config of one test's replicas: a fresh SQLite file or PostgreSQL schema
    (skipped loudly without PostgreSQL, a failure under KNEE_TEST_REQUIRE_PG=1)."""
    return database(request.param, tmp_path)


def replica(start_server: Any, db: dict[str, Any], i: int = 0, **extra: Any) -> Any:
    return start_server("chat", {"replica": i, **db, **extra})


def test_every_operation(start_server: Any, db: dict[str, Any]) -> None:
    srv = replica(start_server, db)
    with Client(srv.addr) as c:
        r = c.request(LOGIN, body("c1", 4, s16("ann"), s16("secret")))
        assert (r.status, ack(r.body), len(r.body)) == (OK, 1, 4)  # first login registers
        assert 0 < r.detail_ns <= r.service_ns <= r.server_ns  # database time inside
        assert ack(c.request(LOGIN, body("c1", 4, s16("ann"), s16("wrong"))).body) == 0
        assert ack(c.request(POST, body("c1", 4, s16("ann"), u32(7), u32(2) + b"hi")).body) == 0
        assert ack(c.request(JOIN, body("c1", 4, s16("ann"), u32(7))).body) == 1
        ids = []
        for text in (b"first", b"second"):
            r = c.request(POST, body("c1", 512, s16("ann"), u32(7), u32(len(text)) + text))
            assert (r.status, ack(r.body), len(r.body)) == (OK, 1, 512)  # padded
            ids.append(struct.unpack_from("<Q", r.body, 4)[0])
        assert ids[1] > ids[0]
        r = c.request(FETCH, body("c1", 4, u32(7), struct.pack("<QI", 0, 100)))
        assert fetched(r.body) == [(ids[0], "ann", b"first"), (ids[1], "ann", b"second")]
        r = c.request(FETCH, body("c1", 1024, u32(7), struct.pack("<QI", ids[0], 100)))
        assert fetched(r.body) == [(ids[1], "ann", b"second")] and len(r.body) == 1024
        # The room's last user leaves: its messages are cleared.
        assert ack(c.request(LOGOUT, body("c1", 4, s16("ann"), u32(7))).body) == 1
        r = c.request(FETCH, body("c1", 4, u32(7), struct.pack("<QI", 0, 100)))
        assert fetched(r.body) == []
        assert ack(c.request(LOGOUT, body("c1", 4, s16("ann"), u32(7))).body) == 0
        assert ack(c.request(LOGIN, body("c1", 4, s16("ann"), s16("secret"))).body) == 1


def test_a_retried_write_is_applied_once(start_server: Any, db: dict[str, Any]) -> None:
    srv = replica(start_server, db)
    with Client(srv.addr) as c:
        c.request(LOGIN, body("c1", 4, s16("bob"), s16("pw")))
        c.request(JOIN, body("c1", 4, s16("bob"), u32(1)))
        post = body("c1", 4, s16("bob"), u32(1), u32(3) + b"one")
        c.sock.sendall(_frame(100, POST, post))
        first = c.recv()
        c.sock.sendall(_frame(100, POST, post))  # the same request id: a retry
        again = c.recv()
        assert first.flags & DUPLICATE == 0 and again.flags & DUPLICATE
        assert again.body == first.body  # the stored result, same message id
        r = c.request(FETCH, body("c1", 4, u32(1), struct.pack("<QI", 0, 100)))
        assert [m[2] for m in fetched(r.body)] == [b"one"]
        r = c.request(AUDIT, body("c1", 4))
        (n,) = struct.unpack_from("<I", r.body, 4)
        rows = [struct.unpack_from("<QHI", r.body, 8 + 14 * i) for i in range(n)]
        assert (100, POST, 1) in rows and all(applied == 1 for _, _, applied in rows)


def _frame(request_id: int, op: int, payload: bytes) -> bytes:
    p = struct.pack("<QHH", request_id, op, 0) + payload
    return struct.pack("<I", len(p)) + p


HOSTILE = ["x'); DROP TABLE users;--", "%_\\'\"`;--", "名前 ☃", "a" * 64]


def test_hostile_input_is_stored_exactly_or_refused(start_server: Any, db: dict[str, Any]) -> None:
    srv = replica(start_server, db)
    with Client(srv.addr) as c:
        for name in HOSTILE:
            assert ack(c.request(LOGIN, body("c1", 4, s16(name), s16(name))).body) == 1
            assert ack(c.request(JOIN, body("c1", 4, s16(name), u32(3))).body) == 1
        text = b"'; DELETE FROM messages; --\x00\xff\x00 %_ \\"
        assert ack(
            c.request(POST, body("c1", 4, s16(HOSTILE[0]), u32(3), u32(len(text)) + text)).body
        )
        r = c.request(FETCH, body("c1", 4, u32(3), struct.pack("<QI", 0, 10)))
        assert fetched(r.body) == [(fetched(r.body)[0][0], HOSTILE[0], text)]
        refused = [
            body("c1", 4, s16(b"nul\x00name"), s16("pw")),  # NUL in a name
            body("c1", 4, s16("b" * 65), s16("pw")),  # overlong name
            body("c1", 4, s16(b"\xff\xfe"), s16("pw")),  # not UTF-8
            body("c1", 4, struct.pack("<H", 60) + b"short"),  # length beyond the body
            body("c1", 4, s16("ok"), s16("pw")) + b"trailing",
            body("c1", 1 << 21, s16("ok"), s16("pw")),  # reply_bytes over 1 MiB
        ]
        for b in refused:
            r = c.request(LOGIN, b)
            assert r.status == BAD_REQUEST, r
        r = c.request(POST, body("c1", 4, s16(HOSTILE[0]), u32(3), u32(4097) + b"x" * 4097))
        assert r.status == BAD_REQUEST and "4096" in r.reason
        r = c.request(LOGIN, body("c1", 4, s16(HOSTILE[1]), s16(HOSTILE[1])))
        assert (r.status, ack(r.body)) == (OK, 1)  # still serving, tables intact
    assert srv.alive()
    if "sqlite_path" in db:
        with sqlite3.connect(db["sqlite_path"]) as con:
            names = {n for (n,) in con.execute("SELECT name FROM users")}
            assert names == set(HOSTILE)
            assert con.execute("SELECT body FROM messages").fetchall() == [(text,)]


def test_a_backup_points_to_the_primary(start_server: Any, tmp_path: Path) -> None:
    db = {"sqlite_path": str(tmp_path / "chat.db")}
    replica(start_server, db, 0)
    backup = replica(start_server, db, 1)
    with Client(backup.addr) as c:
        r = c.request(LOGIN, body("c1", 4, s16("ann"), s16("pw")))
    assert (r.status, r.flags, struct.unpack("<I", r.body)[0]) == (SERVER_ERROR, NOT_PRIMARY, 0)


UNKNOWN = 2**32 - 1  # a replica's view when it is cut off from the state


def test_a_held_write_lock_cuts_every_replica_off_and_casts_no_suspicion(
    start_server: Any, tmp_path: Path
) -> None:
    """SQLite has one write lock, and a heartbeat is a write: a replica frozen (SIGSTOP) in
    the middle of a transaction holds it and stops every replica's heartbeat (CI saw the
    backups' detectors wait out the 10 s busy timeout, blind, through a 2 s freeze). Here
    the test holds the lock, as such a replica would. Each replica must notice it cannot
    beat and say it is cut off; once the lock is free, the counters that could not move
    meanwhile are no evidence: every view goes back to replica 0, none names another."""
    db = {"sqlite_path": str(tmp_path / "chat.db")}
    timing = {"heartbeat_ms": 50, "failure_timeout_ms": 400}
    replicas = [replica(start_server, db, i, **timing) for i in range(3)]

    def view(r: Any, primary: int, timeout_s: float, skip: int = 0) -> None:
        """Waits for the replica's view to become `primary` (its `skip`+1-th time)."""
        r.stdout.wait_for(
            lambda e: e.get("event") == "primary" and e["primary"] == primary, timeout_s, skip
        )

    holder = sqlite3.connect(db["sqlite_path"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for r in replicas:
            # A bound, not a speed: well under SQLite's 10 s busy timeout, which a detector
            # waiting on the lock would sit through (cut off is declared after 0.4 s).
            view(r, UNKNOWN, 8)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for r in replicas:
        view(r, 0, 30, skip=1)  # the first was at its start
    with Client(replicas[0].addr) as c:
        assert c.request(LOGIN, body("c1", 4, s16("ann"), s16("pw"))).status == OK
    for r in replicas:
        seen = [e["primary"] for e in r.stdout.snapshot() if e.get("event") == "primary"]
        assert set(seen) == {0, UNKNOWN}, (seen, r.stderr())
        assert "heartbeat failed" in r.stderr() and "heartbeat ok again" in r.stderr()


def test_failover_loses_no_acknowledged_operation_and_applies_none_twice(
    start_server: Any, knee_node: str, db: dict[str, Any], tmp_path: Path
) -> None:
    """Three replicas; the primary is killed (SIGKILL by PID) under load. Every write the
    client saw acknowledged is in the database exactly once, and nothing is there twice."""
    timing = {"heartbeat_ms": 50, "failure_timeout_ms": 400}
    replicas = [replica(start_server, db, i, **timing) for i in range(3)]
    samples = tmp_path / "load.samples.bin"
    config = {
        "replicas": [r.addr for r in replicas],
        "clients": 4,
        "think_ms": 5,
        "duration_s": 6,
        "timeout_ms": 300,
        "samples_path": str(samples),
        "histogram_path": str(tmp_path / "load.histogram.csv"),
        "driver": {"mix": "session", "reply_bytes": 256},
    }
    load = subprocess.Popen(
        [knee_node, "load", "chat", "--name", "load", "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(2.0)
        os.kill(replicas[0].pid, signal.SIGKILL)
        out, err = load.communicate(timeout=120)
    finally:
        if load.poll() is None:
            load.kill()
    assert load.returncode == 0, err.decode()
    done = json.loads(out.decode().strip().splitlines()[-1])
    assert done["event"] == "done" and done["audit_error"] is None, done
    rec = results.read_sample_records(samples)
    writes = rec[np.isin(rec["op"], [LOGIN, LOGOUT, JOIN, POST])]
    acked = writes[writes["status"] == 0]
    assert len(acked) > 100 and (rec["status"] == 0).mean() > 0.99
    # Replica 0 served before the kill, another one after it; some requests were retried.
    assert {0} < set(np.unique(rec["service"][rec["status"] == 0]).tolist())
    assert rec["arg"].max() > 1
    audit = np.loadtxt(tmp_path / "load.audit.csv", delimiter=",", skiprows=1, dtype=np.int64)
    applied = {(int(c), int(r)): int(n) for c, r, _, n in audit}
    assert max(applied.values()) == 1  # nothing applied twice
    missing = [
        (c, r)
        for c, r in zip(acked["client"], acked["request_id"], strict=True)
        if (int(c), int(r)) not in applied
    ]
    assert missing == []  # no acknowledged write lost
    # The same, asked of the database's own tables (the SQLite file, the PostgreSQL schema).
    oplog = rows(db, "SELECT client, request_id, COUNT(*) AS n FROM oplog GROUP BY 1, 2")
    assert len(oplog) >= len(acked) and (oplog["n"] == 1).all()
    in_db = set(zip(oplog["client"], oplog["request_id"].astype(int), strict=True))
    assert {
        (f"load-{c}", int(r)) for c, r in zip(acked["client"], acked["request_id"], strict=True)
    } <= in_db
