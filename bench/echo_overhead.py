#!/usr/bin/env python3
"""What knee-node's load generator costs, against a minimal C client, on one echo server.

a. p50 round trip (send to reply, as the baseline measures it) at 1000 requests/s on one
   connection: knee `constant` vs the baseline. knee's p50 from the intended send time,
   which adds its send lag, is printed too.
b. CPU ns per request of the load process at its maximum closed-loop rate (1 client;
   load process and the server's connection thread pinned to one CPU).
c. Open-loop Poisson at 20,000 requests/s: achieved/target rate and late sends.

Each comparison alternates knee and baseline, 3 times, and reports medians. Exits 0 even
when a target is missed (this is a measurement), 1 when something broke.

    python3 bench/echo_overhead.py [--quick | --smoke]
"""

import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import benchlib
from benchlib import (
    BENCH_DIR,
    BenchError,
    Row,
    Section,
    find_knee_node,
    json_lines,
    median,
    run_child,
)

REQUEST_BYTES = 16
REPLY_BYTES = 16
SERVER_READY_TIMEOUT_S = 10.0
# Slack on top of a run's own length before it counts as hung.
CHILD_SLACK_S = 20.0
# One sample record of the load generator (see crates/knee-node/src/load/recorder.rs).
#: One samples-file record (docs/samples.md): 10 u64 (ids, times, bytes), client and arg u32,
#: op and flags u16, status and service u8, pad u16.
SAMPLE = struct.Struct("<10Q2I2H2BH")
assert SAMPLE.size == 96
SAMPLE_STATUS = 14  # index of `status` in a record


@dataclass(frozen=True)
class Plan:
    low_rate_per_s: float
    low_rate_requests: int
    closed_requests: int
    poisson_rate_per_s: float
    poisson_duration_s: float
    #: Runs of each comparison (medians).
    repeats: int = 3


FULL = Plan(1000.0, 3000, 50_000, 20_000.0, 5.0)
QUICK = Plan(1000.0, 1000, 10_000, 20_000.0, 2.0)
#: Seconds, once each: every comparison runs and prints its ratio, its figures not judged.
SMOKE = Plan(1000.0, 200, 2_000, 5_000.0, 0.5, repeats=1)


# --- processes -------------------------------------------------------------------------


class EchoServer:
    """`knee-node serve echo`, serving on its connection threads, stopped by PID."""

    def __init__(self, knee: Path, workdir: Path) -> None:
        self.out_path = workdir / "server.out"
        self.err_path = workdir / "server.err"
        cmd = [knee, "serve", "echo", "--name", "srv", "--config", '{"server":{"threads":0}}']
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err)
        self.addr = self._wait_ready()

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for event in json_lines(self.out_path.read_text()):
                if event.get("event") == "ready":
                    return str(event["addr"])
            if self.proc.poll() is not None:
                raise BenchError(f"server exited {self.proc.returncode}: {self._stderr_tail()}")
            time.sleep(0.05)
        raise BenchError("server printed no ready line within 10 s")

    def _stderr_tail(self) -> str:
        return " | ".join(self.err_path.read_text().strip().splitlines()[-5:])

    def pin_new_connections(self, cpus: set[int]) -> None:
        """Pins the threads of connections accepted from now on (they inherit the accept
        thread's affinity, and the accept loop runs on the server's main thread)."""
        os.sched_setaffinity(self.proc.pid, cpus)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@dataclass
class KneeResult:
    done: dict
    cpu_ns: int
    samples_path: Path

    @property
    def cpu_ns_per_request(self) -> float:
        return self.cpu_ns / max(1, self.done["sent"])


def run_knee(
    knee: Path, addr: str, workdir: Path, load: dict, max_s: float, cpus: set[int] | None = None
) -> KneeResult:
    """One `knee-node load echo` run; `load` holds schedule and limits."""
    driver = {"request_bytes": REQUEST_BYTES, "reply_bytes": REPLY_BYTES}
    config = {"target": addr, "driver": driver, **load}
    run = benchlib.knee_load(knee, "echo", workdir, config, max_s + CHILD_SLACK_S, cpus)
    if run.done["errors"]:
        raise BenchError(f"knee-node load saw {run.done['errors']} bad replies")
    return KneeResult(done=run.done, cpu_ns=run.cpu_ns, samples_path=run.samples)


def run_baseline(
    client: Path,
    addr: str,
    requests: int,
    rate_per_s: float,
    max_s: float,
    cpus: set[int] | None = None,
) -> dict:
    host, port = addr.rsplit(":", 1)
    cmd = [str(client), host, port, str(requests), str(rate_per_s), str(REPLY_BYTES)]
    lines = json_lines(run_child(cmd, timeout_s=max_s + CHILD_SLACK_S, cpus=cpus).stdout)
    if not lines:
        raise BenchError("baseline client printed nothing")
    return lines[-1]


def compile_baseline(workdir: Path) -> Path:
    out = workdir / "baseline_client"
    src = BENCH_DIR / "baseline_client.c"
    cmd = ["cc", "-O2", "-std=c99", "-Wall", "-o", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise BenchError(f"compiling the baseline failed: {proc.stderr.strip()}")
    return out


def first_send_lateness_ns(samples_path: Path) -> float:
    """How far behind its intended time the first request of a run left."""
    records = list(SAMPLE.iter_unpack(samples_path.read_bytes()))
    if not records:
        raise BenchError("knee-node load recorded no sample")
    first = min(records, key=lambda rec: rec[1])  # earliest intended_ns
    return float(first[2] - first[1]) if first[2] else float("nan")


def sent_based_p50_ns(samples_path: Path) -> float:
    """knee's p50 measured from the actual send (not the intended time), from its samples."""
    rtts = sorted(
        rec[3] - rec[2]
        for rec in SAMPLE.iter_unpack(samples_path.read_bytes())
        if rec[SAMPLE_STATUS] == 0  # status ok
    )
    if not rtts:
        raise BenchError("knee-node load recorded no successful sample")
    return float(rtts[(len(rtts) - 1) // 2])


def alternate(knee_run: Callable[[], None], baseline_run: Callable[[], None], repeats: int) -> None:
    """Runs both `repeats` times, swapping which goes first each round."""
    for i in range(repeats):
        pair = (knee_run, baseline_run) if i % 2 == 0 else (baseline_run, knee_run)
        for run in pair:
            run()


# --- the three comparisons -------------------------------------------------------------


def bench_low_rate_p50(knee: Path, client: Path, addr: str, work: Path, plan: Plan) -> Section:
    n, rate = plan.low_rate_requests, plan.low_rate_per_s
    length_s = n / rate
    load = {
        "schedule": {"kind": "constant", "rate_per_s": rate},
        "connections": 1,
        "requests": n,
        "duration_s": length_s + 1.0,
        "warmup_s": 0.0,
    }
    knee_p50: list[float] = []
    knee_sent_p50: list[float] = []
    base_p50: list[float] = []

    def knee_run() -> None:
        r = run_knee(knee, addr, work, load, length_s)
        knee_p50.append(r.done["latency"]["p50_ns"])
        knee_sent_p50.append(sent_based_p50_ns(r.samples_path))

    def baseline_run() -> None:
        base_p50.append(run_baseline(client, addr, n, rate, length_s)["p50_ns"])

    alternate(knee_run, baseline_run, plan.repeats)
    # Like for like: both round trips run from the actual send to the reply.
    k, b = median(knee_sent_p50), median(base_p50)
    ratio = k / b
    us = "{:.1f} us".format
    rows = [
        Row(
            f"a. p50 RTT @ {rate:.0f}/s, 1 conn",
            us(k / 1e3),
            us(b / 1e3),
            ratio,
            "<= 1.3",
            ratio <= 1.3,
        ),
        Row("   knee p50 from intended send", us(median(knee_p50) / 1e3), "", None, "", None),
    ]
    return Section(rows, {"p50_ratio_knee_over_baseline": ratio})


def bench_closed_cpu(
    knee: Path, client: Path, server: EchoServer, work: Path, plan: Plan
) -> Section:
    """Both loops share one CPU with the server's connection thread. Left to the scheduler,
    client and server land on one CPU or on two from run to run, and on a VM the wake-ups
    across CPUs cost far more than the loop itself (here 26 us of client CPU per request
    instead of 8), which swamped the comparison."""
    n, addr = plan.closed_requests, server.addr
    all_cpus = os.sched_getaffinity(0)
    cpu = {min(all_cpus)}
    max_s = n / 1000.0  # generous: at least 1000 requests/s
    load = {
        "schedule": {"kind": "closed", "clients": 1, "think_ms": 0},
        "requests": n,
        "duration_s": max_s,
        "warmup_s": 0.0,
    }
    knee_cpu: list[float] = []
    knee_rate: list[float] = []
    base_cpu: list[float] = []
    base_rate: list[float] = []

    def knee_run() -> None:
        r = run_knee(knee, addr, work, load, max_s, cpus=cpu)
        if r.done["sent"] != n:
            raise BenchError(f"closed loop sent {r.done['sent']} of {n} requests")
        knee_cpu.append(r.cpu_ns_per_request)
        knee_rate.append(r.done["achieved_rate_per_s"])

    def baseline_run() -> None:
        out = run_baseline(client, addr, n, 0, max_s, cpus=cpu)
        base_cpu.append(out["cpu_ns_per_request"])
        base_rate.append(out["requests"] / out["elapsed_s"])

    server.pin_new_connections(cpu)
    try:
        alternate(knee_run, baseline_run, plan.repeats)
    finally:
        server.pin_new_connections(all_cpus)
    k, b = median(knee_cpu), median(base_cpu)
    ratio = k / b
    rate_ratio = median(knee_rate) / median(base_rate)
    rows = [
        Row(
            f"b. load CPU ns/request, closed, {n} req, 1 CPU",
            f"{k:.0f} ns",
            f"{b:.0f} ns",
            ratio,
            "<= 1.5",
            ratio <= 1.5,
        ),
        Row(
            "   achieved rate (closed, 1 client)",
            f"{median(knee_rate):.0f}/s",
            f"{median(base_rate):.0f}/s",
            rate_ratio,
            "(info)",
            None,
        ),
    ]
    metrics = {"cpu_per_request_ratio_knee_over_baseline": ratio, "closed_rate_ratio": rate_ratio}
    return Section(rows, metrics)


def bench_poisson(knee: Path, addr: str, work: Path, plan: Plan) -> Section:
    rate, length_s = plan.poisson_rate_per_s, plan.poisson_duration_s
    load = {
        "schedule": {"kind": "poisson", "rate_per_s": rate},
        "connections": 1,
        "duration_s": length_s,
        "requests": int(2 * rate * length_s),  # a bound; the duration ends the run
        "warmup_s": 0.5,
    }
    achieved: list[float] = []
    late_pct: list[float] = []
    p99: list[float] = []
    first_late: list[float] = []
    for _ in range(plan.repeats):
        result = run_knee(knee, addr, work, load, length_s)
        done = result.done
        first_late.append(first_send_lateness_ns(result.samples_path))
        achieved.append(done["achieved_rate_per_s"] / rate)
        late_pct.append(100.0 * done["late_sends"] / max(1, done["sent"]))
        p99.append(done["latency"]["p99_ns"])
    a, late = median(achieved), median(late_pct)
    rows = [
        Row(
            f"c. Poisson {rate:.0f}/s: achieved/target",
            f"{a * rate:.0f}/s",
            "",
            a,
            ">= 0.98",
            a >= 0.98,
        ),
        Row("   late sends (> 1 ms behind)", f"{late:.3f} %", "", None, "< 1 %", late < 1.0),
        Row("   p99 latency (info)", f"{median(p99) / 1e3:.0f} us", "", None, "", None),
        Row(
            "   first send behind (info)", f"{median(first_late) / 1e3:.0f} us", "", None, "", None
        ),
    ]
    return Section(rows, {"poisson_achieved_over_target": a, "poisson_late_pct": late})


def run_all(plan: Plan) -> Section:
    knee = find_knee_node()
    with tempfile.TemporaryDirectory(prefix="knee-bench-") as tmp:
        work = Path(tmp)
        client = compile_baseline(work)
        server = EchoServer(knee, work)
        try:
            print(f"knee-node: {knee}; echo server {server.addr} (pid {server.proc.pid})")
            return [
                bench_low_rate_p50(knee, client, server.addr, work, plan),
                bench_closed_cpu(knee, client, server, work, plan),
                bench_poisson(knee, server.addr, work, plan),
            ]
        finally:
            server.stop()


def main() -> int:
    args = benchlib.speed_args(
        __doc__, "one short run of each: seconds", "shorter runs (about 30 s)"
    )
    plan = benchlib.pick_plan(args, SMOKE, QUICK, FULL)
    return benchlib.timed_report(
        "echo_overhead", lambda: run_all(plan), f"medians of {plan.repeats} runs"
    )


if __name__ == "__main__":
    sys.exit(main())
