#!/usr/bin/env python3
"""How close `knee find` comes to a capacity known in advance, how long it takes against
grids of rates, and how a k6-style breakpoint ramp does on the same targets.

Targets, each with its truth measured in this script, back to back with the search:

- (a) matrix, a fixed P, server.threads = 1 and 2: truth c / S, S the mean server time of a
  low-rate run (`server_ns`). On 2 cores, threads = 2 shares the cores with the generator.
- (b) gunicorn, W sync workers each sleeping D (tests/http_apps/sleep_app.py): W / D, and
  the saturated throughput of a closed loop of 16 clients (the truth used).
- (d) a Go net/http server whose /sleep takes one of N semaphore slots for D
  (tests/http_apps/go_app, `-slots N -sleep-ms D`): N / D, and a closed loop's saturated
  throughput (the truth used).
- (c) echo on an emulated host behind a 10 Mbit/s link (network namespaces, root): truth
  the link's payload rate (1448 of every 1514 bytes of a frame) over the reply frame's
  bytes; a closed loop's saturated throughput shown beside it. Skipped, with the reason,
  where namespaces cannot be made.

For each target:

1. the search with its defaults, as a user who knows nothing would run it: `knee http URL`
   (b), `knee find SPEC` with the spec's rate at 10/s, `knee http`'s lowest rate (a, c);
   no SLO, no --probe, --min-rate, --budget (--smoke gives them: seconds, not minutes);
   its time to answer (target <= 120 s), the error |found - truth| / truth of its capacity
   answer (target <= 5%) and of its saturated throughput (information);
2. two grids, each run for P a rate as one `knee run` / `knee http --rates` sweep: 10 rates
   from 0.2 to 2 x truth (linear), and a 5%-resolution grid, rates 0.8 x 1.05^k up to 1.2 x
   truth (9 rates: a grid that already knows the capacity within 20%); each one's wall time
   and capacity error (its highest stable rate by the search's own probe decision: a point
   counts as stable by its own stability verdict and the search's error share; one where
   the search's sender check names the generator is marked "+gen"); the search's time
   over the 10-point grid's (target <= 1/3);
3. the ramp: a k6-style breakpoint test emulated with knee's generator (k6 is used only
   to say whether it is installed): `load.schedule = "steps"`, 0.5 s steps rising linearly
   to 2 x truth over the search's wall time; the breakpoint is the scheduled rate of the
   first 1 s window (by completion time, as k6 emits its metrics) whose p99 latency
   breaks p99 < 5 x S or whose failed share passes 1%, as thresholds with abortOnFail stop
   k6 there. Its error against the truth (information).

Exits 0 when it ran (a missed target is a measurement), 1 when something broke.

    python3 bench/find_accuracy.py [--quick] [--targets gunicorn,go,matrix_t1]
    python3 bench/find_accuracy.py --smoke   # matrix, 1 worker: 2 s probes, a 3-rate grid
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import benchlib
from benchlib import BENCH_DIR, BenchError, Row, Section, find_knee_node

sys.path.insert(0, str(BENCH_DIR.parent / "python"))  # this tree's knee, not an installed one

from knee.results import open_run  # noqa: E402
from knee.stats.decision import ERROR_SHARE, decide, failed_share  # noqa: E402
from knee.stats.seconds import second_of  # noqa: E402

REPO = BENCH_DIR.parent
HTTP_APPS = REPO / "tests" / "http_apps"
GRID = [round(0.2 * i, 1) for i in range(1, 11)]  # x truth
#: The 5%-resolution grid: 0.8 x 1.05^k up to 1.2 x truth.
FINE_GRID = [round(0.8 * 1.05**k, 4) for k in range(9)]
TARGET_ERROR = 0.05
TARGET_TIME_RATIO = 1 / 3
TARGET_ANSWER_S = 120.0
#: The default search's lowest rate (`knee http`'s), given to a spec's search as its rate.
DEFAULT_LOW_PER_S = 10.0
#: The default search's budget (knee.find.run.Options): the time its run may take.
DEFAULT_BUDGET_S = 600.0
SLO_FACTOR = 5.0  # the SLO: p99 < SLO_FACTOR x the service time
RAMP_STEP_S = 0.5
RAMP_FAILED_SHARE = 0.01  # k6's usual http_req_failed: rate<0.01


@dataclass
class Config:
    name: str
    probe_s: float  # the search's shortest probe, and each grid point's duration
    budget_s: float  # each search's budget
    low_s: float  # the low-rate run (matrix's S) and the closed loops
    matrix_p: int
    gunicorn_workers: int
    gunicorn_sleep_ms: float
    link_mbit: float
    reply_bytes: int
    go_slots: int = 3
    go_sleep_ms: float = 15.0


#: gunicorn: 2 sync workers x 20 ms, 100/s by construction; Go: 3 slots x 15 ms, 200/s
#: (issue 36's targets).
QUICK = Config("quick", 3.0, 300.0, 5.0, 700, 2, 20.0, 10.0, 10_000)
FULL = Config("full", 10.0, 900.0, 15.0, 700, 2, 20.0, 10.0, 100_000)
#: --smoke: every step on one target (matrix, 1 worker), its figures not judged.
SMOKE = Config("smoke", 2.0, 12.0, 2.0, 700, 2, 20.0, 10.0, 10_000)
SMOKE_GRID = [0.5, 1.5]
SMOKE_FINE_GRID = [0.95, 1.0]
SMOKE_JOBS = ("matrix_t1",)


# ---------------------------------------------------------------- running knee


def knee_cmd(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from knee.cli import main; sys.exit(main())",
        *args,
    ]


def run_knee(args: list[str], out: Path, timeout_s: float) -> tuple[str, float, Path]:
    """Runs `knee ARGS --out OUT --no-progress --no-report`; (stdout, wall s, run dir)."""
    out.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"KNEE_NODE": str(find_knee_node()), "PYTHONPATH": str(REPO / "python")}
    cmd = knee_cmd(*args, "--out", str(out), "--no-progress", "--no-report")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"knee {args[0]} timed out after {timeout_s:.0f} s") from e
    wall_s = time.monotonic() - t0
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    if proc.returncode not in (0, 5) or not runs:  # 5: an SLO missed at a fixed rate
        tail = " | ".join(proc.stderr.strip().splitlines()[-4:])
        raise BenchError(f"knee {args[0]} exited {proc.returncode}: {tail}")
    return proc.stdout, wall_s, runs[-1]


def last_json(stdout: str) -> dict[str, Any]:
    """--json's answers: from the first line that is exactly "{" to the end."""
    lines = stdout.splitlines()
    try:
        start = lines.index("{")
    except ValueError:
        raise BenchError(f"no JSON answers in the output: {stdout[-300:]!r}") from None
    return json.loads("\n".join(lines[start:]))


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r}")


def write_spec(path: Path, doc: dict[str, Any]) -> Path:
    """A spec of two levels ([section] and [section.sub]) as TOML."""
    lines: list[str] = []

    def table(name: str, body: dict[str, Any]) -> None:
        plain = {k: v for k, v in body.items() if not isinstance(v, dict) or name == "placement"}
        lines.append(f"[{name}]")
        lines.extend(f"{json.dumps(k)} = {toml_value(v)}" for k, v in plain.items())
        for k, v in body.items():
            if k not in plain:
                table(f"{name}.{k}", v)

    for name, body in doc.items():
        table(name, body)
    path.write_text("\n".join(lines) + "\n")
    return path


def point_stats(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "summary.json").read_text())["points"]


# ---------------------------------------------------------------- targets


@dataclass
class Target:
    """One target: how its truth was found, and how to search, sweep and ramp it."""

    name: str
    truth_per_s: float
    service_s: float  # for the SLO
    notes: list[str]
    spec: dict[str, Any] | None = None  # a spec's system (matrix, echo)
    url: str | None = None  # else `knee http URL`
    http_driver: dict[str, Any] = field(default_factory=dict)

    @property
    def slo(self) -> str:
        return f"p99<{SLO_FACTOR * self.service_s * 1e3:.4g}ms"

    @property
    def slo_ns(self) -> float:
        return SLO_FACTOR * self.service_s * 1e9

    def base(self) -> dict[str, Any]:
        if self.spec is not None:
            return json.loads(json.dumps(self.spec))
        return {
            "experiment": {"name": "ramp", "system": "http"},
            "server": {"target": "{0.scheme}://{0.netloc}".format(urlsplit(self.url))},
            "driver": dict(self.http_driver),
            "load": {"connections": 64, "warmup_s": 1.0, "timeout_ms": 5000.0},
        }


def matrix_target(cfg: Config, threads: int, work: Path) -> Target:
    spec = {
        "experiment": {"name": f"matrix-t{threads}", "system": "matrix", "seed": 1},
        "server": {"algorithm": "naive", "threads": threads},
        "driver": {"n": 50, "p": cfg.matrix_p},
        "load": {
            "schedule": "poisson",
            "rate_per_s": 20.0,
            "duration_s": cfg.low_s,
            "warmup_s": 1.0,
            "timeout_ms": 60000,
        },
    }
    path = write_spec(work / f"matrix-t{threads}-low.toml", spec)
    _, _, run_dir = run_knee(["run", str(path)], work / f"matrix-t{threads}-low", 300)
    p = point_stats(run_dir)[0]
    s_ns = float(p["server_ns"]["mean"])
    service_ns = float((p.get("service_ns") or {}).get("mean") or 0.0)
    truth = threads / (s_ns / 1e9)
    notes = [
        f"S = {s_ns / 1e6:.3f} ms (mean server_ns of {p['count']} requests at 20/s; "
        f"service_ns {service_ns / 1e6:.3f} ms); truth = {threads} / S = {truth:.1f}/s"
    ]
    if threads > 1:
        notes.append(
            "on 2 cores the 2 server threads share the cores with the load generator (and "
            "the other tenants): c / S is an upper bound the machine may not reach"
        )
    return Target(f"(a) matrix P={cfg.matrix_p} threads={threads}", truth, s_ns / 1e9, notes, spec)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process in its own session, started from `cmd`, ready once its port accepts
    (and `settle_s` later); stopped with its whole session."""

    def __init__(
        self, name: str, cmd: list[str], port: int, settle_s: float = 0.0, **popen: Any
    ) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            **popen,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{name} exited {self.proc.returncode} at start")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    time.sleep(settle_s)
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise BenchError(f"{name} did not listen within 20 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: every process of it
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def gunicorn(workers: int, sleep_ms: float) -> Server:
    """gunicorn's sync workers in front of tests/http_apps/sleep_app.py."""
    port = free_port()
    cmd = [sys.executable, "-m", "gunicorn", "--workers", str(workers)]
    cmd += ["--worker-class", "sync", "-b", f"127.0.0.1:{port}", "sleep_app:app"]
    env = os.environ | {"KNEE_SLEEP_MS": f"{sleep_ms:g}"}
    # The workers boot after the master listens.
    return Server("gunicorn", cmd, port, settle_s=1.0, cwd=HTTP_APPS, env=env)


def go_semaphore(slots: int, sleep_ms: float) -> Server:
    """tests/http_apps/go_app with `-slots N -sleep-ms D`: /sleep holds one of N slots for D."""
    sys.path.insert(0, str(REPO / "tests"))
    from real_http_servers import build_go_app  # the tests' build: standard library only

    port = free_port()
    cmd = [str(build_go_app()), str(port), "-slots", str(slots), "-sleep-ms", f"{sleep_ms:g}"]
    return Server("go-app", cmd, port)


def go_target(cfg: Config, server: Server, work: Path) -> Target:
    url = f"http://127.0.0.1:{server.port}/sleep"
    args = ["http", url, "--clients", "16", "--duration", f"{cfg.low_s:g}s"]
    _, _, run_dir = run_knee(args, work / "go-closed", 300)
    measured = float(point_stats(run_dir)[0]["throughput_per_s"])
    n, d = cfg.go_slots, cfg.go_sleep_ms / 1e3
    notes = [
        f"N / D = {n} / {d * 1e3:g} ms = {n / d:.1f}/s; a closed loop of 16 clients "
        f"for {cfg.low_s:g} s saturates at {measured:.1f}/s ({measured / (n / d):.3f} of "
        "N / D): the truth used",
    ]
    return Target(
        f"(d) Go net/http, {n} slots x {d * 1e3:g} ms",
        measured,
        d,
        notes,
        url=url,
        http_driver={"requests": [{"method": "GET", "path": "/sleep"}]},
    )


def gunicorn_target(cfg: Config, server: Server, work: Path) -> Target:
    url = f"http://127.0.0.1:{server.port}/"
    args = ["http", url, "--clients", "16", "--duration", f"{cfg.low_s:g}s"]
    _, _, run_dir = run_knee(args + ["--server-timing", "app"], work / "gunicorn-closed", 300)
    p = point_stats(run_dir)[0]
    measured = float(p["throughput_per_s"])
    w, d = cfg.gunicorn_workers, cfg.gunicorn_sleep_ms / 1e3
    notes = [
        f"W / D = {w} / {d * 1e3:g} ms = {w / d:.1f}/s; a closed loop of 16 clients "
        f"for {cfg.low_s:g} s saturates at {measured:.1f}/s "
        f"({measured / (w / d):.3f} of W / D): the truth used",
        f"sync workers close every connection: each request makes a new one "
        f"(mean connect {float((p.get('connect_ns') or {}).get('mean') or 0) / 1e6:.2f} ms "
        "in the closed loop)",
    ]
    return Target(
        f"(b) gunicorn {w} sync workers x {d * 1e3:g} ms",
        measured,
        d,
        notes,
        url=url,
        http_driver={"requests": [{"method": "GET", "path": "/"}], "server_timing": ["app"]},
    )


def netns_target(cfg: Config, work: Path) -> Target | str:
    """The emulated host, or the reason it cannot be made here."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root (docs/hosts.md)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "ip or tc (iproute2) is missing"
    spec = {
        "experiment": {"name": "link", "system": "echo", "seed": 1},
        "hosts": {
            "srv": {"kind": "netns", "rate_mbit": cfg.link_mbit},
            "cli": {"kind": "netns", "rate_mbit": cfg.link_mbit},
        },
        "placement": {"server": "srv", "load": "cli"},
        "driver": {"reply_bytes": cfg.reply_bytes},
        "load": {
            "schedule": "closed",
            "clients": 4,
            "duration_s": cfg.low_s,
            "warmup_s": 1.0,
            "timeout_ms": 30000,
        },
    }
    path = write_spec(work / "link-closed.toml", spec)
    try:
        _, _, run_dir = run_knee(["run", str(path)], work / "link-closed", 300)
    except BenchError as e:
        return f"the emulated hosts could not be made or run: {e}"
    p = point_stats(run_dir)[0]
    measured = float(p["throughput_per_s"])
    frame = float(open_run(run_dir).samples["bytes_in"].median())
    payload_bytes_per_s = cfg.link_mbit * 1e6 / 8 * 1448 / 1514
    truth = payload_bytes_per_s / frame
    notes = [
        f"{cfg.link_mbit:g} Mbit/s each way; reply frame {frame:.0f} B "
        f"(body {cfg.reply_bytes} B); TCP payload 1448 of each 1514-byte frame: "
        f"truth = {payload_bytes_per_s:,.0f} B/s / {frame:.0f} B = {truth:.2f}/s; "
        f"a closed loop of 4 clients for {cfg.low_s:g} s: {measured:.2f}/s "
        f"({measured / truth:.3f} of it)",
    ]
    spec["load"] = {
        "schedule": "poisson",
        "rate_per_s": 1.0,
        "duration_s": cfg.probe_s,
        "warmup_s": 1.0,
        "timeout_ms": 30000,
    }
    service_s = frame / payload_bytes_per_s
    name = f"(c) echo {cfg.reply_bytes // 1000} KB replies over {cfg.link_mbit:g} Mbit/s"
    return Target(name, truth, service_s, notes, spec)


# ---------------------------------------------------------------- the three measurements


@dataclass
class Grid:
    """A grid of rates run as one sweep: its wall time, verdicts and capacity."""

    wall_s: float = 0.0
    rates: list[float] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    p99_ms: list[float | None] = field(default_factory=list)
    capacity: float | None = None


@dataclass
class Outcome:
    target: Target
    found: float | None = None
    interval: list[float | None] = field(default_factory=lambda: [None, None])
    saturated: float | None = None
    slo_capacity: float | None = None
    stopped: str = ""
    detail: str = ""
    search_s: float = 0.0
    probes: list[dict[str, Any]] = field(default_factory=list)
    grid_s: float = 0.0
    grid_rates: list[float] = field(default_factory=list)
    grid_verdicts: list[str] = field(default_factory=list)
    grid_p99_ms: list[float | None] = field(default_factory=list)
    grid_capacity: float | None = None
    grid_slo_capacity: float | None = None
    fine: Grid | None = None
    ramp_s: float = 0.0
    breakpoint: float | None = None
    breakpoint_why: str = ""


def search(t: Target, cfg: Config, work: Path, o: Outcome) -> None:
    """The search with its defaults (--smoke: short probes, a small budget, a low rate of
    0.2 x truth, the SLO)."""
    low, common = DEFAULT_LOW_PER_S, ["--json"]
    budget_s = DEFAULT_BUDGET_S
    if cfg is SMOKE:
        low, budget_s = 0.2 * t.truth_per_s, cfg.budget_s
        common += ["--slo", t.slo, "--probe", f"{cfg.probe_s:g}s", "--budget", f"{budget_s:g}s"]
        common += ["--min-rate", f"{low:.4g}"]
    if t.url:
        args = ["http", t.url, "--server-timing", "app", *common]
    else:
        spec = t.base()
        spec["load"] |= {"schedule": "poisson", "rate_per_s": low, "duration_s": cfg.probe_s}
        args = ["find", str(write_spec(work / "search.toml", spec)), *common]
    stdout, o.search_s, run_dir = run_knee(args, work / "search", budget_s * 1.5 + 120)
    group = last_json(stdout)["groups"][0]
    cap = group["capacity"]
    o.found, o.interval = cap.get("rate_per_s"), cap.get("interval_per_s") or [None, None]
    o.saturated = (group.get("saturated_throughput") or {}).get("per_s")
    o.slo_capacity = (group.get("slo_capacity") or {}).get("rate_per_s")
    o.stopped = group["search"]["stopped"]
    o.detail = cap.get("detail", "")
    o.probes = json.loads((run_dir / "find.json").read_text())["probes"]


def run_grid(t: Target, cfg: Config, work: Path, factors: list[float], name: str) -> Grid:
    """The rates factor x truth, each run for P, as one sweep."""
    g = Grid(rates=[float(f"{f * t.truth_per_s:.4g}") for f in factors])
    if t.url:
        rates = ",".join(f"{r:g}" for r in g.rates)
        args = ["http", t.url, "--rates", rates, "--duration", f"{cfg.probe_s:g}s"]
        args += ["--connections", "64", "--server-timing", "app"]
    else:
        spec = t.base()
        spec["load"] |= {"schedule": "poisson", "duration_s": cfg.probe_s}
        spec["load"]["rate_per_s"] = g.rates[0]
        spec["sweep"] = {"load.rate_per_s": g.rates}
        args = ["run", str(write_spec(work / f"{name}.toml", spec))]
    timeout_s = len(g.rates) * (cfg.probe_s + 60) + 120
    _, g.wall_s, run_dir = run_knee(args, work / name, timeout_s)
    points = sorted(point_stats(run_dir), key=lambda p: p["target_rate_per_s"])
    for p in points:
        # The point's own stability verdict, with the search's error share; the search's
        # sender check (a generator that fell behind) is shown apart, as "gen".
        verdict = (p.get("stability") or {}).get("verdict") or "undecided"
        if verdict == "stable" and failed_share(p) > ERROR_SHARE:
            verdict = "unstable"
        p["slo"] = None
        if decide(p).limit == "generator":
            verdict += "+gen"
        g.verdicts.append(verdict)
        p99 = (p.get("latency_ns") or {}).get("p99")
        g.p99_ms.append(None if p99 is None else p99 / 1e6)
    stable = [r for r, v in zip(g.rates, g.verdicts, strict=True) if v.startswith("stable")]
    g.capacity = max(stable) if stable else None
    return g


def grid(t: Target, cfg: Config, work: Path, o: Outcome) -> None:
    g = run_grid(t, cfg, work, SMOKE_GRID if cfg is SMOKE else GRID, "grid")
    o.grid_s, o.grid_rates, o.grid_verdicts, o.grid_p99_ms = g.wall_s, g.rates, g.verdicts, g.p99_ms
    o.grid_capacity = g.capacity
    met = [
        r
        for r, v, p99 in zip(o.grid_rates, o.grid_verdicts, o.grid_p99_ms, strict=True)
        if v.startswith("stable") and p99 is not None and p99 * 1e6 < t.slo_ns
    ]
    o.grid_slo_capacity = max(met) if met else None
    o.fine = run_grid(t, cfg, work, SMOKE_FINE_GRID if cfg is SMOKE else FINE_GRID, "fine")


def ramp(t: Target, work: Path, o: Outcome, least_s: float = 10.0) -> None:
    """The k6-style ramp over the search's wall time (at least `least_s`), and its
    breakpoint."""
    if shutil.which("k6"):
        print("  (k6 is installed, but the ramp is knee's own, for the same generator)")
    wall = max(o.search_s, least_s)
    n = max(4, round(wall / RAMP_STEP_S))
    peak = 2.0 * t.truth_per_s
    steps = [[float(f"{peak * (i + 0.5) / n:.5g}"), RAMP_STEP_S] for i in range(n)]
    spec = t.base()
    spec["experiment"]["name"] = "ramp"
    load = {k: v for k, v in spec["load"].items() if k not in ("rate_per_s", "duration_s")}
    spec["load"] = load | {"schedule": "steps", "steps": steps, "warmup_s": 0.0}
    path = write_spec(work / "ramp.toml", spec)
    _, o.ramp_s, run_dir = run_knee(["run", str(path)], work / "ramp", wall * 3 + 180)
    s = open_run(run_dir).samples
    t0 = int(s["intended_ns"].min())
    end = s["received_ns"].where(s["received_ns"] > 0, s["intended_ns"])
    s = s.assign(window=second_of(end, t0))
    for w, g in s.groupby("window", sort=True):
        failed = float((g["status"] != "ok").mean())
        done = g[g["received_ns"] > 0]
        p99 = float(done["latency_ns"].quantile(0.99)) if len(done) else math.inf
        if p99 > t.slo_ns or failed > RAMP_FAILED_SHARE:
            o.breakpoint = peak * min(1.0, (int(w) + 0.5) / (n * RAMP_STEP_S))
            o.breakpoint_why = (
                f"window {int(w)} s ({len(g)} requests): p99 {p99 / 1e6:.1f} ms, "
                f"failed {failed:.1%}"
            )
            return
    o.breakpoint_why = "the SLO held to the ramp's end"


# ---------------------------------------------------------------- the table


def err(found: float | None, truth: float) -> float | None:
    return None if found is None else abs(found - truth) / truth


def pct(e: float | None) -> str:
    return "-" if e is None else f"{e:.1%}"


def fmt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.4g}/s"


def rows_of(o: Outcome, key: str) -> Section:
    t = o.target
    e, se = err(o.found, t.truth_per_s), err(o.saturated, t.truth_per_s)
    ratio = o.search_s / o.grid_s if o.grid_s else None
    ge, be = err(o.grid_capacity, t.truth_per_s), err(o.breakpoint, t.truth_per_s)
    fine = o.fine or Grid()
    fe = err(fine.capacity, t.truth_per_s)
    truth = f"truth {t.truth_per_s:.4g}/s"
    rows = [
        Row(f"{t.name}: capacity error", fmt(o.found), truth, e, "<= 0.05", None),
        Row("  time to answer", f"{o.search_s:.0f} s", "", None, "<= 120 s", None),
        Row("  saturated throughput error", fmt(o.saturated), truth, se, "", None),
        Row(
            "  search / grid wall time",
            f"{o.search_s:.0f} s",
            f"{o.grid_s:.0f} s",
            ratio,
            "<= 0.333",
            None,
        ),
        Row("  10-point grid capacity error", fmt(o.grid_capacity), truth, ge, "", None),
        Row(
            f"  5% grid ({fine.wall_s:.0f} s) capacity error",
            fmt(fine.capacity),
            truth,
            fe,
            "",
            None,
        ),
        Row("  k6-style ramp breakpoint error", fmt(o.breakpoint), truth, be, "", None),
    ]
    rows[0].passed = None if e is None else e <= TARGET_ERROR
    rows[1].passed = o.search_s <= TARGET_ANSWER_S
    rows[3].passed = None if ratio is None else ratio <= TARGET_TIME_RATIO
    metrics = {f"{key}_truth_per_s": t.truth_per_s, f"{key}_search_s": o.search_s}
    metrics[f"{key}_grid_s"] = o.grid_s
    metrics[f"{key}_fine_grid_s"] = fine.wall_s
    for name, v in (
        ("capacity_error", e),
        ("saturated_error", se),
        ("search_over_grid", ratio),
        ("grid_error", ge),
        ("fine_grid_error", fe),
        ("ramp_error", be),
    ):
        if v is not None:
            metrics[f"{key}_{name}"] = v
    return Section(rows, metrics)


def short(verdict: str) -> str:
    return verdict.replace("unstable", "unst").replace("undecided", "und").replace("stable", "ok")


def show(o: Outcome) -> None:
    t = o.target
    lo, hi = o.interval
    fine = o.fine or Grid()
    print(
        f"  time to answer / 5%-resolution grid / 10-point grid: {o.search_s:.0f} s / "
        f"{fine.wall_s:.0f} s / {o.grid_s:.0f} s; capacity error "
        f"{pct(err(o.found, t.truth_per_s))} / {pct(err(fine.capacity, t.truth_per_s))} / "
        f"{pct(err(o.grid_capacity, t.truth_per_s))} ({fmt(o.found)} / {fmt(fine.capacity)} / "
        f"{fmt(o.grid_capacity)} against {t.truth_per_s:.4g}/s)"
    )
    print(
        f"  search: capacity {fmt(o.found)} [{fmt(lo)}, {fmt(hi)}], saturated "
        f"{fmt(o.saturated)}, SLO capacity {fmt(o.slo_capacity)}; "
        f"{len(o.probes)} probes, {o.search_s:.0f} s; stopped: {o.stopped}"
    )
    if o.stopped != "done":
        print(f"    detail: {o.detail}")
    for p in o.probes:
        d = p["decision"]
        early = " early" if p.get("stopped_early") else " cut" if p.get("cut_short") else ""
        print(
            f"    probe {p['point']:>2} {p['phase']:<8} {p['rate_per_s']:>8.4g}/s "
            f"{p['duration_s']:>5.1f} s (ran {p['wall_s']:>4.1f} s{early}) {d['capacity']:<9} "
            f"slo {d['slo'] or '-':<9} {d['reason'][:80]}"
        )
    grid_line = ", ".join(
        f"{r:.4g}:{short(v)}{'' if p is None else f'/{p:.0f}ms'}"
        for r, v, p in zip(o.grid_rates, o.grid_verdicts, o.grid_p99_ms, strict=True)
    )
    print(f"  grid ({o.grid_s:.0f} s; rate:verdict/p99): {grid_line}")
    print(f"    grid capacity {fmt(o.grid_capacity)}, grid SLO capacity {fmt(o.grid_slo_capacity)}")
    fine_line = ", ".join(
        f"{r:.4g}:{short(v)}" for r, v in zip(fine.rates, fine.verdicts, strict=True)
    )
    print(f"  5% grid ({fine.wall_s:.0f} s): {fine_line}; capacity {fmt(fine.capacity)}")
    print(
        f"  ramp ({o.ramp_s:.0f} s to {2 * t.truth_per_s:.4g}/s): breakpoint "
        f"{fmt(o.breakpoint)}: {o.breakpoint_why}"
    )


def measure(t: Target, cfg: Config, work: Path) -> Outcome:
    print(f"\n{t.name}: truth {t.truth_per_s:.4g}/s, SLO {t.slo}")
    for note in t.notes:
        print(f"  {note}")
    o = Outcome(t)
    search(t, cfg, work, o)
    grid(t, cfg, work, o)
    ramp(t, work, o, 2.0 if cfg is SMOKE else 10.0)
    show(o)
    return o


def run_all(
    cfg: Config, keep: Path | None, only: set[str] | None = None
) -> tuple[list[Section], list[str]]:
    sections: list[Section] = []
    broken: list[str] = []
    k6 = shutil.which("k6")
    print(
        "the ramp is a k6-style breakpoint test (ramping-arrival-rate, thresholds with "
        "abortOnFail) emulated with knee's own generator (load.schedule = steps), not k6 "
        f"itself; k6: {k6 or 'not installed'}"
    )
    root = Path(tempfile.mkdtemp(prefix="find_accuracy-")) if keep is None else keep
    try:
        jobs: list[tuple[str, Any]] = [
            ("matrix_t1", lambda w: matrix_target(cfg, 1, w)),
            ("matrix_t2", lambda w: matrix_target(cfg, 2, w)),
            ("gunicorn", None),
            ("go", "go"),
            ("link", lambda w: netns_target(cfg, w)),
        ]
        for key, make in jobs:
            if cfg is SMOKE and key not in SMOKE_JOBS or only and key not in only:
                continue
            work = root / key
            work.mkdir(parents=True, exist_ok=True)
            try:
                if make == "go":
                    go = go_semaphore(cfg.go_slots, cfg.go_sleep_ms)
                    try:
                        o = measure(go_target(cfg, go, work), cfg, work)
                    finally:
                        go.stop()
                elif make is None:
                    server = gunicorn(cfg.gunicorn_workers, cfg.gunicorn_sleep_ms)
                    try:
                        o = measure(gunicorn_target(cfg, server, work), cfg, work)
                    finally:
                        server.stop()
                else:
                    t = make(work)
                    if isinstance(t, str):
                        print(f"\n{key}: skipped: {t}")
                        continue
                    o = measure(t, cfg, work)
                sections.append(rows_of(o, key))
            except (BenchError, OSError, KeyError, ValueError) as e:
                print(f"\n{key}: broken: {e}")
                broken.append(key)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return sections, broken


def main() -> int:
    parser = benchlib.speed_parser(
        __doc__, "one target, 2 s probes", "3 s probes (about 15 minutes)", keep=True
    )
    parser.add_argument(
        "--targets", help="comma-separated: matrix_t1, matrix_t2, gunicorn, go, link (default: all)"
    )
    args = parser.parse_args()
    cfg = benchlib.pick_plan(args, SMOKE, QUICK, FULL)
    only = set(args.targets.split(",")) if args.targets else None
    t0 = time.monotonic()
    sections, broken = run_all(cfg, args.keep, only)
    how = (
        f"{cfg.name}: the search with its defaults, grid points of {cfg.probe_s:g} s; "
        f"{time.monotonic() - t0:.0f} s in all"
    )
    if cfg is SMOKE:
        how = (
            f"{cfg.name}: probes and grid points of {cfg.probe_s:g} s, search budget "
            f"{cfg.budget_s:g} s, SLO p99 < {SLO_FACTOR:g} x S; {time.monotonic() - t0:.0f} s "
            "in all"
        )
    return benchlib.report_sections(sections, how, broken)


if __name__ == "__main__":
    sys.exit(main())
