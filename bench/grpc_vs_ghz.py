#!/usr/bin/env python3
"""knee's gRPC load generator (`knee-node load grpc`) against ghz (built from the Go module
proxy by scripts/h2-peers) on the same grpc-go server: tests/grpc_apps/go_grpc (built by
scripts/grpc-servers), unary knee.test.Echo/Call (tests/protos/echo.proto), cleartext h2c.

The server runs pinned to CPU 0 with 4096 workers and the shortest call it has (1 ms: a
call holds its worker that long, so the server's own limit is 4096 calls a millisecond,
far above what one core serves); every generator runs on CPU 1. Rounds alternate knee and
ghz, 3 times (--smoke: once); medians.

a. Throughput at saturation: C connections x M calls at once on each, no pause (knee: a
   closed loop of C x M clients over load.connections C, which knee's HTTP/2 engine takes
   in turn, so each carries M; ghz --connections C -c C*M --cpus 1 -z T, its C*M workers
   spread over the C connections). knee / ghz, target >= 0.9.
b. CPU per call of the generator in those runs (user + sys of the whole process, from
   getrusage of the reaped child, as /proc/<pid>/stat's utime + stime add up). knee / ghz,
   target <= 1.1.
c. The stall: a constant-rate run (knee at RATE calls/s; ghz --rps RATE) during which the
   server is frozen (SIGSTOP, then SIGCONT) for 1 s. knee's p99 and max count from each
   call's intended send time, so they must include the stall (about 1 s); ghz's count from
   when it started each call. Printed side by side (information: the ratio is knee's p99
   over ghz's).

Exits 0 even when a target is missed (a measurement), 1 when something broke.

    python3 bench/grpc_vs_ghz.py [--quick | --smoke]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib
from benchlib import BENCH_DIR, BenchError, ensure_h2_peers, find_knee_node, run_child

REPO = BENCH_DIR.parent
PROTO = REPO / "tests" / "protos" / "echo.proto"
CALL = "knee.test.Echo/Call"
DATA = {"text": "knee"}
SERVER_CPUS = {0}
GENERATOR_CPUS = {1}
CHILD_SLACK_S = 30.0
START_TIMEOUT_S = 30.0
#: The server's workers and each call's sleep (its shortest: 1 ms).
SERVER_WORKERS = 4096
SERVER_SLEEP_MS = 1


FULL = benchlib.PeerPlan(
    4, 16, 10.0, stall_rate_per_s=1000.0, stall_run_s=6.0, stall_at_s=2.0, stall_s=1.0
)
QUICK = benchlib.PeerPlan(
    4, 16, 4.0, stall_rate_per_s=1000.0, stall_run_s=4.0, stall_at_s=1.5, stall_s=1.0
)
#: Seconds, once: every step runs and prints its ratio, its figures not judged.
SMOKE = benchlib.PeerPlan(
    2, 8, 1.0, stall_rate_per_s=300.0, stall_run_s=2.0, stall_at_s=0.7, stall_s=0.5, repeats=1
)


class GoGrpc:
    """The grpc-go test server, started by this script (its PID is what the stall freezes),
    pinned to the server CPU (GOMAXPROCS follows: 1)."""

    def __init__(self, workdir: Path) -> None:
        script = REPO / "scripts" / "grpc-servers"
        subprocess.run([str(script), "install"], check=True, timeout=900)
        where = subprocess.run([str(script), "path"], capture_output=True, text=True, check=True)
        binary = where.stdout.strip()
        argv = [binary, "-listen", "127.0.0.1:0", "-workers", str(SERVER_WORKERS)]
        argv += ["-sleep-ms", str(SERVER_SLEEP_MS)]
        self.out = workdir / "go_grpc.out"
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: os.sched_setaffinity(0, SERVER_CPUS),
            )
        found = benchlib.wait_started(
            self.proc,
            lambda: re.search(r"listening (\S+)\n", self.out.read_text()),
            "go_grpc",
            self.out,
            START_TIMEOUT_S,
            self.stop,
        )
        self.addr = found.group(1)

    def stop(self) -> None:
        self.proc.terminate()  # by its PID: our own child
        self.proc.wait(timeout=30)


def knee_run(knee: Path, addr: str, workdir: Path, load: dict, max_s: float) -> tuple[dict, int]:
    """One `knee-node load grpc` run on the generator CPU: its done line and CPU ns."""
    driver = {"proto_files": [str(PROTO)], "call": CALL, "data": DATA}
    config = {
        "target": f"http://{addr}",
        "warmup_s": 0.0,
        "timeout_ms": 10000.0,
        "driver": {**driver, **load.pop("driver", {})},
        **load,
    }
    run = benchlib.knee_load(knee, "grpc", workdir, config, max_s + CHILD_SLACK_S, GENERATOR_CPUS)
    benchlib.say_not_ok(run.done, "calls")
    return run.done, run.cpu_ns


def ghz_run(ghz: Path, addr: str, args: list[str], max_s: float) -> tuple[dict, int]:
    """ghz on the generator CPU (--cpus 1): its JSON report and CPU ns."""
    cmd = [str(ghz), "--insecure", "--proto", str(PROTO), "--call", CALL]
    cmd += ["-d", json.dumps(DATA), "--cpus", "1", "-O", "json", *args, addr]
    run = run_child(cmd, timeout_s=max_s + CHILD_SLACK_S, cpus=GENERATOR_CPUS)
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError as e:
        raise BenchError(f"ghz printed no JSON report: {run.stdout[-400:]!r}") from e
    return report, run.cpu_ns


def ghz_ok(report: dict) -> int:
    return int((report.get("statusCodeDistribution") or {}).get("OK", 0))


def ghz_percentile_ns(report: dict, percentage: int) -> float:
    for entry in report.get("latencyDistribution") or []:
        if int(entry["percentage"]) == percentage:
            return float(entry["latency"])
    raise BenchError(f"ghz's report has no p{percentage}")


def saturation(plan: benchlib.PeerPlan, knee: Path, ghz: Path, addr: str, workdir: Path) -> dict:
    c, m, secs = plan.connections, plan.streams, plan.saturation_s

    def ghz_round() -> benchlib.Saturated:
        args = ["--connections", str(c), "-c", str(c * m), "-z", f"{secs:g}s"]
        report, cpu_ns = ghz_run(ghz, addr, args, secs)
        ok = ghz_ok(report)
        if ok == 0:
            raise BenchError(f"ghz: no call ok: {report.get('errorDistribution')}")
        return benchlib.Saturated(ok, report["total"] / 1e9, cpu_ns)

    return benchlib.saturation_rounds(
        plan,
        lambda load: knee_run(knee, addr, workdir, load, secs),
        ghz_round,
        ("ghz", "call", "call"),
    )


def stall(plan: benchlib.PeerPlan, knee: Path, ghz: Path, server: GoGrpc, workdir: Path) -> dict:
    """One constant-rate run of each generator with the server frozen for stall_s."""
    c, m, rate = plan.connections, plan.streams, plan.stall_rate_per_s
    load = {
        "schedule": {"kind": "constant", "rate_per_s": rate},
        "connections": c,
        "duration_s": plan.stall_run_s,
    }
    pids = [server.proc.pid]
    (done, _), knee_frozen_s = benchlib.stalled(
        plan, pids, lambda: knee_run(knee, server.addr, workdir, load, plan.stall_run_s)
    )
    # Enough workers that none waits for another at this rate (ghz's --rps paces the calls).
    args = ["--connections", str(c), "-c", str(c * m), "--rps", f"{rate:g}"]
    args += ["-z", f"{plan.stall_run_s:g}s"]
    (report, _), ghz_frozen_s = benchlib.stalled(
        plan, pids, lambda: ghz_run(ghz, server.addr, args, plan.stall_run_s)
    )
    g_p99, g_max = ghz_percentile_ns(report, 99), float(report["slowest"])
    print(
        f"stall ({plan.stall_s:g} s at {plan.stall_at_s:g} s, {rate:g}/s): knee (frozen "
        f"{knee_frozen_s:.2f} s) p99 {done['latency']['p99_ns'] / 1e6:.1f} ms max "
        f"{done['latency']['max_ns'] / 1e6:.1f} ms, {done['ok']} ok of {done['completed']}; "
        f"ghz (frozen {ghz_frozen_s:.2f} s) p99 {g_p99 / 1e6:.1f} ms max {g_max / 1e6:.1f} "
        f"ms, {ghz_ok(report)} ok of {report['count']}",
        flush=True,
    )
    return {
        **benchlib.knee_tail_ns(done),
        "ghz_p90_ns": ghz_percentile_ns(report, 90),
        "ghz_p99_ns": g_p99,
        "ghz_max_ns": g_max,
        "stall_s": plan.stall_s,
    }


def run_all(plan: benchlib.PeerPlan) -> dict:
    knee = find_knee_node()
    _, ghz = ensure_h2_peers()
    with tempfile.TemporaryDirectory(prefix="knee-grpc-bench-") as tmp:
        workdir = Path(tmp)
        server = GoGrpc(workdir)
        try:
            return {
                "saturation": saturation(plan, knee, ghz, server.addr, workdir),
                "stall": stall(plan, knee, ghz, server, workdir),
            }
        finally:
            server.stop()


def main() -> int:
    args = benchlib.speed_args(__doc__, benchlib.SMOKE_HELP, "shorter runs (about a minute)")
    plan = benchlib.pick_plan(args, SMOKE, QUICK, FULL)
    if (m := benchlib.run_or_broken("grpc_vs_ghz", lambda: run_all(plan))) is None:
        return 1
    s, st = m["saturation"], m["stall"]
    rate = s["knee_rate_per_s"] / s["ghz_rate_per_s"]
    cpu = s["knee_cpu_ns_per_call"] / s["ghz_cpu_ns_per_call"]
    p99 = st["knee_p99_ns"] / st["ghz_p99_ns"]
    print()
    print(
        f"{plan.connections} connections x {plan.streams} streams; "
        f"medians of {plan.repeats} alternating rounds"
    )
    print(
        f"throughput knee / ghz: {s['knee_rate_per_s']:.0f} / {s['ghz_rate_per_s']:.0f} = "
        f"{rate:.2f} (target >= 0.9)"
    )
    print(
        f"CPU per call knee / ghz: {s['knee_cpu_ns_per_call']:.0f} / "
        f"{s['ghz_cpu_ns_per_call']:.0f} ns = {cpu:.2f} (target <= 1.1)"
    )
    print(benchlib.stall_line(st, "ghz"))
    print(json.dumps({"throughput_ratio": rate, "cpu_ratio": cpu, "stall_p99_ratio": p99, **m}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
