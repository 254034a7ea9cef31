"""stream (report 000): block services on UDP that emulate lossy links, and a FrameAccessor
client that fetches frames from one of them (serial) or from several at once (parallel).

A point starts the services its client uses (``service-<i>``, i = the service's index in
``server.services``) and then the client (``client``), which records one sample per block
request. See docs/stream.md.
"""

from __future__ import annotations

from typing import Any

from knee import contract
from knee.config_values import (
    ConfigTable,
    ConfigValue,
    as_pair,
    as_table,
    integer,
    items,
    number,
    text,
)
from knee.contract import STREAM_BLOCK_SIDE_PX as BLOCK_SIDE_PX
from knee.contract import STREAM_MAX_SERVICES as MAX_SERVICES
from knee.params import Param, Point, RuleError, Sections, from_node
from knee.systems.base import NodePlan, System

_LIMITS = contract.SYSTEMS["stream"]["constants"]
#: The delay and loss kinds, as knee-node's stream server names them.
DELAY_KINDS = tuple(contract.SYSTEMS["stream"]["keys"]["server.delay.kind"]["choices"])
LOSS_KINDS = tuple(contract.SYSTEMS["stream"]["keys"]["server.loss.kind"]["choices"])
#: A stream's largest frame side, a delay's and a lognormal spread's largest values (the
#: block service's own bounds).
MAX_SIDE_PX = _LIMITS["max_side_px"]
MAX_DELAY_MS = _LIMITS["max_delay_ms"]
MAX_SPREAD = _LIMITS["max_spread"]
#: The longest block timeout knee-node's stream client takes: the run's end waits up to
#: twice it for the last replies.
MAX_TIMEOUT_MS = contract.maximum("stream", "client.timeout_ms")

#: The report's streams differ in frame size; stream 7 is the smallest (192 blocks, which
#: matches the report's ~1,900 samples for 10 frames).
DEFAULT_STREAMS = [
    [1280, 720],
    [1024, 768],
    [960, 544],
    [800, 608],
    [640, 480],
    [640, 352],
    [320, 240],
    [256, 192],
]

#: Four services like the report's (draco, dobby, harry, bellatrix): median ~150 ms, ~5 %
#: drops; they differ in their tails, as the report's box plots do.
DEFAULT_SERVICES = [
    {"name": "draco", "delay": "lognormal", "median_ms": 151.0, "spread": 0.35, "loss_p": 0.05},
    {"name": "dobby", "delay": "lognormal", "median_ms": 153.0, "spread": 0.25, "loss_p": 0.05},
    {"name": "harry", "delay": "lognormal", "median_ms": 155.0, "spread": 0.30, "loss_p": 0.05},
    {"name": "bellatrix", "delay": "lognormal", "median_ms": 158.0, "spread": 0.40, "loss_p": 0.05},
]

#: Keys of one service table: type, default, and what it means.
SERVICE_KEYS: dict[str, Param] = {
    "name": Param("str", "", "a label for tables and figures"),
    "delay": Param("str", "fixed", "delay distribution", choices=DELAY_KINDS),
    "delay_ms": Param("float", 0.0, "fixed: the delay", min=0, max=MAX_DELAY_MS),
    "min_ms": Param("float", 0.0, "uniform: lowest delay", min=0, max=MAX_DELAY_MS),
    "max_ms": Param("float", 0.0, "uniform: highest delay", min=0, max=MAX_DELAY_MS),
    "median_ms": Param("float", 0.0, "lognormal: median delay", min=0, max=MAX_DELAY_MS),
    "spread": Param(
        "float", 0.0, "lognormal: sigma of the log of the delay", min=0, max=MAX_SPREAD
    ),
    "loss": Param(
        "str",
        "bernoulli",
        "loss process",
        choices=LOSS_KINDS,
    ),
    "loss_p": Param("float", 0.0, "bernoulli: probability a request is lost", min=0, max=1),
    "p_good_bad": Param("float", 0.0, "gilbert-elliott: good -> bad per request", min=0, max=1),
    "p_bad_good": Param("float", 0.0, "gilbert-elliott: bad -> good per request", min=0, max=1),
    "loss_good": Param("float", 0.0, "gilbert-elliott: loss probability when good", min=0, max=1),
    "loss_bad": Param("float", 1.0, "gilbert-elliott: loss probability when bad", min=0, max=1),
}


def _check_value(key: str, param: Param, value: Any) -> Any:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if param.type == "float" and number:
        value = float(value)
    elif param.type == "str" and isinstance(value, str):
        pass
    else:
        raise RuleError(key, f"expected {param.expected()}, got {value!r}")
    ok = param.choices is None or value in param.choices
    if number:
        ok = ok and (param.min is None or value >= param.min)
        ok = ok and (param.max is None or value <= param.max)
    if not ok:
        raise RuleError(key, f"expected {param.expected()}, got {value!r}")
    return value


def service_table(index: int, table: ConfigValue) -> ConfigTable:
    """One entry of server.services checked and defaulted (raises RuleError)."""
    key = f"server.services[{index}]"
    if not isinstance(table, dict):
        raise RuleError(key, f"expected a table of {', '.join(SERVICE_KEYS)}, got {table!r}")
    out: ConfigTable = {name: p.default for name, p in SERVICE_KEYS.items()}
    for name, value in table.items():
        if name not in SERVICE_KEYS:
            raise RuleError(f"{key}.{name}", f"unknown key; expected one of: {', '.join(out)}")
        out[name] = _check_value(f"{key}.{name}", SERVICE_KEYS[name], value)
    if not out["name"]:
        out["name"] = f"service-{index}"
    if out["delay"] == "uniform" and number(out, "min_ms") > number(out, "max_ms"):
        raise RuleError(f"{key}.min_ms", f"min_ms ({out['min_ms']:g}) must be <= max_ms")
    if (
        out["loss"] == "gilbert-elliott"
        and number(out, "p_good_bad") > 0
        and out["p_bad_good"] == 0
    ):
        raise RuleError(f"{key}.p_bad_good", "must be > 0, else the bad state never ends")
    return out


def _check_streams(streams: list[ConfigValue]) -> None:
    if not streams:
        raise RuleError("server.streams", "expected a non-empty list of [width_px, height_px]")
    for i, stream in enumerate(streams):
        ok = (
            isinstance(stream, list)
            and len(stream) == 2
            and all(
                isinstance(side, int)
                and not isinstance(side, bool)
                and BLOCK_SIDE_PX <= side <= MAX_SIDE_PX
                and side % BLOCK_SIDE_PX == 0
                for side in stream
            )
        )
        if not ok:
            raise RuleError(
                f"server.streams[{i}]",
                f"expected [width_px, height_px], multiples of 16 in 16..{MAX_SIDE_PX}; "
                f"got {stream!r}",
            )


def _stream_rule(s: Sections) -> None:
    server, driver, load = s["server"], s["driver"], s["load"]
    streams = items(server, "streams")
    _check_streams(streams)
    services = items(server, "services")
    if not 1 <= len(services) <= MAX_SERVICES:
        raise RuleError("server.services", f"expected 1..{MAX_SERVICES} service tables")
    tables = [service_table(i, t) for i, t in enumerate(services)]
    server["services"] = list[ConfigValue](tables)
    names = [t["name"] for t in tables]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise RuleError(f"server.services[{i}].name", f"{name!r} is used twice")
    if integer(driver, "stream") >= len(streams):
        raise RuleError(
            "driver.stream",
            f"no stream {driver['stream']}: server.streams has {len(streams)}",
        )
    if driver["mode"] == "serial":
        if integer(driver, "service") >= len(services):
            raise RuleError(
                "driver.service", f"no service {driver['service']}: there are {len(services)}"
            )
        if driver["outstanding"] != 1 or driver["hedge"]:
            raise RuleError(
                "driver.mode",
                "serial means one service and one request outstanding: "
                "outstanding = 1 and no hedge (or use mode = 'parallel')",
            )
    elif driver["hedge"] and len(services) < 2:
        raise RuleError("driver.hedge", "hedging needs at least two services")
    if load["schedule"] != "closed" or load["clients"] != 1 or load["think_ms"] != 0:
        raise RuleError(
            "load.schedule",
            "the FrameAccessor is one closed-loop client: "
            "schedule = 'closed', clients = 1, think_ms = 0",
        )
    if load["requests"] is not None or load["duration_s"] is None:
        raise RuleError(
            "load.requests",
            "stream is bounded by driver.frames and load.duration_s (give duration_s, "
            "not requests)",
        )
    if number(load, "timeout_ms") > MAX_TIMEOUT_MS:
        raise RuleError(
            "load.timeout_ms",
            f"at most {MAX_TIMEOUT_MS:g} ms in stream (a block's timeout), "
            f"got {load['timeout_ms']:g}",
        )
    if number(driver, "min_rto_ms") > number(load, "timeout_ms"):
        raise RuleError("driver.min_rto_ms", "must be <= load.timeout_ms (the largest RTO)")


def service_config(table: ConfigTable, streams: list[ConfigValue], seed: int) -> ConfigTable:
    """The JSON server parameters of one block service (knee-node serve stream)."""
    delay: ConfigTable = {
        "fixed": lambda: {"kind": "fixed", "ms": table["delay_ms"]},
        "uniform": lambda: {
            "kind": "uniform",
            "min_ms": table["min_ms"],
            "max_ms": table["max_ms"],
        },
        "lognormal": lambda: {
            "kind": "lognormal",
            "median_ms": table["median_ms"],
            "spread": table["spread"],
        },
    }[text(table, "delay")]()
    loss: ConfigTable = {"kind": table["loss"]}
    if table["loss"] == "bernoulli":
        loss["p"] = table["loss_p"]
    elif table["loss"] == "gilbert-elliott":
        for key in ("p_good_bad", "p_bad_good", "loss_good", "loss_bad"):
            loss[key] = table[key]
    return {"streams": streams, "delay": delay, "loss": loss, "seed": seed}


def used_services(point: Point) -> list[int]:
    """Indices of the services a point's client fetches from."""
    if point.driver["mode"] == "serial":
        return [integer(point.driver, "service")]
    return list(range(len(items(point.server, "services"))))


def blocks_per_frame(width_px: int, height_px: int) -> int:
    return (width_px // BLOCK_SIDE_PX) * (height_px // BLOCK_SIDE_PX)


def _topology(point: Point) -> list[NodePlan]:
    server, driver, load = point.server, point.driver, point.load
    seed = integer(point.experiment, "seed")
    used = used_services(point)
    streams = items(server, "streams")
    plans = []
    for i in used:
        table = dict(as_table(items(server, "services")[i], f"services[{i}]"))
        if server["loss_p"] is not None:  # the loss experiment's sweep
            table.update(loss="bernoulli", loss_p=server["loss_p"])
        cfg = service_config(table, streams, seed * 1000 + i)
        cfg["max_pending"] = server["max_pending"]
        plans.append(NodePlan(f"service-{i}", "serve", {"server": cfg}))
    width_px, height_px = as_pair(streams[integer(driver, "stream")], "stream")
    client: ConfigTable = {
        "services": [f"{{addr:service-{i}}}" for i in used],
        "service_ids": list[ConfigValue](used),
        "stream": driver["stream"],
        "blocks_per_frame": blocks_per_frame(int(width_px), int(height_px)),
        "frames": driver["frames"],
        "outstanding": driver["outstanding"],
        "timeout_ms": load["timeout_ms"],
        "retransmit": driver["retransmit"],
        "adaptive_timeout": driver["adaptive_timeout"],
        "min_rto_ms": driver["min_rto_ms"],
        "hedge": driver["hedge"],
        "duration_s": load["duration_s"],
        "warmup_s": load["warmup_s"],
    }
    plans.append(NodePlan("client", "load", client, records=True))
    return plans


SYSTEM = System(
    name="stream",
    parts=(("service-*", "service {n}"), ("client", "the client")),
    summary="lossy UDP block services and a serial/parallel frame client (report 000)",
    server={
        "services": Param(
            "list",
            DEFAULT_SERVICES,
            "one table per service: name, delay (fixed delay_ms | uniform min_ms max_ms | "
            "lognormal median_ms spread), loss (none | bernoulli loss_p | gilbert-elliott "
            "p_good_bad p_bad_good loss_good loss_bad)",
        ),
        "streams": from_node(
            "stream",
            "server.streams",
            "[width_px, height_px] of each stream",
            default=DEFAULT_STREAMS,  # the report's catalog; a bare service has one stream
        ),
        "loss_p": Param(
            "float",
            None,
            "if given, every service loses requests with this Bernoulli p (for sweeps)",
            min=0,
            max=1,
        ),
        "max_pending": from_node(
            "stream",
            "server.max_pending",
            "replies waiting for their delay beyond this are dropped",
        ),
    },
    driver={
        "mode": Param(
            "str",
            "serial",
            "serial: one service, one request at a time; parallel: every service",
            choices=("serial", "parallel"),
        ),
        "service": Param("int", 0, "serial: which service (index in server.services)", min=0),
        "stream": Param("int", 7, "which stream (index in server.streams)", min=0, max=255),
        "frames": Param("int", 10, "frames to fetch, in order", min=1, max=10_000_000),
        "outstanding": from_node("stream", "client.outstanding", "requests in flight per service"),
        "retransmit": from_node(
            "stream",
            "client.retransmit",
            "retransmissions per block after a timeout (0: none, as in the report)",
        ),
        "adaptive_timeout": from_node(
            "stream",
            "client.adaptive_timeout",
            "per-service RFC 6298 timeout (starting at, and at most, timeout_ms)",
        ),
        "min_rto_ms": from_node("stream", "client.min_rto_ms", "adaptive timeout: lowest RTO"),
        "hedge": from_node(
            "stream", "client.hedge", "parallel: send each block to two services, first wins"
        ),
    },
    rules=(_stream_rule,),
    topology=_topology,
)
