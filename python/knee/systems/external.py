"""What the systems that measure a service knee did not write (http, grpc) share: the TLS
keys, valid only against an https:// target, and the topology of one load node against
`server.target` or against a server node of the point's own."""

from __future__ import annotations

import os
from collections.abc import Callable

from knee.config_values import ConfigTable, integer, opt_text, text
from knee.params import Point, RuleError
from knee.systems.base import NodePlan, load_config

#: The target of a point's own server node (the runner puts in its address).
OWN_SERVER = "http://{addr:server}"


def check_tls(server: ConfigTable, driver: ConfigTable, resolve: Callable[[str], str]) -> None:
    """`driver.tls_insecure` and `driver.tls_ca_file` only with an https:// `server.target`;
    the CA file must exist, and the node gets its path as `resolve` makes it."""
    target = opt_text(server, "target")
    https = target is not None and target.startswith("https://")
    for key in ("tls_insecure", "tls_ca_file"):
        if driver[key] and not https:
            raise RuleError(f"driver.{key}", "is for an https:// server.target")
    if driver["tls_ca_file"] is not None:
        ca_file = resolve(text(driver, "tls_ca_file"))
        if not os.path.isfile(ca_file):
            raise RuleError("driver.tls_ca_file", f"no such file: {driver['tls_ca_file']}")
        driver["tls_ca_file"] = ca_file


def topology(point: Point, own_server: ConfigTable | None) -> list[NodePlan]:
    """One load node against `server.target`, or, given the config of a server node of the
    point's own (`own_server`), that node and the load against it."""
    plans = [] if own_server is None else [NodePlan("server", "serve", own_server)]
    target = text(point.server, "target") if own_server is None else OWN_SERVER
    load = load_config(
        point.load, point.driver, target=target, seed=integer(point.experiment, "seed")
    )
    return [*plans, NodePlan("load", "load", load, records=True)]


def external_target(point: Point) -> str | None:
    """The service measured: `server.target` (None with a server of the point's own)."""
    return opt_text(point.server, "target")
