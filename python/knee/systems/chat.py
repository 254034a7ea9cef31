"""chat (report 001): a replicated login/logout/chat service over a database.

The nodes of a point: ``replica-0`` .. ``replica-{N-1}`` (``knee-node serve chat``, replica 0
the first primary) sharing one database (an SQLite file in the point's scratch folder, or a
fresh schema in the PostgreSQL server the spec names), then one ``load`` node
(``knee-node load chat``): closed-loop clients with their own failover. ``load.requests``
counts requests *per client*, as in the report (10,000 each).
"""

from __future__ import annotations

import os
import uuid

from knee import contract
from knee.config_values import ConfigTable, integer, number
from knee.params import Param, Point, RuleError, Sections, from_node
from knee.systems.base import NodePlan, System

#: How an experiment's events name the nodes.
LOAD_NODE = "load"


def replica_name(i: int) -> str:
    return f"replica-{i}"


def _chat_rule(s: Sections) -> None:
    load, server = s["load"], s["server"]
    if load["schedule"] != "closed":
        raise RuleError("load.schedule", "chat clients run a closed loop: use 'closed'")
    if load["think"] != "fixed":
        raise RuleError("load.think", "chat clients pause a fixed think_ms between requests")
    if server["database"] == "postgres":
        if not server["postgres_url"]:
            raise RuleError("server.postgres_url", "missing (database 'postgres' needs a URL)")
        postgres_url(server)  # a "$VARIABLE" must be set
    if number(server, "failure_timeout_ms") <= number(server, "heartbeat_ms"):
        raise RuleError("server.failure_timeout_ms", "must be above heartbeat_ms")


def postgres_url(server: ConfigTable) -> str:
    """The server's PostgreSQL URL; a value "$NAME" is read from the environment variable
    NAME, so a shipped spec can use a cluster started for the run (scripts/postgres)."""
    url = str(server["postgres_url"])
    if not url.startswith("$"):
        return url
    value = os.environ.get(url[1:], "")
    if not value:
        raise RuleError(
            "server.postgres_url",
            f"{url} is not set (export it: a PostgreSQL URL, e.g. from scripts/postgres start)",
        )
    return value


def chat_topology(point: Point) -> list[NodePlan]:
    server, load, driver = point.server, point.load, point.driver
    db: ConfigTable
    if server["database"] == "postgres":
        # A fresh schema per point, so points (and runs) never see each other's rows.
        db = {
            "postgres_url": postgres_url(server),
            "postgres_schema": f"knee_chat_{uuid.uuid4().hex[:16]}",
        }
    else:
        db = {"sqlite_path": "{scratch}/chat.db"}
    replicas = [
        NodePlan(
            replica_name(i),
            "serve",
            {
                "server": {
                    "replica": i,
                    "heartbeat_ms": server["heartbeat_ms"],
                    "failure_timeout_ms": server["failure_timeout_ms"],
                    "threads": server["threads"],
                    "dedup_window": server["dedup_window"],
                    **db,
                }
            },
        )
        for i in range(integer(server, "replicas"))
    ]
    client: ConfigTable = {
        "replicas": [f"{{addr:{p.name}}}" for p in replicas],
        "clients": load["clients"],
        "think_ms": load["think_ms"],
        "timeout_ms": load["timeout_ms"],
        "retries": driver["retries"],
        "backoff_ms": driver["backoff_ms"],
        "warmup_s": load["warmup_s"],
        "seed": point.experiment["seed"],
        "driver": {
            "mix": driver["mix"],
            "reply_bytes": driver["reply_bytes"],
            "rooms": driver["rooms"],
            "message_bytes": driver["message_bytes"],
            "client_prefix": LOAD_NODE,
        },
    }
    if load["requests"] is not None:
        client["requests_per_client"] = load["requests"]
    if load["duration_s"] is not None:
        client["duration_s"] = load["duration_s"]
    return [*replicas, NodePlan(LOAD_NODE, "load", client, records=True)]


def _database_part(server: ConfigTable) -> tuple[str, str, float | None]:
    """The database as one part: on SQLite every transaction takes its one write lock (one
    at a time); PostgreSQL runs many at once, how many the run cannot see."""
    if server.get("database", "sqlite") == "sqlite":
        return "database", "the database (SQLite, one transaction at a time)", 1.0
    return "database", "the database (PostgreSQL)", None


SYSTEM = System(
    name="chat",
    parts=(("replica-*", "replica {n}"),),
    detail_part=_database_part,
    summary="replicated login/logout/chat service over SQLite or PostgreSQL (report 001)",
    server={
        "replicas": Param(
            "int",
            3,
            "replicas; replica-0 is the first primary",
            min=1,
            max=contract.CHAT_MAX_REPLICAS,
        ),
        "heartbeat_ms": from_node("chat", "server.heartbeat_ms", "fault detector heartbeat period"),
        "failure_timeout_ms": from_node(
            "chat", "server.failure_timeout_ms", "a replica silent this long is suspected dead"
        ),
        "threads": from_node(
            "chat", "server.threads", "0 = serve on each connection's thread; N = a pool"
        ),
        "database": Param("str", "sqlite", "where the state lives", choices=("sqlite", "postgres")),
        "postgres_url": from_node(
            "chat",
            "server.postgres_url",
            "PostgreSQL URL (database = 'postgres'); '$NAME': from variable NAME",
        ),
        "dedup_window": from_node(
            "chat",
            "server.dedup_window",
            "dedup keys kept per client (its newest request ids; older ids are refused)",
        ),
    },
    driver={
        "mix": from_node(
            "chat",
            "driver.mix",
            "login_logout (the report's measurement) or session (login, join, post, fetch, logout)",
        ),
        "reply_bytes": from_node(
            "chat", "driver.reply_bytes", "each reply is padded to this many bytes"
        ),
        "rooms": from_node("chat", "driver.rooms", "client i chats in room i % rooms"),
        "message_bytes": from_node("chat", "driver.message_bytes", "posted message size"),
        "retries": from_node("chat", "client.retries", "attempts after the first, on failure"),
        "backoff_ms": from_node(
            "chat", "client.backoff_ms", "first retry backoff (doubles, at most max_backoff_ms)"
        ),
    },
    rules=(_chat_rule,),
    topology=chat_topology,
    reports_primary=True,
)
