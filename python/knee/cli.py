"""The `knee` command."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from knee import __version__

EXIT_SPEC_ERROR = 2
EXIT_NODE_FAILED = 3
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
    return p


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace, console: Console) -> int:
    from knee.results import SUMMARY
    from knee.runner import NodeFailed, run_experiment
    from knee.runner.display import Display, summary_table
    from knee.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec, args.preset)
    except SpecError as e:
        print(e, file=sys.stderr)
        return EXIT_SPEC_ERROR
    signal.signal(signal.SIGTERM, _on_sigterm)
    display = Display(console, enabled=not args.no_progress)
    try:
        run_dir = run_experiment(spec, args.out, display, keep_scratch=args.keep_scratch)
    except NodeFailed as e:
        print(f"knee: {e}", file=sys.stderr)
        print(
            "knee: every node was stopped; what was measured is in the run directory",
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
    console.print(f"run directory: {run_dir}")
    console.print(f"summary:       {run_dir / SUMMARY}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Not a terminal (a log, CI): wide enough that the summary table is not wrapped.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    if args.version:
        print(_version())
        return 0
    if args.command == "run":
        return _run(args, console)
    _parser().print_help()
    return EXIT_SPEC_ERROR


if __name__ == "__main__":
    sys.exit(main())
