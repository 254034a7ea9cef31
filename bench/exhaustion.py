"""Resource exhaustion against every framed-TCP knee server: memory (RSS) and threads before,
during and after each case, the connections refused or timed out, and whether a normal
client was served meanwhile. tests/test_exhaustion.py asserts the bounds; this prints them.

    python3 bench/exhaustion.py [--idle 10000] [--systems echo,matrix,chat,share]
    python3 bench/exhaustion.py --smoke     # echo only, 200 idle connections: seconds

Cases: `idle` (that many connections that send nothing, against max_connections = 64),
`slowloris` (20 clients trickling a request a byte a second, read_timeout_ms = 1000),
`never-read` (a client sending requests and reading no reply, write_timeout_ms = 1000).
Stream is not here: its service is UDP (docs/limits.md). The last line is JSON: per case, the
server's RSS during the attack over its RSS before (its own baseline, taken in the run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
# The attack clients are the tests' own (one copy of each attack).
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from attack_clients import (  # noqa: E402
    SYSTEMS,
    MiB,
    Usage,
    close_all,
    heavy_request,
    never_read,
    open_idle,
    raise_open_files,
    served,
    server_params,
    slowloris,
    trickle,
    usage,
    wait_threads,
)
from benchlib import find_knee_node  # noqa: E402
from wire_client import Client  # noqa: E402

MAX_CONNECTIONS = 64
SLOW_CLIENTS = 20


class Node:
    """A `knee-node serve` and its latest `stats` line."""

    def __init__(self, binary: Path, system: str, scratch: Path, limits: dict[str, Any]) -> None:
        config = {"listen": "127.0.0.1:0", "server": server_params(system, scratch), **limits}
        self.log_path = scratch / f"{system}.stderr.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(binary), "serve", system, "--config", json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert self.proc.stdout is not None
        ready = json.loads(self.proc.stdout.readline())
        self.addr: str = ready["addr"]
        self.stats: dict[str, Any] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        if system == "share":
            self.wait(lambda s: s.get("files_ready") is True, 30)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if event.get("event") == "stats":
                with self._cond:
                    self.stats = event
                    self._cond.notify_all()

    def wait(self, pred: Any, timeout_s: float = 15) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not (self.stats and pred(self.stats)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self.stats

    def log_lines(self, text: str) -> int:
        """Lines about `text`, and the lines counting those not logged (once a second)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return sum(text in ln or " more connections " in ln for ln in lines)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def case_idle(node: Node, count: int) -> dict[str, Any]:
    with Client(node.addr) as normal:
        socks = open_idle(node.addr, count)
        try:
            stats = node.wait(lambda s: s["refused"] >= count - (MAX_CONNECTIONS - 1))
            during = usage(node.proc.pid)
            ok = served(normal)
        finally:
            close_all(socks)
    return {"during": during, "served": ok, "refused": stats["refused"], "timed_out": None}


def case_slowloris(node: Node) -> dict[str, Any]:
    with Client(node.addr) as normal:
        socks = slowloris(node.addr, SLOW_CLIENTS, 16 * MiB)
        try:
            time.sleep(0.5)
            during = usage(node.proc.pid)
            took_s = trickle(socks, timeout_s=15)
            ok = served(normal)
        finally:
            close_all(socks)
    stats = node.wait(lambda s: s["timed_out"] >= SLOW_CLIENTS)
    return {"during": during, "served": ok, "timed_out": stats["timed_out"], "took_s": took_s}


def case_never_read(node: Node, system: str) -> dict[str, Any]:
    with Client(node.addr) as normal:
        sock, _ = never_read(node.addr, heavy_request(system), max_bytes=64 * MiB)
        try:
            during = usage(node.proc.pid)
            stats = node.wait(lambda s: s["timed_out"] >= 1)
            ok = served(normal)
        finally:
            sock.close()
    return {"during": during, "served": ok, "timed_out": stats["timed_out"]}


def mib(u: Usage) -> str:
    return f"{u.rss_bytes / MiB:.1f}"


def run(binary: Path, system: str, case: str, idle: int, scratch: Path) -> list[str]:
    limits = {
        "idle": {"max_connections": MAX_CONNECTIONS},
        "slowloris": {"read_timeout_ms": 1000},
        "never-read": {"write_timeout_ms": 1000},
    }[case]
    node = Node(binary, system, scratch, limits)
    try:
        before = usage(node.proc.pid)
        if case == "idle":
            res = case_idle(node, idle)
        elif case == "slowloris":
            res = case_slowloris(node)
        else:
            res = case_never_read(node, system)
        threads_after = wait_threads(node.proc.pid, before.threads)
        after = usage(node.proc.pid)
    finally:
        node.stop()
    log_lines = node.log_lines("refusing a connection" if case == "idle" else "closing conn")
    during: Usage = res["during"]
    return [
        system,
        case,
        mib(before),
        mib(during),
        mib(after),
        str(before.threads),
        str(during.threads),
        str(threads_after),
        str(res.get("refused") or "-"),
        str(res.get("timed_out") or "-"),
        str(log_lines),
        "yes" if res["served"] else "NO",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=10_000, help="idle connections per server")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--smoke", action="store_true", help="echo, 200 idle connections")
    args = parser.parse_args()
    if args.smoke:  # every case, in seconds; its figures are not judged
        args.idle, args.systems = 200, "echo"
    raise_open_files(args.idle + 1024)
    binary = find_knee_node()
    header = [
        "system",
        "case",
        "rss MiB before",
        "during",
        "after",
        "threads before",
        "during",
        "after",
        "refused",
        "timed out",
        "log lines",
        "served",
    ]
    rows = [header]
    with tempfile.TemporaryDirectory(prefix="knee-exhaustion-") as tmp:
        for system in args.systems.split(","):
            for case in ("idle", "slowloris", "never-read"):
                scratch = Path(tmp) / f"{system}-{case}"
                scratch.mkdir()
                rows.append(run(binary, system, case, args.idle, scratch))
                print(" ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    # RSS during the attack / before it, per system and case (columns 2 and 3).
    ratios = {f"{r[0]}_{r[1]}_rss_ratio": float(r[3]) / float(r[2]) for r in rows[1:]}
    print(json.dumps({k: round(v, 3) for k, v in ratios.items()}))
    return 0 if all(r[-1] == "yes" for r in rows[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
