"""What the one-line load commands (`knee http`, `knee grpc`) share: their load options
(--rate, --rates, --clients, --duration, --warmup, --connections, --slo, --timeout, the
search's), TLS options, run options, and how those become a spec's `[load]` (and `[sweep]`).
Each command's own module (knee.httpcli, knee.grpccli) builds the rest of its spec."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from knee.config_values import ConfigTable, ConfigValue

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

#: Connections of a search: enough that a service's own concurrency, not the generator's
#: connections, sets the capacity it finds (docs/find.md).
SEARCH_CONNECTIONS = 64
FIXED_CONNECTIONS = 8


class LoadArgsError(ValueError):
    """An argument of a load command that cannot make a spec (one line)."""


def seconds(text: str, what: str) -> float:
    """'30s', '2m', '500ms', '1.5' (seconds) -> seconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise LoadArgsError(f"{what}: expected a duration such as 30s, 2m or 500ms, got {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def rates(text: str) -> list[float]:
    try:
        out = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise LoadArgsError(f"--rates: expected comma-separated numbers, got {text!r}") from None
    if not out:
        raise LoadArgsError("--rates: give at least one rate")
    return out


def header(text: str, flag: str = "-H") -> list[ConfigValue]:
    """'Name: value' -> [name, value] (a spec's pair)."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise LoadArgsError(f"{flag}: expected 'Name: value', got {text!r}")
    return [name.strip(), value.strip()]


def searching(args: argparse.Namespace) -> bool:
    """No --rate, --rates or --clients: the command searches for the capacity."""
    return args.rate is None and args.rates is None and args.clients is None


def add_load_options(p: argparse.ArgumentParser, what: str) -> None:
    """--rate | --rates | --clients, --duration, --warmup, --connections, --slo, --timeout;
    `what` names a request in the help ("requests", "calls")."""
    rate = p.add_mutually_exclusive_group()
    rate.add_argument(
        "--rate",
        type=float,
        help=f"{what} per second (Poisson arrivals); with none of --rate, --rates and "
        "--clients, knee searches for the capacity (docs/find.md)",
    )
    rate.add_argument("--rates", help="a sweep: comma-separated rates, e.g. 100,200,500,1000")
    rate.add_argument("--clients", type=int, help="closed loop: this many clients, no pause")
    p.add_argument("--duration", default="30s", help="per rate, warm-up included (30s, 2m)")
    p.add_argument("--warmup", default="1s", help="left out of the statistics (default 1s)")
    p.add_argument(
        "--connections",
        type=int,
        help="connections (default 8; a search: 64, so that the service's own "
        "concurrency and not the connections sets the capacity)",
    )
    p.add_argument(
        "--slo",
        help="latency objective, e.g. 'p99<50ms': with a rate, a threshold (exit code 5 "
        "when missed at one-sided 99%% confidence); with none, the search also finds the SLO "
        "capacity",
    )
    p.add_argument("--timeout", default="5s", help=f"per {what[:-1]} (default 5s)")


def add_tls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--insecure",
        action="store_true",
        help="https: accept any certificate (a local service's self-signed one)",
    )
    p.add_argument(
        "--cacert", metavar="FILE", help="https: also trust the CA certificates in this PEM file"
    )


def add_run_options(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("--name", default=name, help=f"the run directory's name (default {name})")
    p.add_argument("--out", type=Path, default=Path("runs"), help="default: ./runs")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument("--no-report", action="store_true", help="do not write report.html")


def tls_driver(args: argparse.Namespace, https: bool, driver: ConfigTable) -> None:
    """--insecure and --cacert into the driver (https only)."""
    import os

    if (args.insecure or args.cacert) and not https:
        raise LoadArgsError("--insecure and --cacert are for https:// targets")
    if args.insecure:
        driver["tls_insecure"] = True
    if args.cacert:
        if not os.path.isfile(args.cacert):
            raise LoadArgsError(f"--cacert: no such file: {args.cacert}")
        driver["tls_ca_file"] = os.path.abspath(args.cacert)


def load_spec(
    args: argparse.Namespace, doc: ConfigTable, system: str, description: str
) -> ConfigTable:
    """`doc` (its server and driver sections) completed with the experiment, the load and,
    for --rates, the sweep: the spec of one command line."""
    search = searching(args)
    default_connections = SEARCH_CONNECTIONS if search else FIXED_CONNECTIONS
    load: ConfigTable = {
        "duration_s": seconds(args.duration, "--duration"),
        "warmup_s": seconds(args.warmup, "--warmup"),
        "timeout_ms": seconds(args.timeout, "--timeout") * 1000,
        "connections": args.connections or default_connections,
    }
    experiment: ConfigTable = {"name": args.name, "system": system, "description": description}
    out: ConfigTable = {"experiment": experiment, **doc, "load": load}
    if args.slo:
        experiment["slo"] = args.slo
    if search:  # the search sets each probe's rate and length; these start it
        load |= {"schedule": "poisson", "rate_per_s": args.min_rate or 10.0}
    elif args.clients is not None:
        load |= {"schedule": "closed", "clients": args.clients}
    elif args.rate is not None:
        load |= {"schedule": "poisson", "rate_per_s": args.rate}
    else:
        swept = rates(args.rates)
        load |= {"schedule": "poisson", "rate_per_s": swept[0]}
        out["sweep"] = {"load.rate_per_s": list[ConfigValue](swept)}
    return out
