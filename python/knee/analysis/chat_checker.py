"""chat's exactly-once checker: a point's acknowledged writes against the database's own
tables, and the unavailability after each replica failure.

The runner calls `check_point` (through `knee.analysis.chaos.check`, every system's checker
path) when a chat point ends, before its scratch folder (the SQLite file) is removed; the
verdict goes into summary.json (the point's ``check``) and the report's chat section. The
database is read directly, not through the replicas: the ``oplog`` table has one row per
application of a write (no uniqueness rule), so

- *lost* = a write a client saw acknowledged (status ok) with no ``oplog`` row;
- *applied twice* = a (client, request id) with more than one ``oplog`` row, acknowledged
  or not.

SQLite is read with Python's sqlite3; PostgreSQL with ``psql`` (``COPY ... TO STDOUT``), the
client scripts/postgres installs with the server, so knee needs no driver package.
"""

from __future__ import annotations

import io
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from knee.contract import CHAT_WRITE_OPS as WRITE_OPS
from knee.results import RunEvent
from knee.stats.summary import Gaps, SystemCheck

#: Timeline events that take a replica away (the unavailability is measured from each).
DOWN_EVENTS = ("kill", "stop", "freeze")
#: Those that bring it back.
UP_EVENTS = ("start", "resume")
#: How long psql may take to dump a point's oplog (a full sweep point has ~10^5 rows).
PSQL_TIMEOUT_S = 120
_SCHEMA = re.compile(r"[a-z0-9_]{1,63}")
_REPLICA = re.compile(r"replica-[0-9]+")
#: The sample columns the checker reads.
_COLUMNS = ("status", "received_ns", "service", "op", "client", "request_id")
_APPLIED_SQL = (
    "SELECT client, request_id, COUNT(*) AS applied FROM oplog GROUP BY client, request_id"
)


def applications(db: dict[str, Any]) -> pd.DataFrame:
    """How many times the database applied each (client, request id): ``oplog`` grouped,
    from the replicas' database config (``sqlite_path``, or ``postgres_url`` and
    ``postgres_schema``)."""
    if db.get("postgres_url"):
        return _postgres(str(db["postgres_url"]), str(db.get("postgres_schema", "knee_chat")))
    return _sqlite(Path(db["sqlite_path"]))


def _sqlite(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such database")
    # Not read-only: a killed replica may leave a WAL that only a writer can recover.
    with sqlite3.connect(path) as con:
        return pd.read_sql_query(_APPLIED_SQL, con)


def _postgres(url: str, schema: str) -> pd.DataFrame:
    if not _SCHEMA.fullmatch(schema):
        raise ValueError(f"postgres_schema {schema!r}: expected [a-z0-9_]")
    psql = psql_binary()
    query = _APPLIED_SQL.replace("FROM oplog", f"FROM {schema}.oplog")  # checked above
    out = subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c",
         f"COPY ({query}) TO STDOUT WITH (FORMAT csv, HEADER)"],
        capture_output=True,
        text=True,
        timeout=PSQL_TIMEOUT_S,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"psql: {out.stderr.strip().splitlines()[-1:]}")
    return pd.read_csv(io.StringIO(out.stdout), dtype={"client": str})


def psql_binary() -> str:
    """psql on the PATH, else the newest Debian cluster's (next to its initdb)."""
    if found := shutil.which("psql"):
        return found
    clusters = sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"))
    if not clusters:
        raise FileNotFoundError("psql not found (install PostgreSQL's client)")
    return str(clusters[-1])


class Integrity(TypedDict):
    acknowledged_writes: int
    applied_writes: int
    lost: int
    applied_twice: int


def integrity(acked: pd.DataFrame, applied: pd.DataFrame) -> Integrity:
    """Lost and applied-twice counts: `acked` has the acknowledged writes' ``client`` (its
    name in the database) and ``request_id``; `applied` is `applications`."""
    keys = ["client", "request_id"]
    joined = acked[keys].merge(applied, on=keys, how="left")
    return {
        "acknowledged_writes": len(acked),
        "applied_writes": int(applied["applied"].sum()),
        "lost": int(joined["applied"].isna().sum()),
        "applied_twice": int((applied["applied"] > 1).sum()),
    }


def unavailability_ms(
    ok_received_s: np.ndarray, ok_replica: np.ndarray, events: Sequence[RunEvent]
) -> np.ndarray:
    """For each failure (kill, stop or freeze of a replica) in `events`, the ms from it to
    the first successful reply after it (NaN when none came) that the failed process did not
    send: from another replica, or from the same one once started or resumed again. A reply
    the failed replica wrote just before the signal landed is not a recovery."""
    received = np.asarray(ok_received_s, dtype=float)
    replica = np.asarray(ok_replica)
    out = []
    for i, e in enumerate(events):
        if e["kind"] not in DOWN_EVENTS:
            continue
        t, node = float(e["t_s"]), str(e["node"])
        later = events[i + 1 :]
        back = [float(b["t_s"]) for b in later if b["node"] == node and b["kind"] in UP_EVENTS]
        back_s = min(back, default=np.inf)
        index = int(node.removeprefix("replica-")) if _REPLICA.fullmatch(node) else -1
        ok = (received > t) & ((replica != index) | (received > back_s))
        out.append((received[ok].min() - t) * 1e3 if ok.any() else np.nan)
    return np.array(out, dtype=float)


def distribution(gaps_ms: np.ndarray) -> Gaps:
    """count, p50, p90 and max of the gaps (knee's order statistic x_(ceil(n q))); the
    failures no reply followed are counted apart (``unanswered``)."""
    done = gaps_ms[~np.isnan(gaps_ms)]
    if not len(done):
        return {"count": 0, "unanswered": int(len(gaps_ms))}
    q = np.quantile(done, [0.5, 0.9], method="inverted_cdf")
    return {
        "count": int(len(done)),
        "unanswered": int(len(gaps_ms) - len(done)),
        "p50_ms": float(q[0]),
        "p90_ms": float(q[1]),
        "max_ms": float(done.max()),
    }


def check_point(
    samples: pd.DataFrame, configs: dict[str, dict[str, Any]], events: list[RunEvent]
) -> SystemCheck:
    """The verdict on one point: `samples` as `knee.results.point_frame` gives them, the
    configs the nodes ran with (the replicas' database, the client's name prefix) and the
    point's timeline events (``t_s``, ``kind``, ``node``)."""
    replica = next(c["server"] for c in configs.values() if "server" in c)
    load = next(c for c in configs.values() if "replicas" in c)
    prefix = load.get("driver", {}).get("client_prefix", "load")
    database = "postgres" if replica.get("postgres_url") else "sqlite"
    downs = [e for e in events if e["kind"] in DOWN_EVENTS]
    out: SystemCheck = {
        "name": "chat exactly-once",
        "database": database,
        "failures": {k: sum(e["kind"] == k for e in downs) for k in DOWN_EVENTS},
    }
    if samples.empty:  # a point without one sample: nothing acknowledged
        samples = pd.DataFrame({c: pd.Series(dtype="int64") for c in _COLUMNS})
    ok = samples[samples["status"] == "ok"]
    ups = [e for e in events if e["kind"] in DOWN_EVENTS + UP_EVENTS]
    gaps = unavailability_ms(
        ok["received_ns"].to_numpy() / 1e9,
        ok["service"].to_numpy(),
        sorted(ups, key=lambda e: float(e["t_s"])),
    )
    out["unavailability"] = distribution(gaps)
    out["unavailability_each_ms"] = [None if np.isnan(g) else round(float(g), 3) for g in gaps]
    try:
        applied = applications(replica)
    except (OSError, RuntimeError, ValueError, sqlite3.Error, subprocess.SubprocessError) as e:
        reason = f"reading the {database} database: {e}"
        return {**out, "verdict": "UNCHECKED", "reason": reason, "detail": reason}
    writes = ok[ok["op"].isin(list(WRITE_OPS))]
    acked = pd.DataFrame(
        {
            "client": prefix + "-" + writes["client"].astype(str),
            "request_id": writes["request_id"].astype(np.int64),
        }
    )
    counts = integrity(acked, applied.astype({"client": str, "request_id": np.int64}))
    passed = counts["lost"] == 0 and counts["applied_twice"] == 0
    out |= counts
    return {**out, "verdict": "PASS" if passed else "FAIL", "detail": _detail(out)}


def _detail(check: SystemCheck) -> str:
    """The verdict's numbers in one line (the runner prints it under its table)."""
    gaps, failures = check["unavailability"], sum(check["failures"].values())
    line = (
        f"{check['lost']} lost, {check['applied_twice']} applied twice of "
        f"{check['acknowledged_writes']} acknowledged writes ({check['database']}'s tables); "
        f"{failures} replica failures"
    )
    if gaps["count"]:
        line += (
            f", unavailability p50 {gaps['p50_ms']:.0f} ms, p90 {gaps['p90_ms']:.0f} ms, "
            f"max {gaps['max_ms']:.0f} ms"
        )
    return line
