"""`knee grpc`'s arguments as an experiment spec (a plain dict, as a TOML file reads), as
knee.httpcli does for `knee http`: the load options are knee.loadcli's, the flags of the
call follow ghz's and grpcurl's (--proto, -i/--import-paths, --protoset, --call, -d/--data,
-m/--metadata, -H)."""

from __future__ import annotations

import argparse
import json
import os

from knee.config_values import ConfigTable, ConfigValue
from knee.loadcli import LoadArgsError, header, load_spec, tls_driver
from knee.systems.grpc import target_url

GrpcArgsError = LoadArgsError


def _data(text: str) -> str:
    """-d JSON, or -d @FILE: the request message's JSON text, checked to be an object."""
    if text.startswith("@"):
        path = text[1:]
        if not os.path.isfile(path):
            raise GrpcArgsError(f"--data: no such file: {path}")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise GrpcArgsError(f"--data: not JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise GrpcArgsError(f"--data: expected a JSON object (the message), got {text.strip()!r}")
    return text


def _metadata(args: argparse.Namespace) -> list[ConfigValue]:
    out: list[ConfigValue] = []
    if args.metadata:
        try:
            m = json.loads(args.metadata)
        except ValueError as e:
            raise GrpcArgsError(f"--metadata: not JSON: {e}") from None
        if not isinstance(m, dict) or not all(isinstance(v, str) for v in m.values()):
            raise GrpcArgsError('--metadata: expected a JSON object of strings, e.g. \'{"k":"v"}\'')
        out += [[k, v] for k, v in m.items()]
    out += [header(h, "-H") for h in args.header]
    return out


def grpc_driver(args: argparse.Namespace, https: bool) -> ConfigTable:
    """The driver section of the spec: the service description, the call, its message."""
    driver: ConfigTable = {"call": args.call, "data": _data(args.data)}
    if args.protoset and args.proto:
        raise GrpcArgsError("give --proto or --protoset, not both")
    if not args.protoset and not args.proto:
        raise GrpcArgsError("give --proto FILE (or --protoset FILE): the service's description")
    if args.protoset:
        if args.import_paths:
            raise GrpcArgsError("--import-paths are for --proto files")
        if not os.path.isfile(args.protoset):
            raise GrpcArgsError(f"--protoset: no such file: {args.protoset}")
        driver["protoset"] = os.path.abspath(args.protoset)
    else:
        for f in args.proto:
            if not os.path.isfile(f):
                raise GrpcArgsError(f"--proto: no such file: {f}")
        driver["proto_files"] = [os.path.abspath(f) for f in args.proto]
        paths = [p for text in args.import_paths for p in text.split(",") if p.strip()]
        for p in paths:
            if not os.path.isdir(p):
                raise GrpcArgsError(f"--import-paths: no such folder: {p}")
        if paths:
            driver["import_paths"] = [os.path.abspath(p) for p in paths]
    metadata = _metadata(args)
    if metadata:
        driver["metadata"] = metadata
    tls_driver(args, https, driver)
    return driver


def grpc_spec(args: argparse.Namespace) -> ConfigTable:
    try:
        target = target_url(args.target)
    except ValueError as e:
        raise GrpcArgsError(str(e)) from None
    driver = grpc_driver(args, target.startswith("https://"))
    doc: ConfigTable = {"server": {"target": target}, "driver": driver}
    return load_spec(args, doc, "grpc", f"knee grpc {args.call} {args.target}")


def check_call(node: str, driver: ConfigTable) -> ConfigTable:
    """`knee-node grpc-check`: the .proto compiled, the method found and the message built
    as the node would before its start; its one-line error as a GrpcArgsError."""
    import subprocess

    keys = ("proto_files", "import_paths", "protoset", "call", "data", "metadata")
    config = {k: driver[k] for k in keys if k in driver}
    out = subprocess.run(
        [node, "grpc-check", "--config", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        line = lines[-1] if lines else f"knee-node grpc-check exited {out.returncode}"
        raise GrpcArgsError(line.split("error: ", 1)[-1])
    return json.loads(out.stdout)
