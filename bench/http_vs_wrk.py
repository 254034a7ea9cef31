#!/usr/bin/env python3
"""knee's HTTP load generator against wrk (Debian's package) on the same nginx.

nginx runs one worker pinned to CPU 0 (`knee-node serve http`); every generator runs on CPU 1.
Rounds alternate knee and wrk (or the minimal client), 3 times (--smoke: once); medians.

a. CPU ns per request of the generator at its maximum closed-loop throughput: one thread,
   16 keep-alive connections, no pause (knee records every sample; wrk keeps a histogram).
   knee / wrk, target <= 1.0.
b. That maximum throughput (requests/s), knee / wrk, target >= 1.0.
c. p50 latency at a fixed open-loop rate on one connection: knee (constant schedule,
   latency from the intended send time) / a minimal blocking C client that this script
   compiles (latency from its actual send), target <= 1.3.

Exits 0 even when a target is missed (a measurement), 1 when something broke.

    python3 bench/http_vs_wrk.py [--quick | --smoke]
"""

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import benchlib
from benchlib import BenchError, ensure_wrk, find_knee_node, json_lines, median, run_child

SERVER_CPU = 0
GENERATOR_CPUS = {1}
CONNECTIONS = 16
CHILD_SLACK_S = 20.0


@dataclass(frozen=True)
class Plan:
    closed_s: float
    open_rate_per_s: float
    open_requests: int
    #: Alternating rounds (medians).
    repeats: int = 3


FULL = Plan(closed_s=10.0, open_rate_per_s=1000.0, open_requests=5000)
QUICK = Plan(closed_s=4.0, open_rate_per_s=1000.0, open_requests=2000)
#: Seconds, once: every comparison runs and prints its ratio, its figures not judged.
SMOKE = Plan(closed_s=1.0, open_rate_per_s=1000.0, open_requests=200, repeats=1)


#: Seconds nginx gets to start.
START_TIMEOUT_S = 30.0


def knee_http(knee: Path, url: str, workdir: Path, load: dict, max_s: float) -> tuple[dict, int]:
    """One `knee-node load http` run on the generator CPU: its done line and CPU ns."""
    config = {"target": url, "driver": {"requests": [{"method": "GET", "path": "/"}]}, **load}
    run = benchlib.knee_load(knee, "http", workdir, config, max_s + CHILD_SLACK_S, GENERATOR_CPUS)
    if run.done["errors"]:
        raise BenchError(f"knee-node load: error responses: {run.done}")
    # nginx's one pinned worker stalls for a second or more now and then on a busy machine
    # (wrk sees it too).
    benchlib.say_not_ok(run.done, "requests")
    # Every sample recorded: the file holds one 96-byte record per request.
    if run.samples.stat().st_size != 96 * run.done["completed"]:
        raise BenchError("knee-node load did not record every sample")
    return run.done, run.cpu_ns


def wrk_run(wrk: str, url: str, seconds: float) -> tuple[int, float, int]:
    """wrk -t1 -c16: (requests, requests/s, CPU ns)."""
    timeout_s = seconds + CHILD_SLACK_S
    run = benchlib.wrk_run(wrk, f"{url}/", CONNECTIONS, seconds, timeout_s, GENERATOR_CPUS)
    if "Non-2xx" in run.stdout:
        raise BenchError(f"wrk saw error responses: {run.stdout[-300:]}")
    if errors := re.search(r"Socket errors: .*", run.stdout):
        print(f"  wrk: {errors.group(0)}", flush=True)  # as for knee above: said
    return run.total, run.rate_per_s, run.cpu_ns


#: The minimal blocking client: one connection, a request per 1/rate slot (sleep to 100 us
#: before it, then spin), latency from the actual send to the response's last byte
#: (Content-Length framing, which nginx sends). Prints its p50 in ns.
MINIMAL_CLIENT_C = r"""
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv) {
    if (argc != 5) return 2;
    int port = atoi(argv[2]), n = atoi(argv[3]);
    double rate = atof(argv[4]);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char req[256], buf[65536];
    int req_len = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s:%d\r\n\r\n", argv[1], port);
    uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)n), start = now_ns();
    for (int i = 0; i < n; i++) {
        uint64_t slot = start + (uint64_t)(i * 1e9 / rate), t;
        while ((t = now_ns()) < slot) {
            if (slot - t > 100000) {
                struct timespec d = {0, (long)(slot - t - 100000)};
                nanosleep(&d, NULL);
            }
        }
        uint64_t sent = now_ns();
        if (write(fd, req, (size_t)req_len) != req_len) return 4;
        size_t got = 0;
        long need = -1;
        for (;;) {
            ssize_t r = read(fd, buf + got, sizeof buf - got - 1);
            if (r <= 0) return 5;
            got += (size_t)r;
            buf[got] = 0;
            char *end = strstr(buf, "\r\n\r\n");
            if (end && need < 0) {
                char *cl = strcasestr(buf, "Content-Length:");
                if (!cl) return 6;
                need = (end + 4 - buf) + atol(cl + 15);
            }
            if (need >= 0 && (long)got >= need) break;
        }
        lat[i] = now_ns() - sent;
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp);
    printf("{\"p50_ns\": %llu}\n", (unsigned long long)lat[(n - 1) / 2]);
    return 0;
}
"""


def compile_client(workdir: Path) -> Path:
    src, out = workdir / "minimal_http_client.c", workdir / "minimal_http_client"
    src.write_text(MINIMAL_CLIENT_C)
    cmd = ["cc", "-O2", "-std=c99", "-D_GNU_SOURCE", "-Wall", "-o", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise BenchError(f"compiling the minimal client failed: {proc.stderr.strip()}")
    return out


def minimal_client(client: Path, url: str, rate_per_s: float, requests: int) -> float:
    """The minimal client's p50 in ns, on the generator CPU."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    cmd = [str(client), host, port, str(requests), str(rate_per_s)]
    max_s = requests / rate_per_s + CHILD_SLACK_S
    lines = json_lines(run_child(cmd, timeout_s=max_s, cpus=GENERATOR_CPUS).stdout)
    if not lines:
        raise BenchError("the minimal client printed nothing")
    return float(lines[-1]["p50_ns"])


def run_all(plan: Plan) -> dict:
    knee, wrk = find_knee_node(), ensure_wrk()
    with tempfile.TemporaryDirectory(prefix="knee-http-bench-") as tmp:
        workdir = Path(tmp)
        nginx_table = {"dir": str(workdir / "nginx"), "workers": 1, "cpu": SERVER_CPU}
        nginx = benchlib.ServedNginx(knee, workdir, nginx_table, START_TIMEOUT_S)
        try:
            url = f"http://{nginx.addr}"
            return rounds(plan, knee, wrk, compile_client(workdir), url, workdir)
        finally:
            nginx.stop()


def rounds(plan: Plan, knee: Path, wrk: str, client: Path, url: str, workdir: Path) -> dict:
    closed = {
        "schedule": {"kind": "closed", "clients": CONNECTIONS},
        "duration_s": plan.closed_s,
    }
    opened = {
        "schedule": {"kind": "constant", "rate_per_s": plan.open_rate_per_s},
        "connections": 1,
        "requests": plan.open_requests,
    }
    k_cpu, w_cpu, k_rate, w_rate, k_p50, c_p50 = [], [], [], [], [], []
    for i in range(plan.repeats):
        done, cpu_ns = knee_http(knee, url, workdir, closed, plan.closed_s)
        k_cpu.append(cpu_ns / done["completed"])
        k_rate.append(done["completed"] / done["elapsed_s"])
        total, rate, cpu_ns = wrk_run(wrk, url, plan.closed_s)
        w_cpu.append(cpu_ns / total)
        w_rate.append(rate)
        max_s = plan.open_requests / plan.open_rate_per_s
        done, _ = knee_http(knee, url, workdir, opened, max_s)
        k_p50.append(done["latency"]["p50_ns"])
        c_p50.append(minimal_client(client, url, plan.open_rate_per_s, plan.open_requests))
        print(
            f"round {i + 1}: closed loop knee {k_rate[-1]:.0f}/s {k_cpu[-1]:.0f} ns/req, "
            f"wrk {w_rate[-1]:.0f}/s {w_cpu[-1]:.0f} ns/req; p50 at "
            f"{plan.open_rate_per_s:g}/s knee {k_p50[-1] / 1e3:.1f} us, "
            f"client {c_p50[-1] / 1e3:.1f} us",
            flush=True,
        )
    return {
        "cpu_ns_per_request": {"knee": median(k_cpu), "wrk": median(w_cpu)},
        "max_rate_per_s": {"knee": median(k_rate), "wrk": median(w_rate)},
        "p50_ns": {"knee": median(k_p50), "client": median(c_p50)},
    }


def main() -> int:
    args = benchlib.speed_args(__doc__, benchlib.SMOKE_HELP, "shorter runs (about 40 s)")
    plan = benchlib.pick_plan(args, SMOKE, QUICK, FULL)
    if (m := benchlib.run_or_broken("http_vs_wrk", lambda: run_all(plan))) is None:
        return 1
    cpu = m["cpu_ns_per_request"]["knee"] / m["cpu_ns_per_request"]["wrk"]
    rate = m["max_rate_per_s"]["knee"] / m["max_rate_per_s"]["wrk"]
    p50 = m["p50_ns"]["knee"] / m["p50_ns"]["client"]
    print()
    print(f"CPU ns per request, knee / wrk:       {cpu:.2f}  (target <= 1.0)")
    print(f"max closed-loop throughput, knee / wrk: {rate:.2f}  (target >= 1.0)")
    print(f"p50 on one connection, knee / client:  {p50:.2f}  (target <= 1.3)")
    print(f"(medians of {plan.repeats} alternating rounds)")
    print(json.dumps({"cpu_ratio": cpu, "throughput_ratio": rate, "p50_ratio": p50, **m}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
