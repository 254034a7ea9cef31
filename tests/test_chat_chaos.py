"""chat under faults (issue 15): the dedup table's bound, crash cycles of the current primary
through the runner's timeline with the checker's verdict, and a primary frozen (SIGSTOP)
and resumed while another took over. The judge is the database's own tables, on SQLite and
on PostgreSQL."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from chat_db import DATABASES, database, execute, rows
from wire_client import Client

import knee
from knee.analysis import chat_checker
from knee.spec import SpecError, load_spec

LOGIN, POST = 1, 4
OK, BAD_REQUEST = 0, 1
DUPLICATE = 2
WINDOW = 8


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    return database(request.param, tmp_path)


def _login(client: str, user: str) -> bytes:
    name, pw = user.encode(), b"pw"
    return (
        struct.pack("<H", len(client))
        + client.encode()
        + struct.pack("<I", 4)
        + struct.pack("<H", len(name))
        + name
        + struct.pack("<H", len(pw))
        + pw
    )


def _send(c: Client, request_id: int, body: bytes) -> Any:
    p = struct.pack("<QHH", request_id, LOGIN, 0) + body
    c.sock.sendall(struct.pack("<I", len(p)) + p)
    return c.recv()


def _applied(db: dict[str, Any], client: str) -> dict[int, int]:
    sql = f"SELECT request_id, COUNT(*) AS n FROM oplog WHERE client = '{client}' GROUP BY 1"
    t = rows(db, sql)
    return dict(zip(t["request_id"].astype(int), t["n"].astype(int), strict=True))


def test_dedup_window_bounds_the_table_and_keeps_retries_exactly_once(
    start_server: Any, db: dict[str, Any]
) -> None:
    srv = start_server("chat", {"replica": 0, "dedup_window": WINDOW, **db})
    with Client(srv.addr) as c:
        for client in ("a", "b", "c"):
            for rid in range(1, 41):
                r = _send(c, rid, _login(client, f"u{client}"))
                assert (r.status, r.flags & DUPLICATE) == (OK, 0), r
        # Inside the window (newest 40): the stored result, not a second application.
        for rid in (40, 40 - WINDOW + 1):
            r = _send(c, rid, _login("a", "ua"))
            assert (r.status, r.flags & DUPLICATE) == (OK, DUPLICATE), r
        # Below it: refused, never applied again (its key was pruned).
        r = _send(c, 40 - WINDOW, _login("a", "ua"))
        assert r.status == BAD_REQUEST and "dedup window" in r.reason, r
        r = _send(c, 1, _login("a", "ua"))
        assert r.status == BAD_REQUEST, r
        # A jump ahead prunes everything below the new window at once.
        assert _send(c, 1000, _login("b", "ub")).status == OK
    keys = rows(db, "SELECT client, COUNT(*) AS n, MIN(request_id) AS lo FROM dedup GROUP BY 1")
    per_client = dict(zip(keys["client"], keys["n"].astype(int), strict=True))
    assert per_client == {"a": WINDOW, "b": 1, "c": WINDOW}, keys
    assert (keys.set_index("client").loc[["a", "c"], "lo"] == 40 - WINDOW + 1).all()
    applied = _applied(db, "a")
    assert applied == {rid: 1 for rid in range(1, 41)}  # every id once, retries or not


SPEC = """
[experiment]
name = "chat-chaos-test"
system = "chat"
seed = 3

[server]
replicas = 3
heartbeat_ms = 50
failure_timeout_ms = 400
{server}

[driver]
mix = "session"
reply_bytes = 64

[load]
schedule = "closed"
clients = 3
think_ms = 5
duration_s = {duration_s}
timeout_ms = 250
warmup_s = 0.3

{events}
"""


def _run(tmp_path: Path, db: dict[str, Any], events: str, duration_s: float) -> Path:
    server = ""
    if "postgres_url" in db:
        server = f'database = "postgres"\npostgres_url = "{db["postgres_url"]}"'
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.format(server=server, events=events, duration_s=duration_s))
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out)]
    cmd += ["--no-progress", "--no-report", "--keep-scratch"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir


def _events(*rows_: tuple[float, str, str]) -> str:
    return "\n".join(
        f'[[events]]\nat_s = {at}\naction = "{action}"\nnode = "{node}"\n'
        for at, action, node in rows_
    )


def _point(run_dir: Path) -> dict[str, Any]:
    (point,) = json.loads((run_dir / "summary.json").read_text())["points"]
    return point


def _replica_db(run_dir: Path) -> dict[str, Any]:
    """The database the replicas of point 0 shared, as the runner started them."""
    record = json.loads((run_dir / "points" / "p000.json").read_text())
    server = next(n["config"]["server"] for n in record["topology"] if n["name"] == "replica-0")
    keys = ("sqlite_path", "postgres_url", "postgres_schema")
    return {k: server[k] for k in keys if k in server}


def test_kill_cycles_of_the_current_primary_lose_nothing(
    tmp_path: Path, db: dict[str, Any]
) -> None:
    """Three kills of whichever replica is primary when each is due, each followed by a
    restart: the runner resolves "primary" at event time, the checker reads the database."""
    cycle = [(1.5, "kill"), (2.5, "start"), (4.0, "kill"), (5.0, "start"), (6.5, "kill")]
    timeline = []
    for at, action in cycle:
        if action == "kill":
            timeline.append((at, "kill", "primary"))
        else:
            timeline += [(at, "start", f"replica-{i}") for i in range(3)]
    run_dir = _run(tmp_path, db, _events(*timeline), duration_s=8.5)
    check = _point(run_dir)["check"]
    assert check["verdict"] == "PASS", check
    assert check["database"] == ("postgres" if "postgres_url" in db else "sqlite")
    assert check["lost"] == 0 and check["applied_twice"] == 0
    assert check["acknowledged_writes"] > 100
    assert check["failures"]["kill"] == 3
    gaps = check["unavailability"]
    assert gaps["count"] == 3 and gaps["unanswered"] == 0
    # Each failover waits for the detector (failure_timeout_ms 400 after the last beat).
    assert 150 < gaps["p50_ms"] <= gaps["p90_ms"] <= gaps["max_ms"] < 10_000, gaps
    record = json.loads((run_dir / "points" / "p000.json").read_text())
    kills = [e for e in record["events"] if e["action"] == "kill"]
    assert [e["outcome"] for e in kills] == ["applied"] * 3
    # The first kill takes replica-0; after its restart it is primary again (fail-back),
    # so the second takes it again, and the third as well: resolved at event time each.
    assert [e["resolved"] for e in kills] == ["replica-0"] * 3, kills

    # The checker can fail: one acknowledged write's row removed, another's doubled.
    replica_db = _replica_db(run_dir)
    run = knee.open_run(run_dir)
    cols = ["client", "request_id", "op", "status", "received_ns", "service"]
    frame = run.point_samples(0, cols)
    acked = frame[(frame["status"] == "ok") & frame["op"].isin([1, 2, 3, 4])]
    (c1, r1), (c2, r2) = acked[["client", "request_id"]].iloc[[0, -1]].itertuples(index=False)
    execute(replica_db, f"DELETE FROM oplog WHERE client = 'load-{c1}' AND request_id = {r1}")
    execute(
        replica_db,
        "INSERT INTO oplog(client, request_id, op, replica) "
        f"SELECT client, request_id, op, replica FROM oplog "
        f"WHERE client = 'load-{c2}' AND request_id = {r2}",
    )
    configs = {n["name"]: n["config"] for n in record["topology"]}
    events = run.events[run.events["point"] == 0].to_dict("records")
    again = chat_checker.check_point(frame, configs, events)
    assert (again["verdict"], again["lost"], again["applied_twice"]) == ("FAIL", 1, 1), again


def test_a_frozen_primary_resumed_after_a_takeover_applies_nothing_twice(
    tmp_path: Path, db: dict[str, Any]
) -> None:
    """replica-0 frozen (SIGSTOP) long enough for replica-1 to take over, then resumed: it
    still believes it is primary (its detector did not run), so both serve until replica-1
    sees it beat again. Requests waiting in the frozen replica's sockets are run when it
    resumes, after their retries were applied elsewhere; each write is applied once. On
    SQLite a freeze inside a transaction stops the whole database instead (below; the same
    with the lock held on purpose: test_chat.py's held write lock test)."""
    timeline = [(1.5, "freeze", "primary"), (3.5, "resume", "replica-0")]
    run_dir = _run(tmp_path, db, _events(*timeline), duration_s=6)
    check = _point(run_dir)["check"]
    assert check["verdict"] == "PASS", check
    assert check["acknowledged_writes"] > 100 and check["failures"]["freeze"] == 1
    record = json.loads((run_dir / "points" / "p000.json").read_text())
    (freeze,) = [e for e in record["events"] if e["action"] == "freeze"]
    assert (freeze["resolved"], freeze["outcome"]) == ("replica-0", "applied")
    events = knee.open_run(run_dir).events
    freeze_s = float(events.loc[events["kind"] == "freeze", "t_s"].iloc[0])
    resume_s = float(events.loc[events["kind"] == "resume", "t_s"].iloc[0])
    views = [_views(run_dir, f"replica-{i}") for i in range(3)]
    assert views[0] == [0], views  # replica-0's own view never changed
    run = knee.open_run(run_dir)
    samples = run.point_samples(0, ["received_ns", "status", "service", "attempts"])
    ok = samples[samples["status"] == "ok"]
    received_s = ok["received_ns"] / 1e9
    during = ok[(received_s > freeze_s) & (received_s < resume_s)]
    if "sqlite_path" in db and UNKNOWN in views[1]:
        # The freeze caught replica-0 inside a transaction, holding SQLite's one write lock
        # (3 runs in 30 on a loaded machine): until it resumes no replica can write, not
        # even a heartbeat, so none can take over. Each backup says it is cut off from the
        # state, and once the lock is free names replica-0 again and no other: the silence
        # it could not observe is no evidence. Only replica-0 answered.
        assert views[1] == views[2] == [0, UNKNOWN, 0], views
        assert (ok["service"] == 0).all()
    else:
        # replica-1 took over while replica-0 was frozen and gave the role back when it saw
        # replica-0 beat again, so after the resume; from replica-0's resume to replica-1's
        # give-back, both believed they were primary (a split brain).
        assert views[1][0] == 0 and set(views[1]) == {0, 1} and views[1][-1] == 0, views
        if during.empty:
            # The freeze caught every client's request inside replica-0's transaction (the
            # 3 clients run in step; 1 run in ~15 on PostgreSQL). Each retry at replica-1
            # inserts the same request's dedup key and waits for the frozen transaction that
            # inserted it first; at the resume that one commits, and the retry finds the
            # request applied. replica-1 took over but answered nothing before the resume.
            retried = ok[ok["attempts"] > 1]
            assert len(retried) == 3 and (retried["received_ns"] / 1e9 > resume_s).all()
        else:
            assert (during["service"] == 1).any()
    assert (ok.loc[received_s > resume_s, "service"] == 0).any()  # replica-0 serves again


UNKNOWN = 2**32 - 1  # a replica's view when it is cut off from the state


def _views(run_dir: Path, node: str) -> list[int]:
    """Who `node` believed was primary, each time its view changed (its first view first)."""
    events = pd.read_json(run_dir / "nodes" / f"{node}.p000.events.jsonl", lines=True)
    return [int(p) for p in events.loc[events["event"] == "primary", "primary"]]


def test_primary_is_checked_like_every_event_key(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    bad = [
        ('system = "chat"', 'action = "start"\nnode = "primary"', "events[0].node"),
        ('system = "echo"', 'action = "kill"\nnode = "primary"', "events[0].node"),
        ('system = "chat"', 'action = "pause"\nnode = "primary"', "events[0].action"),
    ]
    for system, event, key in bad:
        spec.write_text(
            f'[experiment]\nname = "x"\n{system}\n[load]\nschedule = "closed"\n'
            f"duration_s = 1\n[[events]]\nat_s = 1\n{event}\n"
        )
        with pytest.raises(SpecError) as err:
            load_spec(spec)
        assert err.value.key == key and "\n" not in str(err.value), str(err.value)
    spec.write_text(spec.read_text().replace('"pause"', '"freeze"'))
    assert load_spec(spec).events[0]["node"] == "primary"


def test_unavailability_counts_from_the_failure_to_a_reply_the_failed_process_did_not_send() -> (
    None
):
    events = [
        {"t_s": 1.0, "kind": "kill", "node": "replica-0"},
        {"t_s": 2.0, "kind": "start", "node": "replica-0"},
        {"t_s": 3.0, "kind": "freeze", "node": "replica-0"},
        {"t_s": 5.0, "kind": "kill", "node": "replica-1"},
    ]
    received_s = [0.5, 1.001, 1.5, 2.1, 3.0005, 3.4]  # 1.001 and 3.0005: in flight from 0
    replica = [0, 0, 1, 0, 0, 1]
    gaps = chat_checker.unavailability_ms(np.array(received_s), np.array(replica), events)
    assert np.allclose(gaps[:2], [500.0, 400.0]) and np.isnan(gaps[2])  # none after 5 s
    d = chat_checker.distribution(gaps)
    assert (d["count"], d["unanswered"]) == (2, 1)
    assert np.allclose([d["p50_ms"], d["p90_ms"], d["max_ms"]], [400.0, 500.0, 500.0])
