"""Runs every point of an experiment, each node on its host: a local process on 127.0.0.1 by
default, or on an emulated or SSH host (knee.hosts, docs/hosts.md).

The hosts are made before the first point and removed on every way out. For each point:
start the nodes of the system's topology (its load split over `load.generators`) in order
(servers, replicas and peers are waited for until they report their ephemeral address;
load generators and clients record samples), apply the spec's event timeline (kill, stop,
start a node at a time), sample CPU and the nodes' counters every interval, stop
everything, and add the point's statistics (every recorder's samples pooled) to
summary.json. Nodes are stopped on every path out: normal end, a node failing (named with
its last stderr lines), Ctrl-C.

What each point ran with is recorded as it happens (`knee.run_params`): plan.json before the
first point, and points/pNNN.json as the point starts, as each node starts, as each timeline
event is applied and as the point ends, so a crashed run still says what ran.
"""

from __future__ import annotations

import re
import shutil
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from knee import env, results, run_params, systems
from knee.analysis import chaos
from knee.analysis.answers import from_points
from knee.analysis.point import TARGET_NODE, MeasuredPoint, analyse_point
from knee.config_values import integer, number, opt_integer, opt_number, text
from knee.hosts import RunHosts, cleanup
from knee.hosts.spec import check_nodes
from knee.params import Point, TimelineEvent
from knee.run_params import PointParams
from knee.runner import interrupt
from knee.runner.display import Display
from knee.runner.lifecycle import fetch_files, start_node, stop_all, stop_node, substitute
from knee.runner.node import node_binary
from knee.runner.sampling import SAMPLE_INTERVAL_S, sample
from knee.runner.state import PointNodes, RunState
from knee.runner.target import nodes_seen, watch_target
from knee.runner.timeline import apply_event
from knee.spec import Spec
from knee.stats.point import PointSettings
from knee.stats.progress import merged_progress
from knee.stats.summary import PointStats, Summary, SummaryExtra, SystemCheck, Target
from knee.toml_writer import dump_toml

#: Slack beyond a point's own bounds before the runner calls the load generator stuck.
STUCK_MARGIN_S = 60.0


def create_run_dir(root: Path, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)
    path = root / f"{safe}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = root / f"{safe}-{stamp}-{suffix}"
    (path / "raw").mkdir(parents=True)
    (path / "nodes").mkdir()
    return path


def run_experiment(
    spec: Spec, out_root: Path, display: Display, keep_scratch: bool = False
) -> Path:
    """Runs every point; returns the run directory. Raises NodeFailed or KeyboardInterrupt
    after stopping every node and writing what was measured, and Unsupported (knee.hosts)
    before anything starts when this machine cannot make the spec's hosts."""
    with Session(spec, out_root, display, keep_scratch) as session:
        session.plan(spec.points)
        for point in spec.points:
            interrupt.check()
            session.run_point(point)
        # The sweep's answers (capacity, SLO capacity, knee and what sets them, per group
        # of rates), in the shape of a search's `find`: a notebook and the report read them.
        slo = spec.experiment.get("slo")
        session.extra["answers"] = {"slo": slo, "groups": from_points(session.state.points, slo)}
    return session.run_dir


#: Called with a point's merged progress (knee.runner.display) about once a second; a
#: string it returns cuts the point short (its generators are stopped, as at the end of
#: their schedule) for that reason. `knee find` stops an overloaded probe this way.
Watch = Callable[[dict[str, Any]], str | None]


class Session:
    """One run directory and its hosts, open while points are run one at a time: `knee run`
    runs the spec's list, `knee find` decides each next point from the last one. On the
    way out (``with``), every node is stopped, the hosts are removed and the run's tables
    and summary.json are written with the run's status."""

    def __init__(
        self,
        spec: Spec,
        out_root: Path,
        display: Display,
        keep_scratch: bool = False,
        n_points: int | None = None,
    ) -> None:
        self.spec = spec
        self.display = display
        self.binary = node_binary()
        self.hosts = RunHosts(spec.placement, cleanup.new_run_id())
        self.hosts.check()
        self.run_dir = create_run_dir(out_root, spec.experiment["name"])
        self.state = RunState(
            run_dir=self.run_dir,
            t0_ns=time.monotonic_ns(),
            keep_scratch=keep_scratch,
            hosts=self.hosts,
        )
        self.n_points = len(spec.points) if n_points is None else n_points
        self.extra = self.state.extra

    def __enter__(self) -> Session:
        spec, run_dir = self.spec, self.run_dir
        header = f"# resolved from {spec.path}" + (f", preset {spec.preset}" if spec.preset else "")
        (run_dir / "spec.toml").write_text(header + "\n" + dump_toml(spec.resolved))
        self.plan([])
        self.machine = env.collect(self.binary)
        results.write_json(run_dir / "env.json", self.machine)
        self.display.run_started(run_dir, self.n_points)
        try:
            if self.hosts.needs_setup():
                self.state.event("hosts_setup", None, detail=f"run id {self.hosts.run_id}")
                self.hosts.setup()
                # What each host is (addresses, links, limits, clock offsets) as made.
                results.write_json(
                    run_dir / "env.json", {**self.machine, "hosts": self.hosts.describe()}
                )
        except BaseException as e:
            self.__exit__(type(e), e, None)
            raise
        return self

    def plan(self, points: list[Point]) -> None:
        """plan.json: the points planned so far (a search plans each probe as it decides
        it)."""
        run_params.write_plan(self.run_dir, self.spec.experiment, self.spec.events, points)

    def run_point(self, point: Point, watch: Watch | None = None) -> PointStats:
        """Runs one point and returns its statistics (also added to summary.json)."""
        _run_point(self.spec, point, self.state, self.display, watch)
        return self.state.points[-1]

    def write_summary(self) -> None:
        """summary.json now, with the points so far and `extra`."""
        results.write_json(
            self.run_dir / results.SUMMARY, _summary(self.spec, self.state, "running", self.extra)
        )

    def __exit__(self, kind: Any, error: Any, _tb: Any) -> None:
        state = self.state
        status = "complete"
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            status = "interrupted"
            state.event("run_interrupted", None)
        elif kind is not None:
            status = "failed"
            state.event("run_failed", None, detail=str(error).splitlines()[0] if str(error) else "")
        try:
            stop_all(state)
            if state.unfetched is not None:  # a failed point's files, before their hosts go
                nodes, raws = state.unfetched
                state.unfetched = None
                for problem in fetch_files(state, nodes, raws, strict=False):
                    state.event("fetch_failed", None, detail=problem)
            for problem in self.hosts.teardown():
                state.event("cleanup_failed", None, detail=problem)
        finally:
            self.display.run_finished()
            _write_outputs(self.spec, state, status, self.extra)


def _run_point(
    spec: Spec, point: Point, state: RunState, display: Display, watch: Watch | None
) -> None:
    """Runs one point, its record in points/pNNN.json saying how it ended."""
    record = run_params.from_point(point)
    record.status, record.started_s = "running", state.t_s()
    run_params.write_point(state.run_dir, record)
    try:
        _measure_point(spec, point, state, display, record, watch)
    except BaseException as e:
        record.status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        raise
    else:
        record.status = "complete"
    finally:
        record.ended_s = state.t_s()
        run_params.write_point(state.run_dir, record)


def _measure_point(
    spec: Spec,
    point: Point,
    state: RunState,
    display: Display,
    record: PointParams,
    watch: Watch | None,
) -> None:
    system = systems.SYSTEMS[spec.experiment["system"]]
    plans = systems.plan_nodes(system, point)
    placement = spec.placement.for_point(point.placement)
    where = check_nodes(placement, [p.name for p in plans], point.label)
    tag = f"p{point.index:03d}"
    warmup_ns = int(number(point.load, "warmup_s") * 1e9)
    state.event("point_start", point.index, detail=point.label)
    state.monitor.reset()  # the time between points is not this point's interference
    recorders = [p.name for p in plans if p.records]
    nodes = PointNodes({p.name: p for p in plans}, where, {}, {}, recorders, record)
    raws: dict[str, results.RawFile] = {}
    scratch = state.run_dir / "scratch" / tag
    state.unfetched = (nodes, raws)
    _start_nodes(state, point, system, nodes, raws, scratch)
    target = watch_target(state, point, system, where)
    expected = systems.expected_requests(point.load)
    per_recorder = len(raws) / integer(point.load, "generators")  # generators share the requests
    display.point_started(point, round(expected * per_recorder) if expected else None)
    cut = _drive(point, spec.events, state, display, nodes, system.name, watch)
    for name, raw in raws.items():
        raw.warmup_end_ns = nodes.starts_ns[name] + warmup_ns
    results.write_manifest(state.run_dir, state.raws)
    _stop_nodes(state, point, nodes)
    state.monitor.remove_tree(TARGET_NODE)
    fetch_files(state, nodes, raws)
    state.unfetched = None
    frame = results.point_frame(state.run_dir, list(raws.values()))
    # Before the scratch folder (a system's files) goes: the system's checker, if any.
    timeline = [e for e in state.events if e["point"] == point.index]
    check = chaos.check(
        system.name, chaos.PointRun(state.run_dir, point.index, frame, nodes.configs, timeline)
    )
    if check is not None:
        state.event("check", point.index, detail=str(check.get("verdict", "")))
    if not state.keep_scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    measured = _measured(point, state, system, nodes, frame, raws, target, check, cut)
    stats = analyse_point(measured)
    state.points.append(stats)
    results.write_json(
        state.run_dir / results.SUMMARY, _summary(spec, state, "running", state.extra)
    )
    state.event("point_end", point.index)
    display.point_finished(point, stats)


def _start_nodes(
    state: RunState,
    point: Point,
    system: systems.System,
    nodes: PointNodes,
    raws: dict[str, results.RawFile],
    scratch: Path,
) -> None:
    """Writes each node's config (its peers' addresses, its files' paths on its host) and
    starts those the timeline does not start later; a recorder's raw files go into the
    manifest as it starts."""
    tag = f"p{point.index:03d}"
    warmup_ns = int(number(point.load, "warmup_s") * 1e9)
    where = nodes.where
    plans = list(nodes.plans.values())
    for plan in plans:
        host = state.hosts.host_of(where[plan.name])
        config = substitute(plan.config, {**nodes.addrs, "scratch": host.scratch_path(scratch)})
        if host.kind != "local" and not plan.records:  # reached at its host's address
            config.setdefault("listen", f"{host.address}:0")
        if plan.records:
            raw = results.RawFile(
                point=point.index,
                series=point.series,
                node=plan.name,
                samples=f"raw/{tag}-{plan.name}.samples.bin",
                histogram=f"raw/{tag}-{plan.name}.histogram.csv",
                # The node's clock: a remote host's monotonic clock is offset from ours.
                run_start_ns=state.t0_ns + (host.clock_offset_ns or 0),
                # Approximate until the node reports its start; rewritten below.
                warmup_end_ns=time.monotonic_ns() + warmup_ns,
                warmup_requests=integer(point.load, "warmup_requests"),
                system=system.name,
            )
            config["samples_path"] = host.node_path(state.run_dir / raw.samples)
            config["histogram_path"] = host.node_path(state.run_dir / raw.histogram)
            raws[plan.name] = raw
            state.raws.append(raw)
            results.write_manifest(state.run_dir, state.raws)
        for key, file_name in plan.outputs.items():
            local = state.run_dir / "raw" / f"{tag}-{file_name}"
            *tables, last = key.split(".")  # "server.log_path": a key inside a table
            table = config
            for name in tables:
                table = table.setdefault(name, {})
            table[last] = host.node_path(local)
            nodes.outputs.setdefault(plan.name, []).append(local)
        nodes.configs[plan.name] = config
        if plan.start:  # else an event of the timeline starts it
            start_node(state, point, nodes, plan.name, system.name)


def _stop_nodes(state: RunState, point: Point, nodes: PointNodes) -> None:
    plans = list(nodes.plans.values())
    # Every node still running is asked to stop at once, then each is waited for: servers
    # that react to their peers' leaving (slices' PNs hand their slices to PNs that stay)
    # see them all go together, as at a shutdown, and a point's teardown takes one grace
    # period, not one per node.
    for name in nodes.frozen:  # a frozen node would not see its SIGTERM
        state.nodes[name].signal(signal.SIGCONT)
    for plan in plans:
        if (node := state.nodes.get(plan.name)) is not None and node.alive():
            node.signal(signal.SIGTERM)
    for plan in reversed(plans):
        stop_node(state, point.index, plan.name)


def _measured(
    point: Point,
    state: RunState,
    system: systems.System,
    nodes: PointNodes,
    frame: Any,
    raws: dict[str, results.RawFile],
    target: Target | None,
    check: SystemCheck | None,
    cut: str | None,
) -> MeasuredPoint:
    """What the analysis of the point (knee.analysis.point) needs of it."""
    where, plans = nodes.where, list(nodes.plans.values())
    warmup_end_s = min(r.warmup_end_ns - r.run_start_ns for r in raws.values()) / 1e9
    measured = MeasuredPoint(
        run_dir=state.run_dir,
        index=point.index,
        series=point.series,
        label=point.label,
        swept=point.swept,
        settings=PointSettings(
            schedule=text(point.load, "schedule"),
            target_rate_per_s=systems.target_rate_per_s(point.load),
            late_ms=opt_number(point.load, "late_ms"),
            timeout_ms=opt_number(point.load, "timeout_ms"),
            cache_hit_flag=system.cache_hit_flag if point.server.get("cache") else None,
            queue_name=system.queue_name,
            connections=opt_integer(point.load, "connections")
            if system.one_request_per_connection
            else None,
            system=system.name,
        ),
        frame=frame,
        recorders=list(raws),
        warmup_end_s=warmup_end_s,
        rows=state.timeseries,
        nodes=nodes_seen(state, system, plans, where),
        link_bytes_per_s={
            name: float(rate_mbit) * 1e6 / 8
            for name, host in state.hosts.hosts.items()
            if (rate_mbit := getattr(host, "rate_mbit", None))
        },
        part=system.detail_part(point.server) if system.detail_part else None,
        host_cores={h: c for h in set(where.values()) if (c := state.hosts.cores_of(h))},
        timeout_ms=number(point.load, "timeout_ms"),
        http=system.name in ("http", "grpc"),
        slo=point.slo,
        target=target,
        check=check,
        cut=cut,
    )
    return measured


def _drive(
    point: Point,
    timeline: list[TimelineEvent],
    state: RunState,
    display: Display,
    nodes: PointNodes,
    system: str,
    watch: Watch | None = None,
) -> str | None:
    """Follows the recording nodes until every one has ended, applying the event timeline
    (times from the moment the recorders were started) and sampling resources. Returns why
    `watch` cut the point short, or None."""
    cut: str | None = None
    t0 = time.monotonic()
    pending = list(timeline)
    bound_s = opt_number(point.load, "duration_s")
    deadline = (
        t0 + bound_s + number(point.load, "timeout_ms") / 1e3 + STUCK_MARGIN_S if bound_s else None
    )
    progress: dict[str, dict[str, Any]] = {}
    next_sample = t0 + SAMPLE_INTERVAL_S
    while True:
        interrupt.check()
        now = time.monotonic()
        while pending and now - t0 >= pending[0]["at_s"]:
            apply_event(state, point, nodes, pending.pop(0), system)
        for name in nodes.recorders:
            node = state.nodes[name]
            while not node.events.empty():
                ev = node.events.get_nowait()
                if ev.get("event") == "progress":
                    progress[name] = ev
            if "start" in node.latest:
                nodes.starts_ns[name] = int(node.latest["start"]["start_ns"])
        if progress:
            display.node_lines(progress)
            merged = merged_progress(list(progress.values()))
            display.progress(merged)
            if watch is not None and cut is None and (cut := watch(merged)) is not None:
                state.event("cut_short", point.index, detail=cut)
                for name in nodes.recorders:  # no new sends; the grace for replies
                    if name not in nodes.ended and state.nodes[name].alive():
                        state.nodes[name].signal(signal.SIGTERM)
            progress.clear()  # each line is watched once
        for name, node in list(state.nodes.items()):
            if name in nodes.ended or node.alive():
                continue
            code = node.proc.wait()
            if name not in nodes.recorders:
                raise node.failure(f"exited with code {code} during the point")
            if code != 0:
                raise node.failure(f"exited with code {code}")
            nodes.ended.add(name)
        running = any(n not in nodes.ended for n in nodes.recorders)
        if not running:
            break
        if deadline is not None and now > deadline:
            raise state.nodes[nodes.recorders[0]].failure(
                f"did not finish within {(bound_s or 0) + STUCK_MARGIN_S:g} s"
            )
        if now >= next_sample:
            next_sample += SAMPLE_INTERVAL_S
            display.sampled(sample(state, point.index))
        time.sleep(0.05)
    display.sampled(sample(state, point.index))
    missing = [n for n in nodes.recorders if n not in nodes.starts_ns]
    if missing:
        raise state.nodes[missing[0]].failure("ended without reporting its start")
    return cut


def _summary(
    spec: Spec, state: RunState, status: str, extra: SummaryExtra | None = None
) -> Summary:
    return {
        "experiment": spec.experiment["name"],
        "system": spec.experiment["system"],
        "preset": spec.preset,
        "status": status,
        "points": state.points,
        **(extra or {}),
    }


def _write_outputs(
    spec: Spec, state: RunState, status: str, extra: SummaryExtra | None = None
) -> None:
    results.write_table(state.run_dir / results.EVENTS, state.events)
    results.write_table(state.run_dir / results.TIMESERIES, state.timeseries)
    results.write_samples(state.run_dir, state.raws)
    results.write_json(state.run_dir / results.SUMMARY, _summary(spec, state, status, extra))
