"""`knee http`'s arguments as an experiment spec (a plain dict, as a TOML file reads), so
that the one-line command runs through the same spec checks, runner and report as
`knee run`. The load options are knee.loadcli's, shared with `knee grpc`."""

from __future__ import annotations

import argparse
import os

from knee.config_values import ConfigTable, ConfigValue
from knee.loadcli import (
    FIXED_CONNECTIONS,
    SEARCH_CONNECTIONS,
    LoadArgsError,
    header,
    load_spec,
    searching,
    seconds,
    tls_driver,
)
from knee.systems.http import origin

#: The name `knee http`'s callers know this error by.
HttpArgsError = LoadArgsError

__all__ = [
    "FIXED_CONNECTIONS",
    "SEARCH_CONNECTIONS",
    "HttpArgsError",
    "http_spec",
    "searching",
    "seconds",
]


def http_spec(args: argparse.Namespace) -> ConfigTable:
    try:
        target, path = origin(args.url)
    except ValueError as e:
        raise HttpArgsError(str(e)) from None
    request: ConfigTable = {"method": args.method.upper(), "path": path}
    if args.header:
        request["headers"] = [header(h) for h in args.header]
    if args.body is not None:
        if args.body.startswith("@"):
            body_file = os.path.abspath(args.body[1:])
            if not os.path.isfile(body_file):
                raise HttpArgsError(f"--body: no such file: {args.body[1:]}")
            request["body_file"] = body_file
        else:
            request["body"] = args.body
    timing = [t.strip() for t in args.server_timing.split(",") if t.strip()]
    driver: ConfigTable = {"requests": [request], "server_timing": list[ConfigValue](timing)}
    if args.detail:
        driver["server_timing_detail"] = args.detail
    https = target.startswith("https://")
    if (args.insecure or args.cacert or args.no_tls_resume) and not https:
        raise HttpArgsError("--insecure, --cacert and --no-tls-resume are for https:// URLs")
    tls_driver(args, https, driver)
    if args.no_tls_resume:
        driver["tls_resume"] = False
    if getattr(args, "h2c", False):
        if https:
            raise HttpArgsError("--h2c is cleartext HTTP/2, for http:// URLs (https: h2 by ALPN)")
        driver["protocol"] = "h2c"
    if getattr(args, "http1", False):
        driver["protocol"] = "http1"
    doc: ConfigTable = {"server": {"target": target}, "driver": driver}
    return load_spec(args, doc, "http", f"knee http {args.method.upper()} {args.url}")
