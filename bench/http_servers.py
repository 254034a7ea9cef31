#!/usr/bin/env python3
"""knee's HTTP closed loop against wrk (Debian's package) on every real server of the
conformance matrix (tests/real_http_servers.py: python's http.server, gunicorn, uvicorn,
Node, Go net/http, nginx with and without keep-alive and over TLS).

Per server: `knee-node load http` with a closed schedule of 16 clients (its one engine
thread, no think time, every sample recorded) and `wrk -t1 -c16`, the same duration on the
same server, rounds alternating which goes first, REPEATS rounds; medians. The server (every
thread of every process of its session) is pinned to CPU 0, each generator to CPU 1.

- max throughput, knee / wrk, target >= 0.9 on every server. Both are responses completed
  within the run's duration over that duration: wrk's Requests/sec (its complete responses
  over its run time); knee's from its samples (a response read, whatever its status, with
  `received_ns` at most `duration` after the `start` line, over `duration`).
- generator CPU ns per response (user + sys of the generator process over its whole run,
  over every response it read), knee / wrk: information, lower is better.
- failures, said rather than hidden: knee's by reason (the samples' `arg`,
  knee.contract.HTTP_ARGS; non-2xx by code), wrk's socket errors and non-2xx/3xx count.

Exits 0 when it ran (a missed target is a measurement), 1 when something broke (a server
did not start, a generator failed or printed nothing usable).

    python3 bench/http_servers.py [--quick]
    python3 bench/http_servers.py --smoke   # 1 s on nginx-keepalive and http.server: seconds
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import benchlib
import psutil
from benchlib import (
    BENCH_DIR,
    BenchError,
    ensure_wrk,
    find_knee_node,
    json_lines,
    median,
    run_child,
)

sys.path.insert(0, str(BENCH_DIR.parent / "python"))  # this tree's knee, not an installed one
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # the servers are the tests' own

from real_http_servers import NAMES, RealServer, ServerStartError, real_server  # noqa: E402

from knee.contract import HTTP_ARGS  # noqa: E402
from knee.results import SAMPLE_DTYPE, STATUS_NAMES, read_sample_records  # noqa: E402

REPEATS_FULL = 3
REPEATS_QUICK = 1
SECONDS_FULL = 10.0
SECONDS_QUICK = 3.0
#: --smoke: one second on two servers (one keeps connections, one closes them), so that
#: every step runs; the figures are not judged.
SECONDS_SMOKE = 1.0
SMOKE_SERVERS = ("nginx-keepalive", "python-http.server")
SERVER_CPUS = {0}
GENERATOR_CPUS = {1}
CONNECTIONS = 16
#: Beyond the duration, a generator's run may take this long (knee's 1 s grace, start-up).
CHILD_SLACK_S = 20.0
#: Target for knee's throughput / wrk's on every server.
TARGET_RATIO = 0.9


@dataclass
class Measured:
    """One generator's run on one server."""

    rate_per_s: float
    cpu_ns_per_response: float
    failures: Counter[str]


@dataclass
class ServerResult:
    name: str
    knee: list[Measured] = field(default_factory=list)
    wrk: list[Measured] = field(default_factory=list)
    broken: str | None = None
    pinned: str = ""

    def med(self, side: str, what: str) -> float:
        return median([getattr(m, what) for m in getattr(self, side)])

    def ratio(self, what: str) -> float:
        return self.med("knee", what) / self.med("wrk", what)

    def failures(self, side: str) -> Counter[str]:
        total: Counter[str] = Counter()
        for m in getattr(self, side):
            total.update(m.failures)
        return total


def server_pids(pid: int) -> set[int]:
    """The server's processes: its PID, its descendants, and the rest of its session
    (real_server starts it in a session of its own)."""
    pids = {pid}
    try:
        pids |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        pass
    for p in psutil.pids():
        try:
            if os.getsid(p) == pid:
                pids.add(p)
        except OSError:
            continue
    return pids


def pin_server(pid: int) -> str:
    """Pins every thread of every process of the server to SERVER_CPUS (threads and
    processes it makes later inherit it); checks it; says how many of each."""
    pids, threads = server_pids(pid), 0
    for p in sorted(pids):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except FileNotFoundError:
            continue  # gone meanwhile
        for tid in tids:
            try:
                os.sched_setaffinity(tid, SERVER_CPUS)
                threads += 1
            except ProcessLookupError:
                continue
        try:
            if os.sched_getaffinity(p) != SERVER_CPUS:
                raise BenchError(f"process {p} of the server is not on CPUs {SERVER_CPUS}")
        except ProcessLookupError:
            continue
    return f"{len(pids)} processes, {threads} threads"


def knee_run(knee: Path, server: RealServer, workdir: Path, seconds: float) -> Measured:
    """One `knee-node load http` closed loop on the generator CPU."""
    samples = workdir / "samples.bin"
    samples.unlink(missing_ok=True)
    driver: dict[str, object] = {"requests": [{"method": "GET", "path": server.path}]}
    if server.tls:
        driver["tls_insecure"] = True  # the throwaway certificate; wrk checks none either
        # wrk makes a full TLS handshake on every connection: so does knee here, for a like
        # comparison (by default knee resumes sessions, as browsers do, at ~2/3 the CPU).
        driver["tls_resume"] = False
    config = {
        "target": server.url,
        "schedule": {"kind": "closed", "clients": CONNECTIONS},
        "duration_s": seconds,
        "samples_path": str(samples),
        "histogram_path": str(workdir / "histogram.csv"),
        "driver": driver,
    }
    cmd = [str(knee), "load", "http", "--name", "gen", "--config", json.dumps(config)]
    run = run_child(cmd, timeout_s=seconds + CHILD_SLACK_S, cpus=GENERATOR_CPUS)
    events = json_lines(run.stdout)
    start = [e["start_ns"] for e in events if e.get("event") == "start"]
    done = [e for e in events if e.get("event") == "done"]
    if not start or not done:
        raise BenchError("knee-node load printed no start or done line")
    # Every sample recorded: one 96-byte record per request.
    if samples.stat().st_size != SAMPLE_DTYPE.itemsize * done[-1]["completed"]:
        raise BenchError(f"knee-node load did not record every sample: {done[-1]}")
    r = read_sample_records(samples)
    response = (r["flags"] != 0) & (r["arg"] == 0)  # a whole response read, any status
    responses = int(response.sum())
    if responses == 0:
        raise BenchError(f"knee-node load read no response: {done[-1]}")
    end_ns = start[-1] + int(seconds * 1e9)
    in_time = int((response & (r["received_ns"] <= end_ns)).sum())
    failures: Counter[str] = Counter()
    bad = r[r["status"] != 0]
    for status, arg, code in zip(bad["status"], bad["arg"], bad["flags"], strict=True):
        if arg:
            failures[HTTP_ARGS.get(int(arg), f"arg {arg}")] += 1
        elif code:
            failures[f"HTTP {code}"] += 1
        else:
            failures[STATUS_NAMES[int(status)]] += 1
    return Measured(in_time / seconds, run.cpu_ns / responses, failures)


def wrk_run(wrk: str, server: RealServer, seconds: float) -> Measured:
    """One `wrk -t1 -c16` run on the generator CPU."""
    url, timeout_s = f"{server.url}{server.path}", seconds + CHILD_SLACK_S
    run = benchlib.wrk_run(wrk, url, CONNECTIONS, seconds, timeout_s, GENERATOR_CPUS)
    total = run.total
    if total == 0:
        raise BenchError(f"wrk completed no response: {run.stdout[-300:]!r}")
    failures: Counter[str] = Counter()
    if errors := re.search(r"Socket errors: (.*)", run.stdout):
        for kind, n in re.findall(r"(\w+) (\d+)", errors.group(1)):
            if int(n):
                failures[kind] = int(n)
    if non2xx := re.search(r"Non-2xx or 3xx responses: (\d+)", run.stdout):
        failures["non-2xx/3xx"] = int(non2xx.group(1))
    return Measured(run.rate_per_s, run.cpu_ns / total, failures)


def describe(m: Measured, side: str) -> str:
    failed = f", failures {said(m.failures)}" if m.failures else ""
    return f"{side} {m.rate_per_s:,.0f}/s {m.cpu_ns_per_response:,.0f} ns/resp{failed}"


def said(failures: Counter[str]) -> str:
    if not failures:
        return "none"
    return ", ".join(f"{k} {n}" for k, n in sorted(failures.items(), key=lambda kv: -kv[1]))


def bench_server(
    index: int, name: str, knee: Path, wrk: str, workdir: Path, repeats: int, seconds: float
) -> ServerResult:
    result = ServerResult(name)
    try:
        with real_server(name, workdir / name, str(knee)) as server:
            result.pinned = pin_server(server.pid)
            print(f"{name}: {server.url}{server.path}, pinned {result.pinned}", flush=True)
            for i in range(repeats):
                knee_first = (index + i) % 2 == 0
                lines = []
                for side in ("knee", "wrk") if knee_first else ("wrk", "knee"):
                    result.pinned = pin_server(server.pid)  # again: workers it made since
                    if side == "knee":
                        result.knee.append(knee_run(knee, server, workdir, seconds))
                    else:
                        result.wrk.append(wrk_run(wrk, server, seconds))
                    lines.append(describe(getattr(result, side)[-1], side))
                print(f"  round {i + 1}: " + "; ".join(lines), flush=True)
    except (BenchError, ServerStartError, OSError, KeyError, ValueError) as e:
        result.broken = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        print(f"{name}: broken: {str(e)[-1500:]}", file=sys.stderr, flush=True)
    return result


def print_table(results: list[ServerResult]) -> None:
    header = (
        "server",
        "knee req/s",
        "wrk req/s",
        "knee/wrk",
        "knee ns/resp",
        "wrk ns/resp",
        "knee/wrk",
        "knee failures",
        "wrk errors",
    )
    cells = [header]
    for r in results:
        if r.broken:
            cells.append((r.name, "broken", "", "", "", "", "", r.broken[:60], ""))
            continue
        cells.append(
            (
                r.name,
                f"{r.med('knee', 'rate_per_s'):,.0f}",
                f"{r.med('wrk', 'rate_per_s'):,.0f}",
                f"{r.ratio('rate_per_s'):.3f}",
                f"{r.med('knee', 'cpu_ns_per_response'):,.0f}",
                f"{r.med('wrk', 'cpu_ns_per_response'):,.0f}",
                f"{r.ratio('cpu_ns_per_response'):.3f}",
                said(r.failures("knee")),
                said(r.failures("wrk")),
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    for i, c in enumerate(cells):
        print("  ".join(s.ljust(w) for s, w in zip(c, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> int:
    args = benchlib.speed_args(__doc__, "1 round of 1 s, 2 servers", "1 round of 3 s per server")
    repeats = REPEATS_QUICK if args.quick or args.smoke else REPEATS_FULL
    seconds = SECONDS_SMOKE if args.smoke else SECONDS_QUICK if args.quick else SECONDS_FULL
    names = SMOKE_SERVERS if args.smoke else NAMES
    if (
        tools := benchlib.run_or_broken("http_servers", lambda: (find_knee_node(), ensure_wrk()))
    ) is None:
        return 1
    knee, wrk = tools
    with tempfile.TemporaryDirectory(prefix="knee-http-servers-") as tmp:
        results = [
            bench_server(i, name, knee, wrk, Path(tmp), repeats, seconds)
            for i, name in enumerate(names)
        ]
    print()
    print_table(results)
    print(
        f"\n(medians of {repeats} alternating round(s) of {seconds:g} s per generator; "
        f"req/s: responses completed within the duration / the duration, knee from its "
        f"samples, wrk its Requests/sec; ns/resp: the generator's user + sys CPU / responses "
        f"read; failures summed over the rounds; server on CPU 0, generators on CPU 1)\n"
    )
    summary: dict[str, object] = {}
    for r in results:
        if r.broken:
            print(f"BROKEN  {r.name}: {r.broken}")
            summary[r.name] = None
            continue
        ratio = r.ratio("rate_per_s")
        verdict = "PASS" if ratio >= TARGET_RATIO else "MISS"
        print(f"{verdict}    {r.name}: throughput knee / wrk {ratio:.3f} (target >= 0.9)")
        summary[r.name] = {
            "throughput_ratio": round(ratio, 4),
            "cpu_ratio": round(r.ratio("cpu_ns_per_response"), 4),
            "knee_rate_per_s": round(r.med("knee", "rate_per_s"), 1),
            "wrk_rate_per_s": round(r.med("wrk", "rate_per_s"), 1),
        }
    summary["all_pass"] = all(
        not r.broken and r.ratio("rate_per_s") >= TARGET_RATIO for r in results
    )
    print(json.dumps(summary))
    return 1 if any(r.broken for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
