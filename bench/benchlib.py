"""Helpers shared by the benchmarks: finding knee-node, running a child, medians, and the
result table with its one-line JSON summary."""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_BINARY = BENCH_DIR.parent / "target" / "release" / "knee-node"


class BenchError(Exception):
    """Something broke: a child failed, timed out, or printed nothing usable."""


@dataclass
class ChildRun:
    stdout: str
    wall_s: float
    cpu_ns: int  # user + sys of the child process alone


def find_knee_node() -> Path:
    """$KNEE_NODE, else knee-node on PATH, else the repository's release build."""
    if explicit := os.environ.get("KNEE_NODE"):
        if not os.access(explicit, os.X_OK):
            raise BenchError(f"KNEE_NODE={explicit} is not an executable file")
        return Path(explicit)
    if on_path := shutil.which("knee-node"):
        return Path(on_path)
    if os.access(REPO_BINARY, os.X_OK):
        return REPO_BINARY
    raise BenchError(
        f"knee-node not found: set KNEE_NODE, put it on PATH, or build {REPO_BINARY} "
        "with `cargo build --release`"
    )


def _children_cpu_ns() -> int:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((r.ru_utime + r.ru_stime) * 1e9)


def run_child(cmd: list[str], timeout_s: float, cpus: set[int] | None = None) -> ChildRun:
    """Runs a command to completion (on `cpus` if given), returning its stdout and CPU time.

    The CPU time is the growth of RUSAGE_CHILDREN over the run: it counts only children
    reaped meanwhile, i.e. this one (a server left running is not reaped, so not counted).
    """
    cpu_before, t0 = _children_cpu_ns(), time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{Path(cmd[0]).name} timed out after {timeout_s:.0f} s") from e
    wall_s, cpu_ns = time.monotonic() - t0, _children_cpu_ns() - cpu_before
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        raise BenchError(f"{Path(cmd[0]).name} exited {proc.returncode}: {' | '.join(tail)}")
    return ChildRun(stdout=proc.stdout, wall_s=wall_s, cpu_ns=cpu_ns)


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print("installing wrk (apt-get)", file=sys.stderr)
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise BenchError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}")
    found = shutil.which("wrk")
    if not found:
        raise BenchError("wrk is still missing after apt-get install")
    return found


def wrk_totals(stdout: str) -> tuple[int, float]:
    """wrk's output: (requests completed, its Requests/sec)."""
    total = re.search(r"(\d+) requests in", stdout)
    rate = re.search(r"Requests/sec:\s*([\d.]+)", stdout)
    if not total or not rate:
        raise BenchError(f"wrk printed no totals: {stdout[-300:]!r}")
    return int(total.group(1)), float(rate.group(1))


@dataclass
class WrkRun:
    """One wrk run: its totals, the child's CPU ns and its output."""

    total: int
    rate_per_s: float
    cpu_ns: int
    stdout: str


def wrk_run(
    wrk: str, url: str, connections: int, seconds: float, timeout_s: float, cpus: set[int]
) -> WrkRun:
    """`wrk -t1 -c<connections> -d<seconds>s <url>` on `cpus`."""
    cmd = [wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", url]
    run = run_child(cmd, timeout_s=timeout_s, cpus=cpus)
    total, rate = wrk_totals(run.stdout)
    return WrkRun(total, rate, run.cpu_ns, run.stdout)


def json_lines(text: str) -> list[dict]:
    """The JSON objects among a child's output lines (other lines are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


@dataclass
class Row:
    """One line of the result table."""

    name: str
    knee: str
    baseline: str
    ratio: float | None
    target: str
    passed: bool | None
    # A goal the data cannot decide either way (its interval straddles the target):
    # printed as such, and not a pass.
    undecided: bool = False


@dataclass
class Section:
    """A comparison's table rows and its figures for the summary line."""

    rows: list[Row]
    metrics: dict[str, float]


def print_table(rows: list[Row]) -> None:
    header = ("measure", "knee", "baseline", "ratio", "target", "verdict")
    cells = [header] + [
        (
            r.name,
            r.knee,
            r.baseline,
            "" if r.ratio is None else f"{r.ratio:.3f}",
            r.target,
            verdict(r),
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    for i, c in enumerate(cells):
        print("  ".join(s.ljust(w) for s, w in zip(c, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def verdict(r: Row) -> str:
    if r.undecided:
        return "UNDECIDED"
    return "" if r.passed is None else ("PASS" if r.passed else "MISS")


def summary(sections: list[Section]) -> dict[str, Any]:
    """Every section's figures, rounded, and whether every target was met (an undecided
    one was not)."""
    out: dict[str, Any] = {k: round(v, 4) for sec in sections for k, v in sec.metrics.items()}
    rows = [r for sec in sections for r in sec.rows]
    out["all_pass"] = all(r.passed for r in rows if r.passed is not None) and not any(
        r.undecided for r in rows
    )
    return out


def report(sections: list[Section], how: str) -> None:
    """The table, how its figures were taken (e.g. "medians of 3 runs; 40 s in all"), and
    last the summary as one JSON line."""
    print()
    print_table([r for sec in sections for r in sec.rows])
    print(f"\n({how})")
    print(json.dumps(summary(sections)))


def echo_closed_loop(
    binary: Path, folder: Path, clients: int, requests: int, timeout_s: float
) -> Path:
    """A knee-node echo server and a closed loop of `clients` sending `requests` back to
    back: the sample file of the run (a bench's baseline, or records to compute on)."""
    serve = [str(binary), "serve", "echo", "--name", "echo", "--config", '{"listen":"127.0.0.1:0"}']
    server = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples = folder / "echo.samples.bin"
    try:
        ready = json.loads(server.stdout.readline() or "{}") if server.stdout else {}
        if ready.get("event") != "ready":
            raise BenchError("echo server printed no ready line")
        config = {
            "target": ready["addr"],
            "schedule": {"kind": "closed", "clients": clients, "think_ms": 0, "think": "fixed"},
            "requests": requests,
            "timeout_ms": 30000,
            "seed": 1,
            "samples_path": str(samples),
            "histogram_path": str(folder / "echo.histogram.csv"),
        }
        load = [str(binary), "load", "echo", "--name", "load", "--config", json.dumps(config)]
        done = [e for e in json_lines(run_child(load, timeout_s).stdout) if "event" in e]
        if not done or done[-1]["event"] != "done":
            raise BenchError("the echo load generator did not report done")
    finally:
        server.terminate()  # our own child, by its handle
        server.wait(timeout=10)
    return samples


def ensure_h2_peers() -> tuple[str, Path]:
    """h2load (Debian's nghttp2-client) and ghz (built from the Go module proxy), installed
    by `scripts/h2-peers install` when either is missing: (h2load, ghz)."""
    script = BENCH_DIR.parent / "scripts" / "h2-peers"
    where = subprocess.run([str(script), "dir"], capture_output=True, text=True, check=True)
    ghz = Path(where.stdout.strip()) / "ghz"
    if shutil.which("h2load") is None or not os.access(ghz, os.X_OK):
        print("installing h2load and ghz (scripts/h2-peers install)", file=sys.stderr)
        proc = subprocess.run([str(script), "install"], timeout=900, check=False)
        if proc.returncode != 0:
            raise BenchError("scripts/h2-peers install failed (its output above says why)")
    h2load = shutil.which("h2load")
    if h2load is None or not os.access(ghz, os.X_OK):
        raise BenchError("h2load or ghz is still missing after scripts/h2-peers install")
    return h2load, ghz


class Freeze:
    """Freezes processes (SIGSTOP) `at_s` seconds after `start()` for `for_s` seconds, then
    thaws them (SIGCONT), on a thread of its own: a server stalled mid-run. The processes
    are the bench's own children. `stop()` (or leaving the `with`) always thaws them."""

    def __init__(self, pids: list[int], at_s: float, for_s: float) -> None:
        self.pids, self.at_s, self.for_s = pids, at_s, for_s
        self.frozen_s = 0.0  # how long they were stopped, measured
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _signal(self, sig: int) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _run(self) -> None:
        if self._cancel.wait(self.at_s):
            return
        t0 = time.monotonic()
        self._signal(signal.SIGSTOP)
        try:
            self._cancel.wait(self.for_s)
        finally:
            self._signal(signal.SIGCONT)
            self.frozen_s = time.monotonic() - t0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._cancel.set()
        self._thread.join(timeout=self.for_s + 5)
        self._signal(signal.SIGCONT)  # thawed whatever happened

    def __enter__(self) -> "Freeze":
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def percentiles_ns(latency_ns: Any) -> dict[str, float]:
    """p50, p90, p99 and max of an array of latencies in ns (numpy, vectorized)."""
    import numpy as np

    a = np.asarray(latency_ns, dtype=np.float64)
    if a.size == 0:
        raise BenchError("no latencies to summarize")
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "p50_ns": float(p50),
        "p90_ns": float(p90),
        "p99_ns": float(p99),
        "max_ns": float(a.max()),
    }


#: --smoke's help where a smoke run is one short round.
SMOKE_HELP = "one short round: seconds"

#: What a bench's run may raise when something broke (not when a target is missed).
BROKEN = (BenchError, OSError, KeyError, ValueError, subprocess.CalledProcessError)


def speed_parser(
    doc: str, smoke: str, quick: str | None = None, keep: bool = False
) -> argparse.ArgumentParser:
    """A bench's command line: --smoke (and --quick where the bench has it), each with its
    help text, and --keep (a folder) for a bench whose runs leave directories; the
    description is the first line of the bench's docstring."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--smoke", action="store_true", help=smoke)
    if keep:
        parser.add_argument("--keep", type=Path, help="keep the run directories in this folder")
    return parser


def speed_args(doc: str, smoke: str, quick: str | None = None) -> argparse.Namespace:
    """speed_parser's arguments parsed, for a bench with no others."""
    return speed_parser(doc, smoke, quick).parse_args()


def report_sections(sections: list[Section], how: str, broken: list[str]) -> int:
    """The table of what ran (if anything did), then what broke: the exit code, 1 if any."""
    if sections:
        report(sections, how)
    if broken:
        print(f"broken: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


def pick_plan(args: argparse.Namespace, smoke: Any, quick: Any, full: Any) -> Any:
    """The plan the command line asks for: smoke over quick over full."""
    return smoke if args.smoke else quick if getattr(args, "quick", False) else full


def run_or_broken(name: str, run: Callable[[], Any]) -> Any:
    """run(), or None after saying on stderr what broke (the bench then exits 1)."""
    try:
        return run()
    except BROKEN as e:
        print(f"{name}: broken: {e}", file=sys.stderr)
        return None


def timed_report(name: str, run: Callable[[], list[Section]], how: str) -> int:
    """run(), then its table with `how` and the seconds it took: the exit code (1: broken)."""
    t0 = time.monotonic()
    if (sections := run_or_broken(name, run)) is None:
        return 1
    report(sections, f"{how}; {time.monotonic() - t0:.0f} s in all")
    return 0


def stall_line(st: dict[str, Any], peer: str) -> str:
    """The stall's latencies side by side, knee's and the peer's (keys knee_p90_ns,
    <peer>_p90_ns, ... _p99_ns, _max_ns; stall_s)."""
    ms = {k: v / 1e6 for k, v in st.items() if k.endswith("_ns")}
    parts = [
        f"{key} knee {ms[f'knee_{key}_ns']:.1f} ms, {peer} {ms[f'{peer}_{key}_ns']:.1f} ms"
        for key in ("p90", "p99", "max")
    ]
    return f"stall of {st['stall_s']:g} s: {'; '.join(parts)} (knee's count from the intended send)"


@dataclass
class LoadRun:
    """One `knee-node load` run: its done line, the child's CPU ns and its samples file."""

    done: dict[str, Any]
    cpu_ns: int
    samples: Path


def knee_load(
    knee: Path,
    system: str,
    workdir: Path,
    config: dict[str, Any],
    timeout_s: float,
    cpus: set[int] | None = None,
) -> LoadRun:
    """One `knee-node load <system>` run (on `cpus` if given) with `config` and the paths
    of a samples file and a histogram in `workdir`; raises when it prints no done line."""
    samples = workdir / "samples.bin"
    samples.unlink(missing_ok=True)  # so knee creates it afresh instead of truncating a big one
    paths = {"samples_path": str(samples), "histogram_path": str(workdir / "histogram.csv")}
    cmd = [str(knee), "load", system, "--name", "gen", "--config", json.dumps(paths | config)]
    run = run_child(cmd, timeout_s=timeout_s, cpus=cpus)
    done = [e for e in json_lines(run.stdout) if e.get("event") == "done"]
    if not done:
        raise BenchError(f"knee-node load {system} printed no done line")
    return LoadRun(done=done[-1], cpu_ns=run.cpu_ns, samples=samples)


def say_not_ok(done: dict[str, Any], noun: str) -> None:
    """Says how many of a knee run's replies were not ok (said, not hidden)."""
    if done["ok"] != done["completed"]:
        print(f"  knee: {done['completed'] - done['ok']} {noun} not ok", flush=True)


def knee_tail_ns(done: dict[str, Any]) -> dict[str, float]:
    """knee's p90, p99 and max latency from a done line, as knee_<q>_ns."""
    return {f"knee_{q}_ns": float(done["latency"][f"{q}_ns"]) for q in ("p90", "p99", "max")}


@dataclass(frozen=True)
class PeerPlan:
    """A knee-versus-peer HTTP/2 bench: the saturation runs (C connections x M streams for
    saturation_s) and the stall run (stall_s frozen at stall_at_s of a constant-rate run)."""

    connections: int
    streams: int
    saturation_s: float
    stall_rate_per_s: float
    stall_run_s: float
    stall_at_s: float
    stall_s: float
    #: Alternating rounds of the saturation runs (medians).
    repeats: int = 3


@dataclass
class Saturated:
    """One generator's saturation run: its replies ok over its wall time, and its CPU."""

    ok: int
    wall_s: float
    cpu_ns: int


#: A knee run of a bench: a `knee-node load` config -> its done line and CPU ns.
KneeRun = Callable[[dict[str, Any]], tuple[dict[str, Any], int]]


def saturation_rounds(
    plan: PeerPlan,
    knee: KneeRun,
    peer: Callable[[], Saturated],
    names: tuple[str, str, str],
    target: str | None = None,
    driver: dict[str, Any] | None = None,
) -> dict[str, float]:
    """plan.repeats rounds of knee's saturation run (a closed loop of C x M clients over C
    connections, no pause; `driver` added to its config) then the peer's, each round printed
    (the `target`'s name first); their medians: knee_rate_per_s, <peer>_rate_per_s,
    knee_cpu_ns_per_<noun>, <peer>_cpu_ns_per_<noun>. names: (peer, noun, the noun as
    printed per round, e.g. "ghz", "call", "call")."""
    peer_name, noun, short = names
    c, m = plan.connections, plan.streams
    label, on = ("", "") if target is None else (f"{target} ", f" on {target}")
    k_rate, p_rate, k_cpu, p_cpu = [], [], [], []
    for i in range(plan.repeats):
        load: dict[str, Any] = {
            "schedule": {"kind": "closed", "clients": c * m, "think_ms": 0},
            "connections": c,
            "duration_s": plan.saturation_s,
        }
        if driver is not None:
            load["driver"] = driver
        done, cpu_ns = knee(load)
        if done["ok"] == 0:
            raise BenchError(f"knee: no {noun} ok{on}: {done}")
        k_rate.append(done["ok"] / done["elapsed_s"])
        k_cpu.append(cpu_ns / done["ok"])
        p = peer()
        p_rate.append(p.ok / p.wall_s)
        p_cpu.append(p.cpu_ns / p.ok)
        print(
            f"{label}round {i + 1}: knee {k_rate[-1]:.0f}/s {k_cpu[-1]:.0f} ns/{short}, "
            f"{peer_name} {p_rate[-1]:.0f}/s {p_cpu[-1]:.0f} ns/{short}",
            flush=True,
        )
    return {
        "knee_rate_per_s": median(k_rate),
        f"{peer_name}_rate_per_s": median(p_rate),
        f"knee_cpu_ns_per_{noun}": median(k_cpu),
        f"{peer_name}_cpu_ns_per_{noun}": median(p_cpu),
    }


def stalled(plan: PeerPlan, pids: list[int], run: Callable[[], Any]) -> tuple[Any, float]:
    """run() while `pids` are frozen for plan.stall_s at plan.stall_at_s: what it returned
    and how long they were frozen, measured."""
    with Freeze(pids, plan.stall_at_s, plan.stall_s) as frozen:
        out = run()
    return out, frozen.frozen_s


def wait_started(
    proc: subprocess.Popen,
    ready: Callable[[], Any],
    what: str,
    log: Path,
    timeout_s: float,
    stop: Callable[[], None],
) -> Any:
    """Polls ready() until it gives something true (what the server said when up), and
    returns that; if the server exits or timeout_s passes first, stop() and raise with the
    tail of its log."""
    deadline = time.monotonic() + timeout_s
    while not (found := ready()):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop()
            raise BenchError(f"{what} did not start: {log.read_text()[-500:]}")
        time.sleep(0.05)
    return found


class ServedNginx:
    """nginx as a point runs it: `knee-node serve http` writes its config (`nginx`: the
    server.nginx table) and supervises it; scripts/nginx install puts nginx-light here when
    nginx is missing. Its output goes to a file (nothing to drain while it runs)."""

    def __init__(self, knee: Path, workdir: Path, nginx: dict[str, Any], timeout_s: float) -> None:
        subprocess.run([str(BENCH_DIR.parent / "scripts" / "nginx"), "install"], check=True)
        config = {"listen": "127.0.0.1:0", "server": {"nginx": nginx}}
        cmd = [str(knee), "serve", "http", "--name", "nginx", "--config", json.dumps(config)]
        self.out = workdir / "nginx.out"
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        ready = wait_started(
            self.proc,
            lambda: [e for e in json_lines(self.out.read_text()) if e.get("event") == "ready"],
            "nginx",
            self.out,
            timeout_s,
            self.stop,
        )
        self.addr: str = ready[0]["addr"]

    def stop(self) -> None:
        self.proc.terminate()  # by its PID; knee-node stops its nginx
        self.proc.wait(timeout=30)
