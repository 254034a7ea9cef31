"""The `knee` command."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console

from knee import __version__
from knee.config_values import ConfigTable, as_table
from knee.live.options import add_live_options
from knee.runner.display import Display

EXIT_SPEC_ERROR = 2
EXIT_NODE_FAILED = 3
EXIT_REPORT_FAILED = 4
#: A point missed the spec's (or --slo's) SLO with one-sided 99% confidence (knee.stats.slo):
#: for CI pipelines.
EXIT_SLO_MISSED = 5
#: A search whose low probe had no request end OK (a wrong URL): stopped at once.
EXIT_ALL_FAILED = 6
EXIT_INTERRUPTED = 130


def _version() -> str:
    from knee.env import node_version
    from knee.runner import node_binary

    try:
        node = node_version(node_binary())
    except FileNotFoundError:
        node = "not found"
    return f"knee {__version__}, knee-node {node}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="knee", description="A laboratory for measuring distributed systems."
    )
    p.add_argument("--version", action="store_true", help="print knee's and knee-node's versions")
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run an experiment spec and write its run directory")
    run.add_argument("spec", type=Path, help="experiment spec (TOML)")
    run.add_argument("--preset", help="a preset defined in the spec (e.g. quick, full)")
    run.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="where run directories are created (default: ./runs)",
    )
    run.add_argument("--no-progress", action="store_true", help="no live progress bar")
    run.add_argument(
        "--keep-scratch",
        action="store_true",
        help="keep the files systems generate (run_dir/scratch) after each point",
    )
    run.add_argument("--no-report", action="store_true", help="do not write report.html at the end")
    add_live_options(run)
    report = sub.add_parser(
        "report", help="write RUN/report.html (self-contained) and RUN/figures/*.png"
    )
    report.add_argument("run_dir", type=Path, metavar="RUN", help="a run directory")
    report.add_argument(
        "--out", type=Path, help="write the report here instead of into the run directory"
    )
    compare = sub.add_parser(
        "compare", help="compare two runs point by point (compare.html + figures/*.png)"
    )
    compare.add_argument("run_a", type=Path, metavar="RUN_A")
    compare.add_argument("run_b", type=Path, metavar="RUN_B")
    compare.add_argument(
        "--out", type=Path, help="output directory (default: ./compare-<A>-vs-<B>)"
    )
    _find_parser(sub)
    _http_parser(sub)
    _grpc_parser(sub)
    sub.add_parser(
        "cleanup",
        help="remove the namespaces, links and cgroups of runs whose runner was killed",
    )
    return p


def _search_options(p: argparse.ArgumentParser) -> None:
    """The options of a capacity search (knee find, and knee http with no rate)."""
    g = p.add_argument_group("search (docs/find.md)")
    g.add_argument(
        "--tolerance",
        default="5%",
        help="how narrow the final bracket must be, hi/lo - 1 (default 5%%)",
    )
    g.add_argument("--budget", default="10m", help="wall time for the whole search (default 10m)")
    g.add_argument("--min-rate", type=float, help="the lowest rate probed, per second")
    g.add_argument("--max-rate", type=float, help="the highest rate probed, per second")
    g.add_argument("--probe", default="10s", help="the shortest probe (default 10s)")
    g.add_argument(
        "--json", action="store_true", help="print the answers as JSON on stdout at the end"
    )


def _find_parser(sub: Any) -> None:
    f = sub.add_parser(
        "find",
        help="search a spec's open-loop rate for its capacity, SLO capacity and knee",
        description="Each group of the spec's points (every swept setting but the rate) gets "
        "a search: a low-load probe, a model, geometric steps, bisection, a hold. Writes a "
        "run directory with find.json and its report (docs/find.md).",
    )
    f.add_argument("spec", type=Path, help="experiment spec (TOML)")
    f.add_argument("--preset", help="a preset defined in the spec (e.g. quick, full)")
    f.add_argument("--series", help="search only this series")
    f.add_argument("--slo", help="latency objective, e.g. 'p99<50ms' (any percentile, or mean)")
    _search_options(f)
    f.add_argument("--out", type=Path, default=Path("runs"), help="default: ./runs")
    f.add_argument("--no-progress", action="store_true", help="no live progress bar")
    f.add_argument("--no-report", action="store_true", help="do not write report.html")
    add_live_options(f)


def _http_parser(sub: Any) -> None:
    from knee.loadcli import add_load_options, add_run_options, add_tls_options

    h = sub.add_parser(
        "http",
        help="load an HTTP/1.1 service (http:// or https://) at a rate (or a sweep of rates) "
        "and write a report",
        description="Drive URL with keep-alive connections at --rate (or each of --rates), "
        "latency from each request's intended send time; writes a run directory and its "
        "report, as `knee run` does (docs/http.md).",
    )
    h.add_argument("url", help="http://HOST:PORT/PATH?QUERY or https://...")
    add_load_options(h, "requests")
    h.add_argument("-X", "--method", default="GET")
    h.add_argument("-H", "--header", action="append", default=[], help="'Name: value'")
    h.add_argument("--body", help="request body, or @FILE")
    h.add_argument(
        "--server-timing",
        default="app",
        help="Server-Timing entries that add up to server time (comma-separated)",
    )
    h.add_argument("--detail", help="the Server-Timing entry kept as the detail (e.g. db)")
    add_tls_options(h)
    h.add_argument(
        "--no-tls-resume",
        action="store_true",
        help="https: a full TLS handshake on every new connection (default: resume sessions)",
    )
    protocol = h.add_mutually_exclusive_group()
    protocol.add_argument(
        "--h2c",
        action="store_true",
        help="http: cleartext HTTP/2 by prior knowledge (default: HTTP/1.1; https: h2 when "
        "the server chooses it by ALPN)",
    )
    protocol.add_argument(
        "--http1", action="store_true", help="HTTP/1.1 only (https: ALPN offers only http/1.1)"
    )
    _search_options(h)
    add_run_options(h, "http")
    add_live_options(h)


def _grpc_parser(sub: Any) -> None:
    from knee.loadcli import add_load_options, add_run_options, add_tls_options

    g = sub.add_parser(
        "grpc",
        help="load a gRPC service with unary calls at a rate (or a sweep, or a search for its "
        "capacity) and write a report",
        description="Call METHOD of TARGET at --rate (or each of --rates; with neither, search "
        "for the capacity), the request message built from --data through the service's "
        ".proto; latency from each call's intended send time. Flags follow ghz and grpcurl "
        "(docs/grpc.md).",
    )
    g.add_argument(
        "target", help="HOST:PORT or http://HOST:PORT (h2c, plaintext), https://HOST:PORT (TLS)"
    )
    g.add_argument(
        "--proto", action="append", default=[], metavar="FILE", help="the service's .proto file"
    )
    g.add_argument(
        "-i",
        "--import-paths",
        action="append",
        default=[],
        metavar="DIRS",
        help="comma-separated folders where the .proto's imports are (its own folder is one)",
    )
    g.add_argument("--protoset", metavar="FILE", help="a compiled FileDescriptorSet instead")
    g.add_argument("--call", required=True, help="package.Service/Method (a unary method)")
    g.add_argument("-d", "--data", default="{}", help="the request message as JSON, or @FILE")
    g.add_argument("-m", "--metadata", help='metadata as a JSON object, e.g. \'{"k":"v"}\'')
    g.add_argument("-H", "--header", action="append", default=[], help="metadata 'key: value'")
    add_load_options(g, "calls")
    add_tls_options(g)
    _search_options(g)
    add_run_options(g, "grpc")
    add_live_options(g)


def _run(args: argparse.Namespace, console: Console) -> int:
    from knee.live.options import expected_run_s
    from knee.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec, args.preset)
    except SpecError as e:
        print(e, file=sys.stderr)
        return EXIT_SPEC_ERROR
    live = _start_live(args, spec, expected_run_s(spec.points), "run", console)
    if live is False:
        return EXIT_SPEC_ERROR
    try:
        return _run_spec(args, console, spec, live)
    finally:
        if live is not None:
            live.stop()


def _start_live(
    args: argparse.Namespace, spec: Any, expected_s: float | None, kind: str, console: Console
) -> Any:
    """The live page (knee.live), started and its URL printed; None when off; False when
    its address cannot be used (said in one line)."""
    from knee.live.options import LiveArgsError, wanted

    prog = f"knee {args.command}"
    where: tuple[str, int] = ("", 0)
    try:
        asked = wanted(args, expected_s, sys.stdout.isatty())
        if asked is None:
            return None
        from knee.live import Live

        where = asked
        links = {  # each emulated host's link rate, each way (docs/hosts.md)
            name: float(host.settings["rate_mbit"]) * 1e6 / 8
            for name, host in spec.placement.hosts.items()
            if host.settings.get("rate_mbit")
        }
        live = Live(where, spec.experiment["name"], spec.experiment["system"], kind, links)
    except LiveArgsError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return False
    except OSError as e:  # the port is taken, the address is not this machine's
        print(f"{prog}: --live: cannot serve on {where[0]}:{where[1]}: {e}", file=sys.stderr)
        return False
    url = live.start()
    console.print(f"live page:     {url}  (Prometheus: {url}metrics)", highlight=False)
    return live


def _run_spec(args: argparse.Namespace, console: Console, spec: Any, live: Any) -> int:
    from knee.hosts import HostError, Unsupported
    from knee.results import SUMMARY
    from knee.runner import NodeFailed, interrupt, run_experiment
    from knee.runner.display import point_notes, summary_table

    interrupt.install()
    display = _RunDirDisplay(console, enabled=not args.no_progress, observers=_observers(live))
    try:
        run_dir = run_experiment(spec, args.out, display, keep_scratch=args.keep_scratch)
    except Unsupported as e:  # refused before anything started
        print(f"knee: {args.spec}: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except HostError as e:
        print(f"knee: {e}", file=sys.stderr)
        print("knee: every node was stopped and every host removed", file=sys.stderr)
        return EXIT_NODE_FAILED
    except NodeFailed as e:
        print(f"knee: {e}", file=sys.stderr)
        print(
            "knee: every node was stopped; what was measured is in the run directory",
            file=sys.stderr,
        )
        if display.run_dir is not None and not args.no_report:
            _report(display.run_dir, None, console)  # what was measured, failure noted
        return EXIT_NODE_FAILED
    except OSError as e:  # the run directory could not be written (a full disk)
        where = display.run_dir if display.run_dir is not None else args.out
        print(f"knee: writing the run directory {where} failed: {e}", file=sys.stderr)
        print(
            "knee: every node was stopped; what was written before is in the run directory",
            file=sys.stderr,
        )
        return EXIT_NODE_FAILED
    except KeyboardInterrupt:
        print(
            "knee: interrupted; every node was stopped; partial results were written",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    import json

    points = json.loads((run_dir / SUMMARY).read_text())["points"]
    console.print(summary_table(points))
    for line in point_notes(points):
        console.print(line, highlight=False)
    console.print(f"run directory: {run_dir}")
    console.print(f"summary:       {run_dir / SUMMARY}")
    code = 0 if args.no_report else _report(run_dir, None, console, live)
    return code or _slo_verdict(points)


def _observers(live: Any) -> list[Any]:
    return [] if live is None else [live]


def _slo_verdict(points: list[dict[str, Any]]) -> int:
    """The SLO as a threshold: EXIT_SLO_MISSED when a point missed it at one-sided 99% confidence,
    a warning (and 0) for each point whose interval straddles it."""
    missed = 0
    for p in points:
        slo = p.get("slo")
        if not slo:
            continue
        if slo["verdict"] == "missed":
            missed += 1
            print(f"knee: {p['label']}: {slo['detail']}", file=sys.stderr)
        elif slo["verdict"] == "undecided":
            print(
                f"knee: warning: {p['label']}: {slo['detail']}; undecided: a longer run would tell",
                file=sys.stderr,
            )
    return EXIT_SLO_MISSED if missed else 0


class _RunDirDisplay(Display):
    """The runner's display, remembering the run directory (to report a failed run)."""

    run_dir: Path | None = None

    def run_started(self, run_dir: Path, n_points: int) -> None:
        self.run_dir = run_dir
        super().run_started(run_dir, n_points)


def _refused(*run_dirs: Path) -> bool:
    """A directory that is not a readable run is refused in one line (knee.report.rundir),
    before anything is read or written."""
    from knee.report.rundir import RunDirError, check

    for run_dir in run_dirs:
        try:
            check(run_dir)
        except RunDirError as e:
            print(f"knee: {e}", file=sys.stderr)
            return True
    return False


def _unreadable(where: str, e: Exception) -> bool:
    """Data that cannot be decoded (a damaged page in a Parquet file whose footer was fine:
    its checksum or its encoding is wrong) is printed in one line, as a refused run
    directory is. Such errors are raised by pyarrow itself (an ArrowException, or an
    OSError from its own code); an OSError from anywhere else (a full disk while writing
    the report) is a failed report."""
    import pyarrow as pa

    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    in_pyarrow = tb is not None and "pyarrow" in tb.tb_frame.f_code.co_filename
    if not (isinstance(e, pa.ArrowException) or (isinstance(e, OSError) and in_pyarrow)):
        return False
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    print(
        f"knee: {where}: a run's data cannot be read, a file is damaged ({first})", file=sys.stderr
    )
    return True


def _report(run_dir: Path, out: Path | None, console: Console, live: Any = None) -> int:
    """Writes the report; a failure is printed and gives a non-zero exit code, and the run
    directory stays as it is."""
    from knee.report import build

    if _refused(run_dir):
        return EXIT_SPEC_ERROR
    try:
        written = build(run_dir, out)
    except Exception as e:  # any bug in a section must not look like a lost run
        if _unreadable(str(run_dir), e):
            return EXIT_SPEC_ERROR
        traceback.print_exc()
        print(f"knee: the report failed: {type(e).__name__}: {e}", file=sys.stderr)
        print(f"knee: the run directory {run_dir} is intact", file=sys.stderr)
        return EXIT_REPORT_FAILED
    for warning in written.warnings:
        print(f"knee: report warning: {warning}", file=sys.stderr)
    console.print(
        f"report:        {written.html} ({len(written.figures)} figures, {written.seconds:.1f} s)"
    )
    if live is not None:
        live.report_written(Path(written.html).resolve())
    return 0


def _compare(args: argparse.Namespace, console: Console) -> int:
    from knee.report.compare import NothingMatched, build

    if _refused(args.run_a, args.run_b):
        return EXIT_SPEC_ERROR
    out = args.out or Path(f"compare-{args.run_a.resolve().name}-vs-{args.run_b.resolve().name}")
    try:
        written = build(args.run_a, args.run_b, out)
    except NothingMatched as e:
        print("\n".join(f"knee: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return EXIT_SPEC_ERROR
    except Exception as e:
        if _unreadable(f"{args.run_a} or {args.run_b}", e):
            return EXIT_SPEC_ERROR
        traceback.print_exc()
        print(f"knee: the comparison failed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_REPORT_FAILED
    console.print(f"comparison:    {written.html} ({len(written.figures)} figures)")
    return 0


def _http(args: argparse.Namespace, console: Console) -> int:
    """`knee http`: a spec built from the arguments, run as `knee run` runs one, or, with
    no rate, searched as `knee find` searches one."""
    from knee.httpcli import HttpArgsError, http_spec

    try:
        doc = http_spec(args)
    except HttpArgsError as e:
        print(f"knee http: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    return _run_doc(doc, args, console, "knee http")


def _grpc(args: argparse.Namespace, console: Console) -> int:
    """`knee grpc`: as `knee http`, the call checked first (`knee-node grpc-check`), so a
    .proto that does not compile, an unknown method or --data that does not match is one
    line before anything starts."""
    from knee.grpccli import GrpcArgsError, check_call, grpc_spec
    from knee.runner import node_binary

    try:
        doc = grpc_spec(args)
        check_call(str(node_binary()), as_table(doc["driver"], "driver"))
    except GrpcArgsError as e:
        print(f"knee grpc: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    return _run_doc(doc, args, console, "knee grpc")


def _run_doc(doc: ConfigTable, args: argparse.Namespace, console: Console, prog: str) -> int:
    """A one-line command's spec run as `knee run` runs one, or, with no rate, searched as
    `knee find` searches one."""
    import tempfile

    from knee.loadcli import searching
    from knee.toml_writer import dump_toml

    with tempfile.TemporaryDirectory(prefix="knee-load-") as tmp:
        spec = Path(tmp) / f"{args.name}.toml"
        spec.write_text(dump_toml(doc))
        run_args = argparse.Namespace(
            **vars(args), spec=spec, preset=None, series=None, keep_scratch=False
        )
        if searching(args):
            return _find(run_args, console, prog=prog)
        return _run(run_args, console)


def _find(args: argparse.Namespace, console: Console, prog: str = "knee find") -> int:
    """`knee find`: the search, its answers printed (and as JSON with --json), the report."""
    from knee.find.cli import FindArgsError, options
    from knee.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec, args.preset)
        opts = options(args)
    except (SpecError, FindArgsError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    live = _start_live(args, spec, opts.budget_s, "search", console)
    if live is False:
        return EXIT_SPEC_ERROR
    try:
        return _find_spec(args, console, prog, spec, opts, live)
    finally:
        if live is not None:
            live.stop()


def _find_spec(
    args: argparse.Namespace, console: Console, prog: str, spec: Any, opts: Any, live: Any
) -> int:
    import json

    from knee.find.cli import print_answers
    from knee.find.run import EveryRequestFailed, FindError, find
    from knee.hosts import HostError, Unsupported
    from knee.runner import NodeFailed, interrupt

    interrupt.install()
    display = _RunDirDisplay(console, enabled=not args.no_progress, observers=_observers(live))
    try:
        run_dir = find(spec, opts, args.out, display)
    except (FindError, Unsupported) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except EveryRequestFailed as e:
        print(f"{prog}: {e}", file=sys.stderr)
        if display.run_dir is not None:
            print(f"{prog}: what was measured is in {display.run_dir}", file=sys.stderr)
            if not args.no_report:
                _report(display.run_dir, None, console)
        return EXIT_ALL_FAILED
    except (HostError, NodeFailed) as e:
        print(f"knee: {e}", file=sys.stderr)
        print(
            "knee: every node was stopped; what was measured is in the run directory",
            file=sys.stderr,
        )
        if display.run_dir is not None and not args.no_report:
            _report(display.run_dir, None, console)
        return EXIT_NODE_FAILED
    except KeyboardInterrupt:
        print(
            "knee: interrupted; every node was stopped; the search so far is in find.json",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    answers = json.loads((run_dir / "summary.json").read_text())["find"]
    print_answers(console, answers)
    console.print(f"run directory: {run_dir}")
    console.print(f"search path:   {run_dir / 'find.json'}")
    code = 0 if args.no_report else _report(run_dir, None, console, live)
    if args.json:
        sys.stdout.write(json.dumps(answers, indent=2) + "\n")
    return code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Not a terminal (a log, CI): wide enough that the summary table is not wrapped.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    if args.version:
        print(_version())
        return 0
    if args.command == "run":
        return _run(args, console)
    if args.command == "report":
        return _report(args.run_dir, args.out, console)
    if args.command == "compare":
        return _compare(args, console)
    if args.command == "http":
        return _http(args, console)
    if args.command == "grpc":
        return _grpc(args, console)
    if args.command == "find":
        return _find(args, console)
    if args.command == "cleanup":
        from knee.hosts import sweep

        return sweep.main(console.print)
    _parser().print_help()
    return EXIT_SPEC_ERROR


if __name__ == "__main__":
    sys.exit(main())
