"""The spec's hosts: ``[hosts.NAME]`` tables, ``[placement]`` (which host each node runs on)
and ``[limits]`` (CPU and memory per node), checked into plain data (docs/hosts.md).

    [hosts.h1]
    kind = "netns"          # local | netns | ssh | docker | swarm
    rate_mbit = 100         # netns: the link's rate, each direction
    loss_percent = 1.0      # netns: random loss on receive
    cpu_cores = 1.0         # every node on the host together (cgroup quota)

    [placement]             # node name or glob -> a host, or a list dealt round-robin
    server = "h1"
    "load-*" = ["c1", "c2"]

    [limits."peer-*"]       # one node's own limits, inside its host's
    cpu_cores = 0.25

Nodes not placed run on ``local`` (127.0.0.1 of this machine, as without hosts).
"""

from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field
from typing import Any

from knee.hosts.base import Limits
from knee.params import REQUIRED, Param, RuleError, Schema

LOCAL = "local"
KINDS = ("local", "netns", "ssh", "docker", "swarm")
#: At most this many hosts per run: each netns host is a namespace and two veth ends, and
#: the emulated network hands out addresses from one /16.
MAX_HOSTS = 250

LIMITS: Schema = {
    "cpu_cores": Param(
        "float", None, "CPU quota as a share of cores (0.25 = a quarter core)", min=0.01, max=1024
    ),
    "cpuset": Param("str", None, 'cores the processes may run on, e.g. "1" or "0-1"'),
    "memory_mb": Param("int", None, "resident memory limit in MiB", min=16, max=1 << 24),
}
_COMMON: Schema = {
    "kind": Param("str", REQUIRED, "where nodes run", choices=KINDS),
    "description": Param("str", "", "one line shown in the report"),
    **LIMITS,
}
HOST: dict[str, Schema] = {
    "local": _COMMON,
    "netns": {
        **_COMMON,
        "rate_mbit": Param("float", None, "link rate each way (tc tbf)", min=0.01, max=100_000),
        "loss_percent": Param(
            "float", None, "random loss of received packets (nftables)", min=0, max=100
        ),
        # A minute: far beyond any network's one-way delay (an unbounded float is a typo).
        "delay_ms": Param(
            "float", None, "one-way delay (tc netem; not in every kernel)", min=0, max=60_000
        ),
    },
    "docker": _COMMON,  # a container on knee's daemon (scripts/docker)
    # Services on knee's daemon's swarm (scripts/docker swarm), on one of its nodes.
    "swarm": {
        **_COMMON,
        "node": Param("str", None, "the swarm node's hostname (default: this machine's)"),
        "identity_file": Param(
            "str", None, "private key for another node's ssh (label knee.ssh; default: ssh's own)"
        ),
    },
    "ssh": {
        **_COMMON,
        "address": Param("str", REQUIRED, "the host's address, as ssh and the nodes reach it"),
        "user": Param("str", None, "login user (default: ssh's own)"),
        "port": Param("int", 22, "sshd's port", min=1, max=65_535),
        "identity_file": Param("str", None, "private key file (default: ssh's own)"),
    },
}


@dataclass(frozen=True)
class HostSpec:
    name: str
    kind: str
    settings: dict[str, Any]  # the checked table, defaults filled, without limits

    @property
    def limits(self) -> Limits:
        return limits_of(self.settings)


@dataclass(frozen=True)
class Placement:
    """Hosts, placement and per-node limits of a spec."""

    hosts: dict[str, HostSpec] = field(default_factory=dict)
    rules: dict[str, str | list[str]] = field(default_factory=dict)  # glob -> host(s)
    node_limits: dict[str, dict[str, Any]] = field(default_factory=dict)  # glob -> limits
    #: The point being run: "where" (node -> host), noted by check_nodes, shared with every
    #: for_point copy: a swarm host makes one service of a point's generators on it.
    current: dict[str, Any] = field(default_factory=dict, compare=False)

    def place(self, nodes: list[str]) -> dict[str, str]:
        """Each node's host: the first rule (in spec order) whose glob matches it; a list
        deals the matching nodes round-robin, in the order they start."""
        out: dict[str, str] = {}
        for glob, target in self.rules.items():
            matched = [n for n in nodes if n not in out and fnmatch.fnmatchcase(n, glob)]
            hosts = itertools.cycle([target] if isinstance(target, str) else target)
            out.update(zip(matched, hosts, strict=False))
        return {n: out.get(n, LOCAL) for n in nodes}

    def limits(self, node: str) -> Limits:
        """A node's own limits (the first matching [limits] glob), or none."""
        for glob, table in self.node_limits.items():
            if fnmatch.fnmatchcase(node, glob):
                return limits_of(table)
        return Limits()

    def for_point(self, rules: dict[str, str | list[str]]) -> Placement:
        """The placement of a point whose series gives its own rules (none: this one)."""
        return Placement(self.hosts, dict(rules), self.node_limits, self.current) if rules else self

    def host(self, name: str) -> HostSpec:
        return self.hosts.get(name) or HostSpec(LOCAL, "local", {"kind": "local"})

    def resolved(self) -> dict[str, Any]:
        """The three tables as spec.toml writes them back."""
        out: dict[str, Any] = {}
        if self.hosts:
            out["hosts"] = {
                n: {k: v for k, v in h.settings.items() if v is not None}
                for n, h in self.hosts.items()
            }
        if self.rules:
            out["placement"] = dict(self.rules)
        if self.node_limits:
            out["limits"] = {g: dict(t) for g, t in self.node_limits.items()}
        return out


def limits_of(table: dict[str, Any]) -> Limits:
    memory_mb = table.get("memory_mb")
    return Limits(
        cpu_cores=table.get("cpu_cores"),
        cpuset=table.get("cpuset"),
        memory_bytes=None if memory_mb is None else int(memory_mb) << 20,
    )


Check = Any  # spec.py's section checker: (key, schema, table) -> checked table


def check_placement(doc: dict[str, Any], check: Check) -> Placement:
    """The spec's [hosts], [placement] and [limits] tables, each key checked by `check`
    (spec.py's section checker, so errors read like every other spec error)."""
    hosts: dict[str, HostSpec] = {}
    tables = doc.get("hosts", {})
    if not isinstance(tables, dict):
        raise RuleError("hosts", "expected [hosts.NAME] tables")
    if len(tables) > MAX_HOSTS:
        raise RuleError("hosts", f"{len(tables)} hosts; at most {MAX_HOSTS}")
    for name, table in tables.items():
        key = f"hosts.{name}"
        if not name.replace("-", "").replace("_", "").isalnum() or len(name) > 20:
            raise RuleError(key, "a host name is 1-20 letters, digits, '-' or '_'")
        if not isinstance(table, dict):
            raise RuleError(key, "expected a table")
        kind = table.get("kind")
        if not isinstance(kind, str) or kind not in HOST:
            raise RuleError(f"{key}.kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
        schema = HOST[kind]
        checked = check(key, schema, table)
        settings = {n: checked.get(n, p.default) for n, p in schema.items()}
        for n, v in settings.items():
            if v is REQUIRED:
                raise RuleError(f"{key}.{n}", f"missing ({schema[n].expected()})")
        if name == "net":
            raise RuleError(key, "'net' is the emulated network's own namespace: pick another name")
        if name == LOCAL and kind != "local":
            raise RuleError(key, "the host named 'local' is this machine: kind = 'local'")
        _check_cpuset(key, settings)
        if kind == "swarm" and settings.get("cpuset") is not None:
            raise RuleError(
                f"{key}.cpuset", "Swarm has no cpuset (no --cpuset-cpus): use cpu_cores"
            )
        hosts[name] = HostSpec(name, kind, settings)
    rules = check_rules("placement", doc.get("placement", {}), hosts)
    limits = doc.get("limits", {})
    if not isinstance(limits, dict):
        raise RuleError("limits", "expected [limits.NODE] tables")
    node_limits = {g: check(f"limits.{g}", LIMITS, t) for g, t in limits.items()}
    for glob, table in node_limits.items():
        _check_cpuset(f"limits.{glob}", table)
    return Placement(hosts, rules, node_limits)


def check_rules(key: str, rules: Any, hosts: dict[str, HostSpec]) -> dict[str, str | list[str]]:
    """A [placement] table: node name or glob = a host name or a list of them."""
    if not isinstance(rules, dict):
        raise RuleError(key, 'expected a table: node name or glob = "HOST"')
    known = [LOCAL, *hosts]
    for glob, target in rules.items():
        names = [target] if isinstance(target, str) else target
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise RuleError(f"{key}.{glob}", "expected a host name or a list of host names")
        for n in names:
            if n not in known:
                raise RuleError(f"{key}.{glob}", f"unknown host {n!r}; hosts: {', '.join(known)}")
    return dict(rules)


def network_of(host: HostSpec) -> str:
    """Which network a host's nodes are on: nodes reach each other only within one."""
    if host.kind == "netns":
        return "the emulated network"
    if host.kind == "docker":
        return "the docker network"
    if host.kind == "swarm":
        return "the swarm network"
    if host.kind == "ssh" and not str(host.settings["address"]).startswith("127."):
        return "the hosts' own network"
    return "this machine's loopback"


def check_nodes(placement: Placement, nodes: list[str], label: str) -> dict[str, str]:
    """Each node's host for one point's nodes. The nodes of a point must all reach each
    other: the emulated network has no way to this machine's loopback (by design), and a
    remote host cannot reach it either, so a point that mixes networks is refused."""
    where = placement.place(nodes)
    nets: dict[str, list[str]] = {}
    for node, host in where.items():
        nets.setdefault(network_of(placement.host(host)), []).append(node)
    if len(nets) > 1:
        parts = "; ".join(f"{', '.join(ns)} on {net}" for net, ns in nets.items())
        raise RuleError(
            "placement",
            f"point {label!r} puts nodes on networks that cannot reach each other ({parts}); "
            "place every node of a point on one network",
        )
    placement.current["where"] = where
    return where


def parse_cpuset(text: str) -> set[int]:
    """The cores of a cpuset list such as "0-2,5" (as the spec and the kernel write them;
    empty items are skipped); ValueError for anything else."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.strip().partition("-")
        if not part.strip():
            continue
        if not lo.isdigit() or (hi and not hi.isdigit()) or int(hi or lo) < int(lo):
            raise ValueError(f'expected a list of cores such as "1" or "0-1,3", got {text!r}')
        cores.update(range(int(lo), int(hi or lo) + 1))
    return cores


def _check_cpuset(key: str, table: dict[str, Any]) -> None:
    if table.get("cpuset") is not None:
        try:
            parse_cpuset(table["cpuset"])
        except ValueError as e:
            raise RuleError(f"{key}.cpuset", str(e)) from None
