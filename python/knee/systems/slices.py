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

from knee import contract
from knee.config_values import ConfigTable, ConfigValue, integer
from knee.contract import SLICES_MAX_PNS as MAX_PNS
from knee.params import Param, Point, RuleError, Sections, from_node
from knee.systems.base import NodePlan, System, load_config

#: The client's default image: 52 x 52 RGB pixels (the report's were about 7-9 KB).
DEFAULT_IMAGE_BYTES = contract.key("slices", "driver.image_bytes")["default"]
#: Items in flight the slices client takes at most (its own bound on load.max_outstanding).
MAX_OUTSTANDING = contract.maximum("slices", "load.max_outstanding")
#: The longest ack interval the client takes.
MAX_ACK_MS = contract.key("slices", "driver.ack_ms")["max"]
#: The rules of the derived defaults (knee-node describe says them: `derived`): a spec's
#: heartbeat_ms = 0 beats this many times per failure_timeout_ms, and its ack_ms = 0 is
#: this fraction of failure_timeout_ms - heartbeat_ms.
BEATS_PER_TIMEOUT = contract.SYSTEMS["slices"]["constants"]["beats_per_timeout"]
ACKS_PER_ROOM = contract.SYSTEMS["slices"]["constants"]["acks_per_room"]


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
    if integer(load, "max_outstanding") > MAX_OUTSTANDING:  # the client node refuses more
        raise RuleError(
            "load.max_outstanding", f"at most {MAX_OUTSTANDING:,} items in flight in slices"
        )
    if integer(driver, "image_bytes") % 3:
        raise RuleError(
            "driver.image_bytes", f"RGB: a multiple of 3 bytes, got {driver['image_bytes']}"
        )
    if integer(server, "pns_at_start") > integer(server, "pns"):
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
    if beat_ms >= integer(server, "failure_timeout_ms"):
        raise RuleError(
            "server.failure_timeout_ms",
            f"must exceed heartbeat_ms ({beat_ms:g}): a PN is declared dead "
            "after missed heartbeats",
        )
    room_ms = integer(server, "failure_timeout_ms") - beat_ms
    if (
        2 * ack_ms(beat_ms, integer(server, "failure_timeout_ms"), integer(driver, "ack_ms"))
        > room_ms
    ):
        raise RuleError(
            "driver.ack_ms",
            f"at most half of failure_timeout_ms - heartbeat_ms ({room_ms:g} ms): a PN that "
            "takes over a crashed one's slices must have heard the client's acks first",
        )


def heartbeat_ms(server: ConfigTable) -> int:
    """The PNs' heartbeat period: `server.heartbeat_ms`, or (0, the default) a fifth of
    `server.failure_timeout_ms`, so that four beats in a row may be lost or late before the
    LB calls a PN crashed: 100 ms at the default 500 ms, 400 ms at the 2 s the experiments
    set for quarter-core PNs on a busy machine. Every beat costs the PN CPU (a put, a wake
    of zenoh's transmit thread, a loopback send; measured in bench/README.md, "Slices goals"), so
    beating faster than the timeout needs buys nothing and costs the PN's throughput."""
    if server["heartbeat_ms"]:
        return integer(server, "heartbeat_ms")
    return max(1, integer(server, "failure_timeout_ms") // BEATS_PER_TIMEOUT)


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
    return min(MAX_ACK_MS, max(1, (failure_timeout_ms - heartbeat_ms) // ACKS_PER_ROOM))


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
    common: ConfigTable = {"prefix": prefix, "heartbeat_ms": heartbeat_ms(server)}
    if server["balance"]:
        lb: ConfigTable = {
            "role": "lb",
            "slices": server["slices"],
            "failure_timeout_ms": server["failure_timeout_ms"],
            "balance": True,
            "connect": [f"{{addr:{anchor}}}"] if anchor == "router" else [],
            **common,
        }
        plans.append(NodePlan("lb", "serve", {"server": lb}))
    pns = integer(server, "pns")
    for i in range(pns):
        pn: ConfigTable = {
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
            pn["static_slices"] = list[ConfigValue](
                static_slices(i, pns, integer(server, "slices"))
            )
        started = i < integer(server, "pns_at_start")
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
    connect: list[ConfigValue] = [f"{{addr:{anchor}}}"]
    if anchor != "router":  # the client also reaches the PNs it starts with directly
        connect += [
            f"{{addr:pn-{i}}}"
            for i in range(integer(server, "pns_at_start"))
            if f"pn-{i}" != anchor
        ]
    client: ConfigTable = {
        "prefix": prefix,
        "connect": connect,
        "slices": server["slices"],
        "image_bytes": driver["image_bytes"],
        "retries": driver["retries"],
        "sender": driver["sender"],
        "junk_every": driver["junk_every"],
        "ack_ms": ack_ms(
            heartbeat_ms(server),
            integer(server, "failure_timeout_ms"),
            integer(driver, "ack_ms"),
        ),
    }
    plans.append(
        NodePlan(
            "client",
            "load",
            _load_config(load, client, seed=integer(point.experiment, "seed")),
            records=True,
        )
    )
    return plans


def _load_config(load: ConfigTable, driver: ConfigTable, seed: int) -> ConfigTable:
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
        "slices": from_node(
            "slices",
            "server.slices",
            "slices S (an item's slice is id mod S)",
            default=10,  # every node requires it
        ),
        "pns": Param("int", 5, "processing nodes planned (pn-0 .. pn-{N-1})", min=1, max=MAX_PNS),
        "pns_at_start": Param(
            "int",
            1,
            "PNs started with the point; the others join through [[events]] action 'start'",
            min=1,
            max=MAX_PNS,
        ),
        "threads": from_node(
            "slices", "server.threads", "worker threads per PN (0: the cores available to it)"
        ),
        "work_repeat": from_node(
            "slices",
            "server.work_repeat",
            "grayscale computed this many times per item: the capacity knob where no CPU "
            "limit can be set",
        ),
        "queue_max": from_node(
            "slices",
            "server.queue_max",
            "items queued per PN beyond this are dropped (counted; the client re-publishes)",
        ),
        "heartbeat_ms": from_node(
            "slices",
            "server.heartbeat_ms",
            "PN -> LB heartbeat (its load) period; 0: a fifth of failure_timeout_ms",
        ),
        "give_delay_ms": from_node(
            "slices",
            "server.give_delay_ms",
            "fault injection: a giver waits this long between stopping a slice and sending "
            "its handoff, so a kill can land mid-handoff (0: none)",
        ),
        "failure_timeout_ms": from_node(
            "slices", "server.failure_timeout_ms", "a PN silent this long is declared crashed"
        ),
        "balance": from_node(
            "slices",
            "server.balance",
            "true: the LB and its slice moves; false: the baseline, a static assignment "
            "(slice s on PN s mod N) and no monitoring traffic",
        ),
        "router": Param(
            "bool", False, "a Zenoh router every node connects to (for runs across hosts)"
        ),
    },
    driver={
        "image_bytes": from_node(
            "slices",
            "driver.image_bytes",
            "RGB bytes per image (a multiple of 3; the report's were about 7-9 KB)",
        ),
        "retries": from_node(
            "slices",
            "driver.retries",
            "re-publications of an item not acknowledged within load.timeout_ms (same id)",
        ),
        "ack_ms": from_node(
            "slices",
            "driver.ack_ms",
            "the client tells the PNs the ids it was answered for within this long (on its "
            "next items, or on P/acks/<sender> if none goes out in time; a crash takeover "
            "skips them); 0: a quarter of server.failure_timeout_ms - the heartbeat period",
        ),
        "sender": from_node("slices", "driver.sender", "the client's sender id"),
        "junk_every": from_node(
            "slices",
            "driver.junk_every",
            "fault injection: after every Nth item a malformed message on an item or control "
            "topic, which the PNs and the LB must count and drop (0: none)",
        ),
    },
    rules=(_slices_rule,),
    topology=_topology,
)
