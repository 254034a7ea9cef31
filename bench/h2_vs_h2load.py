#!/usr/bin/env python3
"""knee's HTTP/2 load generator against h2load (nghttp2's, Debian's nghttp2-client) on the
same servers: nginx over TLS (h2 by ALPN, `knee-node serve http` with `http2`) and Go
net/http in cleartext (h2c by prior knowledge, tests/http_apps/go_h2).

Each server runs pinned to CPU 0 (nginx: one worker); every generator runs on CPU 1. Rounds
alternate knee and h2load, 3 times (--smoke: once); medians.

a. Throughput at saturation: a closed loop of C connections x M streams, no pause (knee:
   `knee-node load http`, driver.protocol h2 or h2c, load.connections C, driver.max_streams
   M, C x M closed-loop clients; h2load -c C -m M -t 1 -D T). knee / h2load, target >= 0.9.
b. CPU per request of the generator in those runs (user + sys of the whole process, from
   getrusage of the reaped child: what /proc/<pid>/stat's utime + stime add up to, in us
   rather than clock ticks). knee / h2load, target <= 1.1. knee writes every request's
   sample to disk; h2load keeps counters.
c. The stall: a constant-rate run on Go h2c (knee at RATE requests/s; h2load --rps RATE/C
   per client) during which the server is frozen (SIGSTOP, then SIGCONT) for 1 s. knee's p99
   and max latency count from each request's intended send time, so they must include the
   stall (about 1 s), as a coordinated-omission-free measurement does; h2load's (from its
   per-request log, --log-file) count from when it sent each request. Printed side by side
   (information: the ratio is knee's p99 over h2load's).

Exits 0 even when a target is missed (a measurement), 1 when something broke.

    python3 bench/h2_vs_h2load.py [--quick | --smoke]
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import benchlib
import numpy as np
from benchlib import (
    BENCH_DIR,
    BenchError,
    ensure_h2_peers,
    find_knee_node,
    percentiles_ns,
    run_child,
)

sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # the servers are the tests' own
from real_http_servers import build_go_app, free_port, throwaway_certs  # noqa: E402

SERVER_CPUS = {0}
GENERATOR_CPUS = {1}
CHILD_SLACK_S = 30.0
#: Seconds a server gets to answer its first request.
START_TIMEOUT_S = 30.0


FULL = benchlib.PeerPlan(
    4, 16, saturation_s=10.0, stall_rate_per_s=2000.0, stall_run_s=6.0, stall_at_s=2.0, stall_s=1.0
)
QUICK = benchlib.PeerPlan(
    4, 16, saturation_s=4.0, stall_rate_per_s=2000.0, stall_run_s=4.0, stall_at_s=1.5, stall_s=1.0
)
#: Seconds, once: every step runs and prints its ratio, its figures not judged.
SMOKE = benchlib.PeerPlan(
    2, 8, 1.0, stall_rate_per_s=500.0, stall_run_s=2.0, stall_at_s=0.7, stall_s=0.5, repeats=1
)


@dataclass
class Target:
    """A running server: its URL, how knee speaks to it, and the processes to freeze."""

    name: str
    url: str
    protocol: str  # knee's driver.protocol
    pids: list[int]
    ca_file: str | None = None


def _answers(host: str, port: int) -> bool:
    try:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        try:
            conn.request("GET", "/")
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return False


def _pin_server() -> None:
    os.sched_setaffinity(0, SERVER_CPUS)


class GoH2c:
    """Go net/http, h2c by prior knowledge (and HTTP/1.1, used only to see it is up), pinned
    to the server CPU (GOMAXPROCS follows the affinity: 1)."""

    def __init__(self, workdir: Path) -> None:
        binary = build_go_app(workdir / "go-build", app="go_h2")
        self.port = free_port()
        self.err = workdir / "go-h2.err"
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [str(binary), str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=_pin_server,
            )
        benchlib.wait_started(
            self.proc,
            lambda: _answers("127.0.0.1", self.port),
            "go-h2",
            self.err,
            START_TIMEOUT_S,
            self.stop,
        )
        url = f"http://127.0.0.1:{self.port}"
        self.target = Target("go-h2c", url, "h2c", [self.proc.pid])

    def stop(self) -> None:
        self.proc.terminate()  # by its PID: our own child
        self.proc.wait(timeout=30)


class NginxH2:
    """nginx with one worker pinned to the server CPU, TLS and HTTP/2 (h2 by ALPN), as a
    point runs it: `knee-node serve http` writes its config and supervises it."""

    def __init__(self, knee: Path, workdir: Path) -> None:
        ca, cert, key = throwaway_certs(workdir / "tls")
        nginx = {
            "dir": str(workdir / "nginx"),
            "workers": 1,
            "cpu": min(SERVER_CPUS),
            "tls": {"cert": str(cert), "key": str(key)},
            "http2": True,
        }
        self.nginx = benchlib.ServedNginx(knee, workdir, nginx, START_TIMEOUT_S)
        url = f"https://{self.nginx.addr}"
        self.target = Target("nginx-h2-tls", url, "h2", [self.nginx.proc.pid], str(ca))

    def stop(self) -> None:
        self.nginx.stop()


def knee_run(
    knee: Path, t: Target, workdir: Path, load: dict, max_s: float
) -> tuple[dict, int, Path]:
    """One `knee-node load http` run on the generator CPU: its done line, its CPU ns and
    its samples file."""
    driver: dict[str, object] = {
        "protocol": t.protocol,
        "requests": [{"method": "GET", "path": "/"}],
    }
    if t.ca_file:
        driver["tls_ca_file"] = t.ca_file
    config = {
        "target": t.url,
        "warmup_s": 0.0,
        "timeout_ms": 10000.0,
        "driver": {**driver, **load.pop("driver", {})},
        **load,
    }
    run = benchlib.knee_load(knee, "http", workdir, config, max_s + CHILD_SLACK_S, GENERATOR_CPUS)
    benchlib.say_not_ok(run.done, "requests")
    return run.done, run.cpu_ns, run.samples


H2LOAD_COUNTS = re.compile(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded")


def h2load_run(
    h2load: str, t: Target, args: list[str], max_s: float
) -> tuple[int, float, int, str]:
    """h2load on the generator CPU, one thread: (succeeded, its wall s, CPU ns, stdout)."""
    cmd = [h2load, "-t", "1", *args, f"{t.url}/"]
    run = run_child(cmd, timeout_s=max_s + CHILD_SLACK_S, cpus=GENERATOR_CPUS)
    counts = H2LOAD_COUNTS.search(run.stdout)
    finished = re.search(r"finished in ([\d.]+)(ms|s),", run.stdout)
    if not counts or not finished:
        raise BenchError(f"h2load printed no totals: {run.stdout[-400:]!r}")
    if t.protocol == "h2" and "Application protocol: h2" not in run.stdout:
        raise BenchError(f"h2load did not speak h2: {run.stdout[-400:]!r}")
    wall_s = float(finished.group(1)) / (1e3 if finished.group(2) == "ms" else 1.0)
    return int(counts.group(3)), wall_s, run.cpu_ns, run.stdout


def saturation(plan: benchlib.PeerPlan, knee: Path, h2load: str, t: Target, workdir: Path) -> dict:
    c, m, secs = plan.connections, plan.streams, plan.saturation_s

    def h2load_round() -> benchlib.Saturated:
        ok, wall_s, cpu_ns, _ = h2load_run(
            h2load, t, ["-c", str(c), "-m", str(m), "-D", f"{secs:g}"], secs
        )
        if ok == 0:
            raise BenchError(f"h2load: no request succeeded on {t.name}")
        return benchlib.Saturated(ok, wall_s, cpu_ns)

    return benchlib.saturation_rounds(
        plan,
        lambda load: knee_run(knee, t, workdir, load, secs)[:2],
        h2load_round,
        ("h2load", "request", "req"),
        target=t.name,
        driver={"max_streams": m},
    )


def h2load_log_latencies_ns(log: Path) -> np.ndarray:
    """h2load's --log-file: start time (us since the epoch), status, duration (us) per
    request, tab-separated; the durations of the 2xx ones, in ns."""
    rows = np.loadtxt(log, dtype=np.int64, ndmin=2, usecols=(1, 2))
    if rows.size == 0:
        raise BenchError("h2load's log holds no request")
    ok = (rows[:, 0] >= 200) & (rows[:, 0] < 300)
    return rows[ok, 1] * 1000


def stall(plan: benchlib.PeerPlan, knee: Path, h2load: str, server: GoH2c, workdir: Path) -> dict:
    """One constant-rate run of each generator with the server frozen for stall_s."""
    t, c, m = server.target, plan.connections, plan.streams
    load = {
        "schedule": {"kind": "constant", "rate_per_s": plan.stall_rate_per_s},
        "connections": c,
        "duration_s": plan.stall_run_s,
        "driver": {"max_streams": m},
    }
    (done, _, _), knee_frozen_s = benchlib.stalled(
        plan, t.pids, lambda: knee_run(knee, t, workdir, load, plan.stall_run_s)
    )
    log = workdir / "h2load.log"
    per_client = plan.stall_rate_per_s / c
    args = ["-c", str(c), "-m", str(m), "--rps", f"{per_client:g}", "-D", f"{plan.stall_run_s:g}"]
    (ok, _, _, out), h2load_frozen_s = benchlib.stalled(
        plan,
        t.pids,
        lambda: h2load_run(h2load, t, [*args, "--log-file", str(log)], plan.stall_run_s),
    )
    h2 = percentiles_ns(h2load_log_latencies_ns(log))
    said = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    print(
        f"stall on {t.name} ({plan.stall_s:g} s at {plan.stall_at_s:g} s, "
        f"{plan.stall_rate_per_s:g}/s): knee (frozen {knee_frozen_s:.2f} s) p99 "
        f"{done['latency']['p99_ns'] / 1e6:.1f} ms max {done['latency']['max_ns'] / 1e6:.1f} ms, "
        f"{done['ok']} ok of {done['completed']}; h2load (frozen {h2load_frozen_s:.2f} s) p99 "
        f"{h2['p99_ns'] / 1e6:.1f} ms max {h2['max_ns'] / 1e6:.1f} ms, {ok} ok"
        + (
            f" (its own summary: min {said.group(1)} max {said.group(2)} mean {said.group(3)})"
            if said
            else ""
        ),
        flush=True,
    )
    return {
        **benchlib.knee_tail_ns(done),
        "knee_ok": float(done["ok"]),
        "h2load_p90_ns": h2["p90_ns"],
        "h2load_p99_ns": h2["p99_ns"],
        "h2load_max_ns": h2["max_ns"],
        "h2load_ok": float(ok),
        "stall_s": plan.stall_s,
    }


def run_all(plan: benchlib.PeerPlan, targets: list[str]) -> dict:
    knee = find_knee_node()
    h2load, _ = ensure_h2_peers()
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="knee-h2-bench-") as tmp:
        workdir = Path(tmp)
        if "go-h2c" in targets:
            go = GoH2c(workdir)
            try:
                out["go-h2c"] = saturation(plan, knee, h2load, go.target, workdir)
                out["stall"] = stall(plan, knee, h2load, go, workdir)
            finally:
                go.stop()
        if "nginx-h2-tls" in targets:
            nginx = NginxH2(knee, workdir)
            try:
                out["nginx-h2-tls"] = saturation(plan, knee, h2load, nginx.target, workdir)
            finally:
                nginx.stop()
    return out


def main() -> int:
    args = benchlib.speed_args(__doc__, benchlib.SMOKE_HELP, "shorter runs (about 2 minutes)")
    plan = benchlib.pick_plan(args, SMOKE, QUICK, FULL)
    m = benchlib.run_or_broken("h2_vs_h2load", lambda: run_all(plan, ["go-h2c", "nginx-h2-tls"]))
    if m is None:
        return 1
    summary: dict[str, float] = {}
    print()
    print(
        f"{plan.connections} connections x {plan.streams} streams; "
        f"medians of {plan.repeats} alternating rounds"
    )
    for name in ("go-h2c", "nginx-h2-tls"):
        s = m[name]
        rate = s["knee_rate_per_s"] / s["h2load_rate_per_s"]
        cpu = s["knee_cpu_ns_per_request"] / s["h2load_cpu_ns_per_request"]
        key = name.replace("-", "_")
        summary[f"{key}_throughput_ratio"] = rate
        summary[f"{key}_cpu_ratio"] = cpu
        print(
            f"{name:13s} throughput knee / h2load: {s['knee_rate_per_s']:.0f} / "
            f"{s['h2load_rate_per_s']:.0f} = {rate:.2f} (target >= 0.9)  "
            f"CPU per request: {s['knee_cpu_ns_per_request']:.0f} / "
            f"{s['h2load_cpu_ns_per_request']:.0f} ns = {cpu:.2f} (target <= 1.1)"
        )
    st = m["stall"]
    summary["stall_p99_ratio"] = st["knee_p99_ns"] / st["h2load_p99_ns"]
    print(benchlib.stall_line(st, "h2load"))
    print(json.dumps({**summary, **{k: v for k, v in m.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
