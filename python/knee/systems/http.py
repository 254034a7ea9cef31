"""http: any HTTP/1.1 service, over http:// or https://, as the target (docs/http.md).

A point runs one ``load`` node (``knee-node load http``) against ``server.target``, or,
with ``server.nginx = true``, first a ``server`` node (``knee-node serve http``) that runs
an nginx of the point's own in its scratch folder, and then the load against it.
"""

from __future__ import annotations

import os
from typing import Any

from knee.config_values import ConfigTable, items
from knee.contract import HTTP_MAX_ENTRIES as MAX_ENTRIES
from knee.params import Param, Point, RuleError, Sections, from_node
from knee.systems.base import NodePlan, System
from knee.systems.external import (
    check_target,
    check_tls,
    external_target,
    split_origin,
    topology,
)

#: Keys of one [[driver.requests]] entry, and the TOML type each takes.
_ENTRY_KEYS: dict[str, tuple[type, ...]] = {
    "method": (str,),
    "path": (str,),
    "headers": (dict, list),
    "body": (str,),
    "body_file": (str,),
    "weight": (int, float),
    "file": (str,),
}


def origin(url: str) -> tuple[str, str]:
    """``http(s)://HOST[:PORT][/path?query]`` -> (``http(s)://HOST:PORT``, ``/path?query``)."""
    base, parts = split_origin(url, url, "http://HOST:PORT or https://HOST:PORT")
    return base, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _target(url: str) -> str:
    """The service's ``http(s)://HOST:PORT``: no path (those go in driver.requests)."""
    base, path = origin(url)
    if path != "/":
        raise ValueError(f"no path here ({path}): paths go in driver.requests")
    return base


def _entry(i: int, entry: Any) -> dict[str, Any]:
    key = f"driver.requests[{i}]"
    if not isinstance(entry, dict):
        raise RuleError(key, f"expected a table (method, path, ...), got {entry!r}")
    for name, value in entry.items():
        if name not in _ENTRY_KEYS:
            raise RuleError(
                f"{key}.{name}", f"unknown key; expected one of {', '.join(_ENTRY_KEYS)}"
            )
        if not isinstance(value, _ENTRY_KEYS[name]) or isinstance(value, bool):
            raise RuleError(f"{key}.{name}", f"wrong type: {value!r}")
    out = dict(entry)
    if ("path" in out) == ("file" in out):
        raise RuleError(key, "give path or file (of requests, one per line), one of them")
    if "body" in out and "body_file" in out:
        raise RuleError(key, "give body or body_file, not both")
    if out.get("weight", 1.0) <= 0:
        raise RuleError(f"{key}.weight", f"must be > 0, got {out['weight']}")
    path = out.get("path")
    if path is not None and not (path.startswith("/") and path.isprintable() and " " not in path):
        raise RuleError(f"{key}.path", f"must start with / and have no spaces, got {path!r}")
    headers = out.get("headers", [])
    if isinstance(headers, dict):
        headers = list(headers.items())
    pairs = []
    for h in headers:
        if not (isinstance(h, list | tuple) and len(h) == 2 and all(isinstance(x, str) for x in h)):
            raise RuleError(f"{key}.headers", f"expected a table or [name, value] pairs, got {h!r}")
        if h[0].lower() in ("content-length", "transfer-encoding"):
            raise RuleError(f"{key}.headers", f"{h[0]} is set by knee from the body")
        pairs.append([h[0], h[1]])
    out["headers"] = pairs
    for name in ("body_file", "file"):
        if name in out:
            # Relative to where knee runs; the node gets the absolute path.
            p = os.path.abspath(out[name])
            if not os.path.isfile(p):
                raise RuleError(f"{key}.{name}", f"no such file: {out[name]}")
            out[name] = p
    if "weight" in out:
        out["weight"] = float(out["weight"])
    return out


def _http_rule(s: Sections) -> None:
    server, driver = s["server"], s["driver"]
    check_target(
        s,
        "nginx",
        "nginx",
        "give target (http://HOST:PORT of your service) or nginx = true",
        _target,
    )
    requests = driver["requests"]
    if not isinstance(requests, list) or not 1 <= len(requests) <= MAX_ENTRIES:
        raise RuleError(
            "driver.requests", f"expected 1 to {MAX_ENTRIES} [[driver.requests]] tables"
        )
    driver["requests"] = [_entry(i, e) for i, e in enumerate(requests)]
    timing = items(driver, "server_timing")
    if not all(isinstance(t, str) and t for t in timing):
        raise RuleError("driver.server_timing", f"expected a list of entry names, got {timing!r}")
    # Relative to where knee runs; the node gets the absolute path.
    check_tls(server, driver, os.path.abspath)


def _topology(point: Point) -> list[NodePlan]:
    server = point.server
    if not server["nginx"]:
        return topology(point, None)
    nginx: ConfigTable = {"dir": "{scratch}/nginx", "workers": server["nginx_workers"]}
    if server["nginx_cpu"] is not None:
        nginx["cpu"] = server["nginx_cpu"]
    if server["nginx_http2"]:
        nginx["http2"] = True
    return topology(point, {"server": {"nginx": nginx}})


SYSTEM = System(
    name="http",
    external_target=external_target,
    summary="any HTTP/1.1 or HTTP/2 service (http, https, h2c): Server-Timing split",
    server={
        "target": Param("str", None, "http(s)://HOST:PORT of the service (or nginx = true)"),
        "nginx": Param(
            "bool", False, "start an nginx of the point's own (scripts/nginx installs it)"
        ),
        "nginx_workers": from_node("http", "server.nginx.workers", "nginx worker processes"),
        "nginx_cpu": from_node("http", "server.nginx.cpu", "pin nginx's workers to this CPU"),
        "nginx_http2": from_node(
            "http", "server.nginx.http2", "nginx speaks HTTP/2 (cleartext: h2c only, use --h2c)"
        ),
    },
    driver={
        "requests": from_node(
            "http",
            "driver.requests",
            "[[driver.requests]]: method, path, headers, body or body_file, weight; or file",
            default=[{"method": "GET", "path": "/"}],  # the node requires a table
        ),
        "server_timing": from_node(
            "http", "driver.server_timing", "Server-Timing entries summed into server time"
        ),
        "server_timing_detail": from_node(
            "http", "driver.server_timing_detail", "the Server-Timing entry kept as detail"
        ),
        "max_header_bytes": from_node(
            "http", "driver.max_header_bytes", "a response's status line and headers, at most"
        ),
        "max_body_bytes": from_node("http", "driver.max_body_bytes", "a response body, at most"),
        "tls_insecure": from_node(
            "http",
            "driver.tls_insecure",
            "https: accept any certificate (a local service's self-signed one)",
        ),
        "tls_ca_file": from_node(
            "http",
            "driver.tls_ca_file",
            "https: PEM certificates of CAs trusted besides the system's roots",
        ),
        "tls_resume": from_node(
            "http",
            "driver.tls_resume",
            "https: resume TLS sessions on new connections (false: full handshakes)",
        ),
        "protocol": from_node(
            "http",
            "driver.protocol",
            "auto (https: h2 if the server chooses it by ALPN), http1, h2c, h2 (docs/http2.md)",
        ),
        "max_streams": from_node(
            "http", "driver.max_streams", "HTTP/2: streams per connection at most (client cap)"
        ),
        "h2_stream_window_bytes": from_node(
            "http", "driver.h2_stream_window_bytes", "HTTP/2: knee's receive window per stream"
        ),
        "h2_connection_window_bytes": from_node(
            "http",
            "driver.h2_connection_window_bytes",
            "HTTP/2: knee's receive window per connection",
        ),
    },
    rules=(_http_rule,),
    topology=_topology,
    queue_name="connect_ns",
    one_request_per_connection=True,
)
