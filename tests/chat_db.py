"""The chat tests' databases: a fresh SQLite file or PostgreSQL schema per test, and direct
SQL on either (the tests judge the replicas by the database's own tables).

PostgreSQL comes from KNEE_TEST_PG_URL (scripts/test starts a throwaway cluster and exports
it). Without it the PostgreSQL cases are skipped with a reason that says how to run them, and
a warning; under KNEE_TEST_REQUIRE_PG=1 (set by scripts/test) or in CI that is a failure.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import uuid
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from knee.analysis.chat_checker import psql_binary

DATABASES = ["sqlite", "postgres"]
NO_PG = (
    "PostgreSQL chat tests NOT RUN: KNEE_TEST_PG_URL is not set. Run scripts/test (it starts "
    "a cluster), or: export KNEE_TEST_PG_URL=$(scripts/postgres start /tmp/knee-pg)"
)


def database(kind: str, tmp_path: Path) -> dict[str, Any]:
    """The database config of one test's replicas: a fresh SQLite file or PostgreSQL schema."""
    if kind == "sqlite":
        return {"sqlite_path": str(tmp_path / "chat.db")}
    url = os.environ.get("KNEE_TEST_PG_URL")
    if not url:
        if os.environ.get("KNEE_TEST_REQUIRE_PG") == "1" or os.environ.get("CI") == "true":
            pytest.fail(NO_PG)
        warnings.warn(NO_PG, stacklevel=2)
        pytest.skip(NO_PG)
    return {"postgres_url": url, "postgres_schema": f"t_{uuid.uuid4().hex[:12]}"}


def rows(db: dict[str, Any], sql: str) -> pd.DataFrame:
    """The result of one query, run on the database itself (sqlite3, or psql in the test's
    schema)."""
    if "sqlite_path" in db:
        with sqlite3.connect(db["sqlite_path"]) as con:
            return pd.read_sql_query(sql, con)
    psql = psql_binary()
    copy = f"SET search_path TO {db['postgres_schema']}; COPY ({sql}) TO STDOUT WITH CSV HEADER"
    out = subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", db["postgres_url"], "-c", copy],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return pd.read_csv(io.StringIO(out.stdout))


def execute(db: dict[str, Any], sql: str) -> None:
    """Runs one statement that changes the database (a test tampering with it)."""
    if "sqlite_path" in db:
        with sqlite3.connect(db["sqlite_path"]) as con:
            con.execute(sql)
        return
    stmt = f"SET search_path TO {db['postgres_schema']}; {sql}"
    subprocess.run(
        [psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", db["postgres_url"], "-c", stmt],
        capture_output=True,
        timeout=60,
        check=True,
    )
