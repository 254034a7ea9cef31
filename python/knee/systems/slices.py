"""slices (report 003): pub/sub image processing on Zenoh whose load balancer moves slices
to joining processing nodes without losing or repeating an item.

A point runs, in order: the Zenoh router (``server.router``), the load balancer ``lb``
(absent in the baseline, ``server.balance = false``), the processing nodes ``pn-0`` ..
``pn-{N-1}`` and the client ``client`` (``knee-node load slices``, the recorder). The PNs
beyond ``server.pns_at_start`` are planned but not started (``NodePlan.start = False``): the
spec's ``[[events]]`` start them at their join times. See docs/slices.md.
"""

from __future__ import annotations

import uuid
from typing import Any

from knee.contract import SLICES_MAX_IMAGE_BYTES as MAX_IMAGE_BYTES
from knee.contract import SLICES_MAX_PNS as MAX_PNS
from knee.contract import SLICES_MAX_SLICES as MAX_SLICES
from knee.params import Param, Point, RuleError, Sections
from knee.systems.base import NodePlan, System, load_config

#: 52 x 52 RGB pixels: the report's images were about 7-9 KB (1.4 MB/s at ~170 items/s).
DEFAULT_IMAGE_BYTES = 52 * 52 * 3


#: Items in flight the slices client takes at most (knee-node's slices client.rs).
MAX_OUTSTANDING = 1_000_000
#: The longest ack interval the client takes (client.rs MAX_ACK_MS; test_contract holds
#: the schema's max to it).
MAX_ACK_MS = 10_000
#: server.heartbeat_ms = 0: the PNs beat this many times per server.failure_timeout_ms.
BEATS_PER_TIMEOUT = 5


def items_per_s(mb_per_s: float, image_bytes: int) -> float:
    """The item rate that publishes `mb_per_s` (10^6 bytes/s) of images, as the report's
    rates are given (1.4, 4 and 10 MB/s)."""
    return mb_per_s * 1e6 / image_bytes


def _slices_rule(s: Sections) -> None:
    server, driver, load = s["server"], s["driver"], s["load"]
    if load["schedule"] not in ("poisson", "constant", "steps"):
        raise RuleError(
            "load.schedule",
            "the client publishes open loop (poisson, constant or steps), "
            f"got {load['schedule']!r}",
        )
    if load["generators"] != 1:
        raise RuleError("load.generators", "slices has one client (one sender id): use 1")
    if load["max_outstanding"] > MAX_OUTSTANDING:  # the client node refuses more
        raise RuleError(
            "load.max_outstanding", f"at most {MAX_OUTSTANDING:,} items in flight in slices"
        )
    if driver["image_bytes"] % 3:
        raise RuleError(
            "driver.image_bytes", f"RGB: a multiple of 3 bytes, got {driver['image_bytes']}"
        )
    if server["pns_at_start"] > server["pns"]:
        raise RuleError(
            "server.pns_at_start",
            f"{server['pns_at_start']} PNs cannot start out of {server['pns']} (server.pns)",
        )
    if not server["balance"] and server["pns_at_start"] != server["pns"]:
        raise RuleError(
            "server.balance",
            "the baseline (no LB) assigns slices statically: every PN starts at once "
            "(pns_at_start = pns)",
        )
    beat_ms = heartbeat_ms(server)
    if beat_ms >= server["failure_timeout_ms"]:
        raise RuleError(
            "server.failure_timeout_ms",
            f"must exceed heartbeat_ms ({beat_ms:g}): a PN is declared dead "
            "after missed heartbeats",
        )
    room_ms = server["failure_timeout_ms"] - beat_ms
    if 2 * ack_ms(beat_ms, server["failure_timeout_ms"], driver["ack_ms"]) > room_ms:
        raise RuleError(
            "driver.ack_ms",
            f"at most half of failure_timeout_ms - heartbeat_ms ({room_ms:g} ms): a PN that "
            "takes over a crashed one's slices must have heard the client's acks first",
        )


def heartbeat_ms(server: dict[str, Any]) -> int:
    """The PNs' heartbeat period: `server.heartbeat_ms`, or (0, the default) a fifth of
    `server.failure_timeout_ms`, so that four beats in a row may be lost or late before the
    LB calls a PN crashed: 100 ms at the default 500 ms, 400 ms at the 2 s the experiments
    set for quarter-core PNs on a busy machine. Every beat costs the PN CPU (a put, a wake
    of zenoh's transmit thread, a loopback send; measured in bench/README.md, "Slices goals"), so
    beating faster than the timeout needs buys nothing and costs the PN's throughput."""
    if server["heartbeat_ms"]:
        return int(server["heartbeat_ms"])
    return max(1, int(server["failure_timeout_ms"]) // BEATS_PER_TIMEOUT)


def ack_ms(heartbeat_ms: int, failure_timeout_ms: int, asked_ms: int = 0) -> int:
    """The client's ack interval: `asked_ms`, or (0) a quarter of failure_timeout_ms -
    heartbeat_ms. A crash takeover comes failure_timeout_ms after the dead PN's last
    heartbeat, so at least failure_timeout_ms - heartbeat_ms after its last reply; the
    client's acks of those replies must reach the taker first (the rule allows half of
    that, for their delivery), or the taker does again items the client already has. A
    quarter keeps that margin and leaves the acks the most room to ride on the client's
    items: an ack message, which every PN hears, goes out only when no item took them in
    time (at the defaults, 100 ms)."""
    if asked_ms:
        return asked_ms
    return min(MAX_ACK_MS, max(1, (failure_timeout_ms - heartbeat_ms) // 4))


def static_slices(pn: int, pns: int, slices: int) -> list[int]:
    """The baseline's fixed assignment: slice s belongs to PN s mod pns."""
    return list(range(pn, slices, pns))


def _topology(point: Point) -> list[NodePlan]:
    server, driver, load = point.server, point.driver, point.load
    # A fresh key space per point: a late sample of an earlier point never reaches this one.
    prefix = f"knee/slices/{uuid.uuid4().hex}"
    plans: list[NodePlan] = []
    if server["router"]:
        plans.append(NodePlan("router", "serve", {"server": {"role": "router"}}))
        anchor = "router"
    else:
        anchor = "lb" if server["balance"] else "pn-0"
    common = {"prefix": prefix, "heartbeat_ms": heartbeat_ms(server)}
    if server["balance"]:
        lb = {
            "role": "lb",
            "slices": server["slices"],
            "failure_timeout_ms": server["failure_timeout_ms"],
            "balance": True,
            "connect": [f"{{addr:{anchor}}}"] if anchor == "router" else [],
            **common,
        }
        plans.append(NodePlan("lb", "serve", {"server": lb}))
    pns = server["pns"]
    for i in range(pns):
        pn: dict[str, Any] = {
            "role": "pn",
            "pn": i,
            "slices": server["slices"],
            "threads": server["threads"],
            "work_repeat": server["work_repeat"],
            "queue_max": server["queue_max"],
            "give_delay_ms": server["give_delay_ms"],
            # Every peer reaches the others through the anchor (gossip does the rest).
            "connect": [] if f"pn-{i}" == anchor else [f"{{addr:{anchor}}}"],
            **common,
        }
        if not server["balance"]:
            pn["static_slices"] = static_slices(i, pns, server["slices"])
        started = i < server["pns_at_start"]
        plans.append(
            NodePlan(
                f"pn-{i}",
                "serve",
                {"server": pn},
                start=started,
                # Its log of processed items, the checker's input: raw/pNNN-pn-i.log.
                outputs={"server.log_path": f"pn-{i}.log"},
            )
        )
    connect = [f"{{addr:{anchor}}}"]
    if anchor != "router":  # the client also reaches the PNs it starts with directly
        connect += [
            f"{{addr:pn-{i}}}" for i in range(server["pns_at_start"]) if f"pn-{i}" != anchor
        ]
    client: dict[str, Any] = {
        "prefix": prefix,
        "connect": connect,
        "slices": server["slices"],
        "image_bytes": driver["image_bytes"],
        "retries": driver["retries"],
        "sender": driver["sender"],
        "junk_every": driver["junk_every"],
        "ack_ms": ack_ms(heartbeat_ms(server), server["failure_timeout_ms"], driver["ack_ms"]),
    }
    plans.append(
        NodePlan(
            "client",
            "load",
            _load_config(load, client, seed=int(point.experiment["seed"])),
            records=True,
        )
    )
    return plans


def _load_config(load: dict[str, Any], driver: dict[str, Any], seed: int) -> dict[str, Any]:
    """The client's load config: base.load_config's (its target and connections unused: the
    client reaches the PNs through Zenoh)."""
    return load_config(load, driver, target="", seed=seed)


SYSTEM = System(
    name="slices",
    parts=(
        ("lb", "the LB"),
        ("pn-*", "PN {n}"),
        ("router", "the router"),
        ("client", "the client"),
    ),
    summary="pub/sub image processing whose LB moves slices to joining PNs (report 003)",
    server={
        "slices": Param("int", 10, "slices S (an item's slice is id mod S)", min=1, max=MAX_SLICES),
        "pns": Param("int", 5, "processing nodes planned (pn-0 .. pn-{N-1})", min=1, max=MAX_PNS),
        "pns_at_start": Param(
            "int",
            1,
            "PNs started with the point; the others join through [[events]] action 'start'",
            min=1,
            max=MAX_PNS,
        ),
        "threads": Param(
            "int", 0, "worker threads per PN (0: the cores available to it)", min=0, max=256
        ),
        "work_repeat": Param(
            "int",
            1,
            "grayscale computed this many times per item: the capacity knob where no CPU "
            "limit can be set",
            min=1,
            max=1_000_000,
        ),
        "queue_max": Param(
            "int",
            10_000,
            "items queued per PN beyond this are dropped (counted; the client re-publishes)",
            min=1,
            max=1_000_000,
        ),
        "heartbeat_ms": Param(
            "int",
            0,
            "PN -> LB heartbeat (its load) period; 0: a fifth of failure_timeout_ms",
            min=0,
            max=60_000,
        ),
        "give_delay_ms": Param(
            "int",
            0,
            "fault injection: a giver waits this long between stopping a slice and sending "
            "its handoff, so a kill can land mid-handoff (0: none)",
            min=0,
            max=60_000,
        ),
        "failure_timeout_ms": Param(
            "int", 500, "a PN silent this long is declared crashed", min=1, max=600_000
        ),
        "balance": Param(
            "bool",
            True,
            "true: the LB and its slice moves; false: the baseline, a static assignment "
            "(slice s on PN s mod N) and no monitoring traffic",
        ),
        "router": Param(
            "bool", False, "a Zenoh router every node connects to (for runs across hosts)"
        ),
    },
    driver={
        "image_bytes": Param(
            "int",
            DEFAULT_IMAGE_BYTES,
            "RGB bytes per image (a multiple of 3; the report's were about 7-9 KB)",
            min=3,
            max=MAX_IMAGE_BYTES,
        ),
        "retries": Param(
            "int",
            10,
            "re-publications of an item not acknowledged within load.timeout_ms (same id)",
            min=0,
            max=100,  # knee-node's slices client takes at most this (MAX_RETRIES)
        ),
        "ack_ms": Param(
            "int",
            0,
            "the client tells the PNs the ids it was answered for within this long (on its "
            "next items, or on P/acks/<sender> if none goes out in time; a crash takeover "
            "skips them); 0: a quarter of server.failure_timeout_ms - the heartbeat period",
            min=0,
            max=MAX_ACK_MS,
        ),
        "sender": Param("int", 1, "the client's sender id", min=0, max=(1 << 32) - 1),
        "junk_every": Param(
            "int",
            0,
            "fault injection: after every Nth item a malformed message on an item or control "
            "topic, which the PNs and the LB must count and drop (0: none)",
            min=0,
        ),
    },
    rules=(_slices_rule,),
    topology=_topology,
)
