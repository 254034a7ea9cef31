#!/usr/bin/env python3
"""Whether knee names the right bottleneck (issue 30: knee.resources.usage's U and D per
resource, knee.resources.bottleneck's `explain`) on targets whose bottleneck is known by
construction, and how close its bound 1/D_max comes to the capacity measured.

Targets, each with the resource it must name:

1. matrix, P = 700 (about 5 ms of one core a request), `server.threads` = 1: the server's
   one core. Expected "server" (kind cpu: its pool of one thread, busy computing, folds
   into its CPU). "pool:server" would be a miss of the CPU-vs-pool rule (ON_CPU): the
   pool's `on_cpu` is printed at every point.
2. matrix, n = 200 (320 kB each way), the server on an emulated host behind a 10 Mbit/s
   link, the generator on one behind 100 Mbit/s (network namespaces, root; skipped with
   the reason where they cannot be made): the server's link. Expected "link:srvhost".
3. `knee http` against gunicorn, 2 sync workers of tests/http_apps/sleep_app.py sleeping
   20 ms, Server-Timing `app`: the worker pool, not a CPU. Expected "pool:target".
4. `knee http --connections 2` against gunicorn, 8 sync workers sleeping 5 ms (a server
   with 4 x the capacity two connections can use: each is held about 5.5 ms a request, so
   they allow about 360/s and its workers 1,600/s): expected "connections" (the
   generator's). `knee http --help`: "--connections ... (default 8; a search: 64)"; an
   explicit value is used by the search too (knee.httpcli), so this is a search.
5. chat on SQLite, one replica, the session mix (login, join, post, fetch, logout; four
   of five take SQLite's one write lock): the database. Expected "part:database".

How the capacity is measured:

- 1, 3, 4 are searches (`knee find SPEC` / `knee http URL` with no rate, `--json`, budget
  about 2.5 min; `--quick` 50 s with shorter probes); the group's `bottleneck` is the
  search's own. The measured capacity is the midpoint of the search's capacity bracket
  [highest rate shown stable, lowest shown not]; the saturated throughput where the
  bracket is open.
- 2 and 5 are closed-loop sweeps (`knee run`, `load.clients` rising), then `explain(points,
  capacity=None, saturated=S)` called here. chat runs closed loops only; for 2, a search's
  probes hold at least 200 samples (knee.find.search.MIN_SAMPLES), about 55 s each at the
  link's 3.6/s, so a search would take 10 minutes or more. S is the highest OK throughput
  of any point of the sweep (what a closed loop saturates at: chat's falls again at more
  clients, as SQLite's busy handler sleeps), with the Poisson 95% interval of that point's
  count (knee.stats.intervals.poisson_count_ci, as the search's saturated throughput).
  explain's reference point (the stable point that completed the most) is then that same
  point, so U and D are read where the capacity was measured; nothing is tuned per case.
  The maximum of five noisy throughputs leans high by about its interval (1-2%).

For each target it prints the expected resource, the one named (resource and label), its
U at the reference point (the highest rate kept up with), its bound 1/D_max
(`bound_per_s`) against the measured capacity and their ratio (target |ratio - 1| <= 0.10;
explain's own agreement verdict beside it), whether the right resource was named (every
case must), the reference point's whole resources table, and how busy the machine was
(the interference check). Then the table and one JSON line.

Exits 0 when it ran (a missed target is a measurement), 1 when something broke.

    python3 bench/bottleneck_truth.py [--quick] [--keep DIR]
    python3 bench/bottleneck_truth.py --smoke   # case 5 only (chat), short points: seconds
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import benchlib  # noqa: E402
from benchlib import BenchError, Row, Section  # noqa: E402
from find_accuracy import gunicorn, last_json, point_stats, run_knee, write_spec  # noqa: E402

from knee.analysis.answers import interference  # noqa: E402 (find_accuracy set sys.path)
from knee.resources.bottleneck import ON_CPU, explain  # noqa: E402
from knee.stats.intervals import poisson_count_ci  # noqa: E402

TARGET_RATIO = 0.10  # |bound / measured - 1| at most


@dataclass
class Config:
    name: str
    probe_s: float  # the searches' shortest probe
    budget_s: float  # each search's budget
    chat_s: float  # each chat point, warm-up included
    link_s: float  # each link point, warm-up included
    warmup_s: float


QUICK = Config("quick", 3.0, 50.0, 8.0, 16.0, 1.0)
FULL = Config("full", 5.0, 150.0, 25.0, 40.0, 2.0)
#: --smoke: every step of one case (chat: no search, no emulated host), figures not judged.
SMOKE = Config("smoke", 2.0, 12.0, 3.0, 8.0, 0.5)
SMOKE_JOBS = ("chat",)

MATRIX_P = 700
CHAT_CLIENTS = [1, 2, 4, 8, 16]
LINK_CLIENTS = [1, 2, 4]
LINK_MBIT, LINK_CLIENT_MBIT, LINK_N, LINK_P = 10, 100, 200, 10


@dataclass
class Case:
    key: str
    name: str
    expected: str
    how: str = ""  # how the capacity was measured
    ex: dict[str, Any] | None = None  # explain's answer
    points: list[dict[str, Any]] = field(default_factory=list)
    measured: float | None = None
    measured_how: str = ""
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def named(self) -> str | None:
        return ((self.ex or {}).get("bottleneck") or {}).get("resource")

    @property
    def right(self) -> bool:
        return self.named == self.expected

    @property
    def ratio(self) -> float | None:
        bound = ((self.ex or {}).get("bottleneck") or {}).get("bound_per_s")
        return bound / self.measured if bound and self.measured else None


# ---------------------------------------------------------------- measuring


def search(case: Case, args: list[str], cfg: Config, work: Path) -> None:
    """A search (`knee find` / `knee http` with no rate): its group's bottleneck, and the
    capacity bracket's midpoint as the measured capacity."""
    common = ["--probe", f"{cfg.probe_s:g}s", "--budget", f"{cfg.budget_s:g}s", "--json"]
    stdout, case.wall_s, run_dir = run_knee(
        [*args, *common], work / "search", cfg.budget_s * 1.5 + 120
    )
    group = last_json(stdout)["groups"][0]
    case.ex, case.points = group.get("bottleneck"), point_stats(run_dir)
    lo, hi = (group["capacity"].get("interval_per_s") or [None, None])[:2]
    sat = group.get("saturated_throughput")
    search_ = group.get("search") or {}
    case.how = (
        f"search: {search_.get('probes', '?')} probes, {case.wall_s:.0f} s, "
        f"stopped: {search_.get('stopped', '?')}"
    )
    if lo and hi:
        case.measured = (lo + hi) / 2
        case.measured_how = f"capacity bracket [{lo:.4g}, {hi:.4g}] midpoint"
    elif sat:
        case.measured = float(sat["per_s"])
        case.measured_how = f"saturated throughput (bracket [{lo}, {hi}] open)"
    else:
        case.measured_how = f"no capacity: bracket [{lo}, {hi}], no saturated throughput"
    if sat:
        case.notes.append(
            f"saturated throughput {sat['per_s']:.4g}/s "
            f"[{sat['ci_per_s'][0]:.4g}, {sat['ci_per_s'][1]:.4g}]"
        )


def sweep(case: Case, spec: dict[str, Any], work: Path, timeout_s: float) -> None:
    """A closed-loop sweep (`knee run`): explain() with the highest OK throughput of any
    point as the saturated throughput (module docstring)."""
    path = write_spec(work / f"{case.key}.toml", spec)
    _, case.wall_s, run_dir = run_knee(["run", str(path)], work / "sweep", timeout_s)
    case.points = point_stats(run_dir)
    top = max(case.points, key=lambda p: float(p.get("throughput_per_s") or 0.0))
    window_s, count = float(top["window_s"]), int(top["ok_in_window"])
    lo, hi = poisson_count_ci(count)
    saturated = {"per_s": count / window_s, "ci_per_s": [lo / window_s, hi / window_s]}
    case.ex = explain(case.points, None, saturated)
    case.measured = saturated["per_s"]
    clients = (top.get("swept") or {}).get("load.clients")
    case.measured_how = (
        f"saturated throughput, the highest of the sweep (clients = {clients}; "
        f"[{saturated['ci_per_s'][0]:.4g}, {saturated['ci_per_s'][1]:.4g}])"
    )
    per = ", ".join(
        f"{(p.get('swept') or {}).get('load.clients')}: {float(p['throughput_per_s']):.4g}/s"
        for p in case.points
    )
    case.how = f"closed-loop sweep, {len(case.points)} points, {case.wall_s:.0f} s"
    case.notes.append(f"throughput by clients: {per}")


def matrix_case(cfg: Config, work: Path) -> Case:
    case = Case("matrix_t1", f"(1) matrix P={MATRIX_P} threads=1", "server")
    spec = {
        "experiment": {"name": "bottleneck-matrix", "system": "matrix", "seed": 1},
        "server": {"algorithm": "naive", "threads": 1},
        "driver": {"n": 50, "p": MATRIX_P},
        "load": {
            "schedule": "poisson",
            "rate_per_s": 20.0,
            "duration_s": cfg.probe_s,
            "warmup_s": 1.0,
            "timeout_ms": 60000,
        },
    }
    path = write_spec(work / "matrix.toml", spec)
    search(case, ["find", str(path), "--min-rate", "20"], cfg, work)
    on_cpu = []
    for p in sorted(case.points, key=lambda p: float(p.get("target_rate_per_s") or 0.0)):
        v = ((p.get("resources") or {}).get("pool:server") or {}).get("on_cpu")
        on_cpu.append(f"{_num(p.get('target_rate_per_s'))}/s: {_num(v, '.2f')}")
    case.notes.append("pool:server on_cpu by rate (CPU busy / pool busy): " + ", ".join(on_cpu))
    return case


def link_case(cfg: Config, work: Path) -> Case | str:
    """The emulated hosts' case, or the reason it cannot be made here."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root (docs/hosts.md)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "ip or tc (iproute2) is missing"
    name = f"(2) matrix n={LINK_N} over {LINK_MBIT} Mbit/s"
    case = Case("link", name, "link:srvhost")
    spec = {
        "experiment": {"name": "bottleneck-link", "system": "matrix", "seed": 1},
        "hosts": {
            "srvhost": {"kind": "netns", "rate_mbit": LINK_MBIT},
            "clihost": {"kind": "netns", "rate_mbit": LINK_CLIENT_MBIT},
        },
        "placement": {"server": "srvhost", "load": "clihost"},
        "server": {"algorithm": "naive", "threads": 1},
        "driver": {"n": LINK_N, "p": LINK_P, "same_matrix": True},
        "load": {
            "schedule": "closed",
            "clients": LINK_CLIENTS[0],
            "think_ms": 0,
            "duration_s": cfg.link_s,
            "warmup_s": cfg.warmup_s,
            "timeout_ms": 60000,
        },
        "sweep": {"load.clients": LINK_CLIENTS},
    }
    try:
        sweep(case, spec, work, len(LINK_CLIENTS) * (cfg.link_s + 60) + 120)
    except BenchError as e:
        return f"the emulated hosts could not be made or run: {e}"
    wire = LINK_N * LINK_N * 8
    rate = LINK_MBIT * 1e6 / 8 * 1448 / 1514
    case.notes.append(
        f"{wire / 1e3:.0f} kB of matrix each way; the server's link carries about "
        f"{rate / 1e6:.3f} MB/s of TCP payload: at most about {rate / wire:.2f}/s"
    )
    return case


def http_case(
    key: str, name: str, expected: str, workers: int, sleep_ms: float, extra: list[str],
    min_rate: float, cfg: Config, work: Path,
) -> Case:  # fmt: skip
    case = Case(key, name, expected)
    server = gunicorn(workers, sleep_ms)
    try:
        url = f"http://127.0.0.1:{server.port}/"
        args = ["http", url, "--server-timing", "app", "--min-rate", f"{min_rate:g}", *extra]
        search(case, args, cfg, work)
    finally:
        server.stop()
    case.notes.append(f"W / D = {workers} / {sleep_ms:g} ms = {workers / sleep_ms * 1e3:.0f}/s")
    return case


def chat_case(cfg: Config, work: Path) -> Case:
    case = Case("chat", "(5) chat on SQLite, session mix", "part:database")
    spec = {
        "experiment": {"name": "bottleneck-chat", "system": "chat", "seed": 1},
        "server": {"replicas": 1},
        "driver": {"mix": "session"},
        "load": {
            "schedule": "closed",
            "clients": CHAT_CLIENTS[0],
            "think_ms": 0,
            "duration_s": cfg.chat_s,
            "warmup_s": cfg.warmup_s,
            "timeout_ms": 10000,
        },
        "sweep": {"load.clients": CHAT_CLIENTS},
    }
    sweep(case, spec, work, len(CHAT_CLIENTS) * (cfg.chat_s + 30) + 120)
    low = min(case.points, key=lambda p: (p.get("swept") or {}).get("load.clients") or 0)
    part = (low.get("resources") or {}).get("part:database") or {}
    if part.get("bound_per_s") and case.measured:
        case.notes.append(
            f"part:database at 1 client (no other transaction to wait for): U "
            f"{part['u']:.3f}, D {part['d_ns'] / 1e3:.1f} us, bound {part['bound_per_s']:.4g}/s "
            f"= {part['bound_per_s'] / case.measured:.3f} of the measured capacity"
        )
    return case


# ---------------------------------------------------------------- showing


def _num(v: Any, f: str = ".4g") -> str:
    return "-" if v is None else format(v, f)


def resources_table(point: dict[str, Any]) -> list[str]:
    lines = []
    for name, r in sorted((point.get("resources") or {}).items()):
        extra = f" on_cpu {_num(r.get('on_cpu'), '.2f')}" if r.get("kind") == "pool" else ""
        if r.get("kind") == "connections":
            extra = f" all_busy {_num(r.get('all_busy_share'), '.2f')}"
        d_us = None if r.get("d_ns") is None else r["d_ns"] / 1e3
        lines.append(
            f"      {name:<14} {r.get('kind', ''):<11} u {_num(r.get('u'), '.3f'):>6}  "
            f"d {_num(d_us, '.1f'):>8} us  bound {_num(r.get('bound_per_s')):>8}/s  "
            f"cap {_num(r.get('capacity'))} {r.get('capacity_unit') or ''}{extra}  "
            f"({r.get('label', '')})"
        )
    return lines


def show(c: Case) -> None:
    print(f"\n{c.name}: {c.how}")
    ex = c.ex or {}
    top = ex.get("bottleneck") or {}
    print(f"  expected {c.expected}; named {c.named} ({top.get('label')}): "
          f"{'RIGHT' if c.right else 'WRONG'}")  # fmt: skip
    print(
        f"  U {_num(top.get('u'), '.3f')} at {_num(ex.get('at_rate_per_s'))}/s (point "
        f"{ex.get('at_point')}); bound 1/D {_num(top.get('bound_per_s'))}/s; measured "
        f"{_num(c.measured)}/s ({c.measured_how}); ratio {_num(c.ratio, '.3f')}; explain: "
        f"{ex.get('agreement')} (its ratio {_num(ex.get('bound_ratio'), '.3f')} on "
        f"[{', '.join(_num(v) for v in ex.get('measured_per_s') or [])}])"
    )
    if c.named == "pool:server":
        ref_pool = (
            next((p for p in c.points if p.get("point") == ex.get("at_point")), {})
            .get("resources", {})
            .get("pool:server", {})
        )
        print(
            "  a miss of the CPU-vs-pool rule: the pool's on_cpu "
            f"{_num(ref_pool.get('on_cpu'), '.2f')} at the reference point, under ON_CPU = {ON_CPU}"
        )
    nxt = ex.get("next") or {}
    if nxt:
        print(f"  next: {nxt.get('resource')} (bound {_num(nxt.get('bound_per_s'))}/s)")
    print(f"  sentence: {ex.get('sentence')}")
    for note in c.notes:
        print(f"  {note}")
    ref = next((p for p in c.points if p.get("point") == ex.get("at_point")), None)
    if ref is not None:
        print(f"  resources at the reference point {ref['point']}:")
        for line in resources_table(ref):
            print(line)
    print("  ranked by U per point: " + "; ".join(
        f"{_num(p['rate_per_s'])}/s {' > '.join(p['ranked'][:3])}"
        for p in sorted(ex.get("per_point") or [], key=lambda p: p["rate_per_s"])
    ))  # fmt: skip
    busy = interference(c.points)
    print(f"  interference: {busy['detail'] if busy else 'none warned'}")


def rows_of(c: Case) -> Section:
    top = (c.ex or {}).get("bottleneck") or {}
    named = f"{c.named} ({top.get('label')})" if c.named else "none"
    r = c.ratio
    rows = [
        Row(f"{c.name}: resource", named, c.expected, None, "the expected", c.right),
        Row("  U at the reference point", _num(top.get("u"), ".3f"), "", None, "", None),
        Row(
            "  bound 1/D_max / measured",
            f"{_num(top.get('bound_per_s'))}/s",
            f"{_num(c.measured)}/s",
            r,
            "within 10%",
            None if r is None else abs(r - 1) <= TARGET_RATIO,
        ),
    ]
    metrics = {f"{c.key}_right": float(c.right), f"{c.key}_wall_s": c.wall_s}
    if top.get("u") is not None:
        metrics[f"{c.key}_u"] = float(top["u"])
    if r is not None:
        metrics[f"{c.key}_ratio"] = r
    return Section(rows, metrics)


# ---------------------------------------------------------------- main


def run_all(cfg: Config, keep: Path | None) -> tuple[list[Section], list[str]]:
    sections: list[Section] = []
    broken: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="bottleneck-")) if keep is None else keep
    jobs: list[tuple[str, Any]] = [
        ("matrix_t1", lambda w: matrix_case(cfg, w)),
        ("link", lambda w: link_case(cfg, w)),
        ("pool", lambda w: http_case(
            "pool", "(3) gunicorn 2 sync x 20 ms", "pool:target", 2, 20.0, [], 20, cfg, w)),
        ("connections", lambda w: http_case(
            "connections", "(4) gunicorn 8 sync x 5 ms, 2 connections", "connections", 8,
            5.0, ["--connections", "2"], 40, cfg, w)),
        ("chat", lambda w: chat_case(cfg, w)),
    ]  # fmt: skip
    try:
        for key, make in jobs:
            if cfg is SMOKE and key not in SMOKE_JOBS:
                continue
            work = root / key
            work.mkdir(parents=True, exist_ok=True)
            try:
                case = make(work)
            except (BenchError, OSError, KeyError, ValueError, TypeError, IndexError) as e:
                print(f"\n{key}: broken: {e}")
                broken.append(key)
                continue
            if isinstance(case, str):
                print(f"\n{key}: skipped: {case}")
                continue
            if case.ex is None:
                print(f"\n{key}: broken: no point measured resources")
                broken.append(key)
                continue
            show(case)
            sections.append(rows_of(case))
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return sections, broken


def main() -> int:
    smoke, quick = "the chat case, short points", "shorter probes and points (about 4 minutes)"
    args = benchlib.speed_parser(__doc__, smoke, quick, keep=True).parse_args()
    cfg = benchlib.pick_plan(args, SMOKE, QUICK, FULL)
    t0 = time.monotonic()
    sections, broken = run_all(cfg, args.keep)
    how = (
        f"{cfg.name}: searches of {cfg.budget_s:g} s with {cfg.probe_s:g} s probes; chat "
        f"points of {cfg.chat_s:g} s, link points of {cfg.link_s:g} s; "
        f"{time.monotonic() - t0:.0f} s in all"
    )
    return benchlib.report_sections(sections, how, broken)


if __name__ == "__main__":
    sys.exit(main())
