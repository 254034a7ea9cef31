"""grpc: unary calls to any gRPC service, h2c or TLS, as the target (docs/grpc.md).

A point runs one ``load`` node (``knee-node load grpc``) against ``server.target``, or,
with ``server.go_server = true``, first a ``server`` node (``knee-node serve grpc``) that
runs the grpc-go test server (``scripts/grpc-servers install`` builds it) with a known
capacity (``go_server_workers`` calls at once, each ``go_server_sleep_ms`` long), and then
the load against it. The request message is built by the node from ``driver.data`` (JSON)
through the service's .proto (``driver.proto_files``) or a descriptor set
(``driver.protoset``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from knee.config_values import ConfigTable, ConfigValue, text
from knee.params import Param, Point, RuleError, Sections, from_node, spec_relative
from knee.systems.base import NodePlan, System
from knee.systems.external import (
    check_target,
    check_tls,
    external_target,
    split_origin,
    topology,
)


def target_url(target: str) -> str:
    """``HOST:PORT``, ``http://HOST:PORT`` (h2c) or ``https://HOST:PORT`` (TLS) ->
    ``http(s)://HOST:PORT``."""
    url = target if "://" in target else f"http://{target}"  # a bare HOST:PORT is h2c
    base, parts = split_origin(url, target, "HOST:PORT, http://HOST:PORT or https://HOST:PORT")
    if parts.path not in ("", "/") or parts.query:
        raise ValueError(f"no path in a gRPC target ({target!r}): the method is --call")
    return base


def _paths(driver: ConfigTable, key: str, kind: str) -> None:
    """A list of paths made absolute (relative to where knee runs), each one existing."""
    value = driver[key]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise RuleError(f"driver.{key}", f"expected a list of paths, got {value!r}")
    check = os.path.isfile if kind == "file" else os.path.isdir
    paths = [p for p in value if isinstance(p, str)]  # every one is (checked above)
    out: list[ConfigValue] = []
    for p in paths:
        full = spec_relative(p)
        if not check(full):
            raise RuleError(f"driver.{key}", f"no such {kind}: {p}")
        out.append(full)
    driver[key] = out


def metadata_pairs(value: Any) -> list[ConfigValue]:
    """``{"k": "v"}`` or ``[["k", "v"], ...]`` -> [[k, v], ...]."""
    items = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise RuleError(
            "driver.metadata", f"expected a table or [name, value] pairs, got {value!r}"
        )
    out: list[ConfigValue] = []
    for m in items:
        if not (isinstance(m, list | tuple) and len(m) == 2 and all(isinstance(x, str) for x in m)):
            raise RuleError("driver.metadata", f"expected [name, value] strings, got {m!r}")
        out.append([m[0], m[1]])
    return out


def _grpc_rule(s: Sections) -> None:
    server, driver = s["server"], s["driver"]
    check_target(
        s,
        "go_server",
        "test server",
        "give target (HOST:PORT, http:// or https:// of your service) or go_server = true",
        target_url,
    )
    if (driver["protoset"] is None) == (not driver["proto_files"]):
        raise RuleError("driver.proto_files", "give proto_files (.proto) or protoset, one of them")
    _paths(driver, "proto_files", "file")
    _paths(driver, "import_paths", "folder")
    if driver["protoset"] is not None:
        full = spec_relative(text(driver, "protoset"))
        if not os.path.isfile(full):
            raise RuleError("driver.protoset", f"no such file: {driver['protoset']}")
        driver["protoset"] = full
    data = text(driver, "data")
    try:
        parsed = json.loads(data)
    except ValueError as e:
        raise RuleError("driver.data", f"not JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise RuleError("driver.data", f"expected a JSON object, got {data!r}")
    driver["metadata"] = metadata_pairs(driver["metadata"])
    check_tls(server, driver, spec_relative)


def _topology(point: Point) -> list[NodePlan]:
    server = point.server
    if not server["go_server"]:
        return topology(point, None)
    go = {"workers": server["go_server_workers"], "sleep_ms": server["go_server_sleep_ms"]}
    return topology(point, {"server": {"go_grpc": go}})


SYSTEM = System(
    name="grpc",
    external_target=external_target,
    summary="any gRPC service (h2c, TLS): unary calls built from a .proto and JSON",
    server={
        "target": Param("str", None, "HOST:PORT, http:// (h2c) or https:// of the service"),
        "go_server": Param(
            "bool", False, "start the grpc-go test server (scripts/grpc-servers installs it)"
        ),
        "go_server_workers": from_node(
            "grpc", "server.go_grpc.workers", "the test server's calls served at once"
        ),
        "go_server_sleep_ms": from_node(
            "grpc", "server.go_grpc.sleep_ms", "the test server's time per call"
        ),
    },
    driver={
        "proto_files": from_node("grpc", "driver.proto_files", ".proto files of the service"),
        "import_paths": from_node("grpc", "driver.import_paths", "where their imports are"),
        "protoset": from_node("grpc", "driver.protoset", "a FileDescriptorSet instead"),
        "call": from_node("grpc", "driver.call", "package.Service/Method (unary)"),
        "data": from_node("grpc", "driver.data", "the request message as JSON"),
        "metadata": from_node("grpc", "driver.metadata", "[name, value] pairs sent with calls"),
        "max_reply_bytes": from_node("grpc", "driver.max_reply_bytes", "a reply message, at most"),
        "tls_insecure": from_node(
            "grpc", "driver.tls_insecure", "https: accept any certificate (a self-signed one)"
        ),
        "tls_ca_file": from_node(
            "grpc", "driver.tls_ca_file", "https: PEM certificates of CAs trusted besides the roots"
        ),
    },
    rules=(_grpc_rule,),
    topology=_topology,
    queue_name="connect_ns",
)
