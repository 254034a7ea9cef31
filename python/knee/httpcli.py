"""`knee http`'s arguments as an experiment spec (a plain dict, as a TOML file reads), so
that the one-line command runs through the same spec checks, runner and report as
`knee run`."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from knee.systems.http import origin

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class HttpArgsError(ValueError):
    """An argument of `knee http` that cannot make a spec (one line)."""


def seconds(text: str, what: str) -> float:
    """'30s', '2m', '500ms', '1.5' (seconds) -> seconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise HttpArgsError(f"{what}: expected a duration such as 30s, 2m or 500ms, got {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _rates(text: str) -> list[float]:
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise HttpArgsError(f"--rates: expected comma-separated numbers, got {text!r}") from None
    if not rates:
        raise HttpArgsError("--rates: give at least one rate")
    return rates


def _header(text: str) -> list[str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise HttpArgsError(f"-H: expected 'Name: value', got {text!r}")
    return [name.strip(), value.strip()]


def searching(args: argparse.Namespace) -> bool:
    """No --rate, --rates or --clients: `knee http` searches for the capacity."""
    return args.rate is None and args.rates is None and args.clients is None


#: Connections of a search: enough that a service's own concurrency, not the generator's
#: connections, sets the capacity it finds (docs/find.md).
SEARCH_CONNECTIONS = 64
FIXED_CONNECTIONS = 8


def http_spec(args: argparse.Namespace) -> dict[str, Any]:
    try:
        target, path = origin(args.url)
    except ValueError as e:
        raise HttpArgsError(str(e)) from None
    request: dict[str, Any] = {"method": args.method.upper(), "path": path}
    if args.header:
        request["headers"] = [_header(h) for h in args.header]
    if args.body is not None:
        if args.body.startswith("@"):
            body_file = os.path.abspath(args.body[1:])
            if not os.path.isfile(body_file):
                raise HttpArgsError(f"--body: no such file: {args.body[1:]}")
            request["body_file"] = body_file
        else:
            request["body"] = args.body
    timing = [t.strip() for t in args.server_timing.split(",") if t.strip()]
    driver: dict[str, Any] = {"requests": [request], "server_timing": timing}
    if args.detail:
        driver["server_timing_detail"] = args.detail
    if (args.insecure or args.cacert or args.no_tls_resume) and not target.startswith("https://"):
        raise HttpArgsError("--insecure, --cacert and --no-tls-resume are for https:// URLs")
    if args.no_tls_resume:
        driver["tls_resume"] = False
    if args.insecure:
        driver["tls_insecure"] = True
    if getattr(args, "h2c", False):
        if target.startswith("https://"):
            raise HttpArgsError("--h2c is cleartext HTTP/2, for http:// URLs (https: h2 by ALPN)")
        driver["protocol"] = "h2c"
    if getattr(args, "http1", False):
        driver["protocol"] = "http1"
    if args.cacert:
        if not os.path.isfile(args.cacert):
            raise HttpArgsError(f"--cacert: no such file: {args.cacert}")
        driver["tls_ca_file"] = os.path.abspath(args.cacert)
    search = searching(args)
    default_connections = SEARCH_CONNECTIONS if search else FIXED_CONNECTIONS
    load: dict[str, Any] = {
        "duration_s": seconds(args.duration, "--duration"),
        "warmup_s": seconds(args.warmup, "--warmup"),
        "timeout_ms": seconds(args.timeout, "--timeout") * 1000,
        "connections": args.connections or default_connections,
    }
    doc: dict[str, Any] = {
        "experiment": {
            "name": args.name,
            "system": "http",
            "description": f"knee http {args.method.upper()} {args.url}",
        },
        "server": {"target": target},
        "driver": driver,
        "load": load,
    }
    if args.slo:
        doc["experiment"]["slo"] = args.slo
    if search:  # the search sets each probe's rate and length; these start it
        load |= {"schedule": "poisson", "rate_per_s": args.min_rate or 10.0}
    elif args.clients is not None:
        load |= {"schedule": "closed", "clients": args.clients}
    elif args.rate is not None:
        load |= {"schedule": "poisson", "rate_per_s": args.rate}
    else:
        rates = _rates(args.rates)
        load |= {"schedule": "poisson", "rate_per_s": rates[0]}
        doc["sweep"] = {"load.rate_per_s": rates}
    return doc
