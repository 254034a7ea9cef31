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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from knee import contract, env, results, run_params, systems
from knee.analysis import chaos
from knee.analysis import http as http_analysis
from knee.find.answers import from_points
from knee.hosts import RunHosts, cleanup
from knee.hosts.cgroups import process_cpu_limit
from knee.hosts.spec import LOCAL, check_nodes
from knee.monitor import HOST_NODE, HOST_ROLE, Monitor
from knee.params import Point
from knee.resources import usage as resource_usage
from knee.resources.listener import find_listener
from knee.resources.usage import point_resources
from knee.run_params import PointParams
from knee.runner import interrupt
from knee.runner.display import Display
from knee.runner.node import Node, node_binary
from knee.spec import PRIMARY, Spec
from knee.stats import point_stats, slo
from knee.stats.interference import add_interference
from knee.stats.progress import merged_progress
from knee.stats.replies import http_status_counts
from knee.stats.slo import point_slo
from knee.systems import NodePlan
from knee.toml_writer import dump_toml

#: How often CPU and node counters go into the time series.
SAMPLE_INTERVAL_S = resource_usage.ROW_S
#: A server that does not report its address within this is reported as failed.
READY_TIMEOUT_S = 15.0
#: Slack beyond a point's own bounds before the runner calls the load generator stuck.
STUCK_MARGIN_S = 60.0


@dataclass
class RunState:
    run_dir: Path
    t0_ns: int
    hosts: RunHosts  # where nodes run (knee.hosts)
    events: list[dict[str, Any]] = field(default_factory=list)
    timeseries: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    raws: list[results.RawFile] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    monitor: Monitor = field(default_factory=Monitor)
    keep_scratch: bool = False
    remote_usage: dict[str, tuple[float, float]] = field(default_factory=dict)  # node: t, cpu_s
    #: Top-level keys added to summary.json besides the points (`knee find`: "find").
    extra: dict[str, Any] = field(default_factory=dict)

    def t_s(self) -> float:
        return (time.monotonic_ns() - self.t0_ns) / 1e9

    def event(self, kind: str, point: int | None, node: str = "", detail: str = "") -> None:
        self.events.append(
            {
                "t_s": self.t_s(),
                "point": -1 if point is None else point,
                "node": node,
                "kind": kind,
                "detail": detail,
            }
        )


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

    def run_point(self, point: Point, watch: Watch | None = None) -> dict[str, Any]:
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
            _stop_all(state)
            for problem in self.hosts.teardown():
                state.event("cleanup_failed", None, detail=problem)
        finally:
            self.display.run_finished()
            _write_outputs(self.spec, state, status, self.extra)


@dataclass
class PointNodes:
    """The nodes of the point being run, as the event timeline and the drive loop see them."""

    plans: dict[str, NodePlan]
    where: dict[str, str]  # each node's host
    configs: dict[str, dict[str, Any]]  # as started, placeholders replaced
    addrs: dict[str, str]  # reported by each node's ready line
    recorders: list[str]
    record: PointParams  # what the point runs with, rewritten in points/pNNN.json
    ended: set[str] = field(default_factory=set)  # finished, or stopped by an event
    frozen: set[str] = field(default_factory=set)  # stopped by SIGSTOP (a freeze event)
    started: set[str] = field(default_factory=set)  # started at least once
    outputs: dict[str, list[Path]] = field(default_factory=dict)  # files each node writes
    starts_ns: dict[str, int] = field(default_factory=dict)  # each recorder's schedule start


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
    warmup_ns = int(point.load["warmup_s"] * 1e9)
    state.event("point_start", point.index, detail=point.label)
    state.monitor.reset()  # the time between points is not this point's interference
    recorders = [p.name for p in plans if p.records]
    nodes = PointNodes({p.name: p for p in plans}, where, {}, {}, recorders, record)
    raws: dict[str, results.RawFile] = {}
    scratch = state.run_dir / "scratch" / tag
    for plan in plans:
        host = state.hosts.host_of(where[plan.name])
        config = _substitute(plan.config, {**nodes.addrs, "scratch": host.scratch_path(scratch)})
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
                warmup_requests=point.load["warmup_requests"],
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
            _start_node(state, point, nodes, plan.name, system.name)
    target = _watch_target(state, point, system, where)
    expected = systems.expected_requests(point.load)
    per_recorder = len(raws) / point.load["generators"]  # generators share the requests
    display.point_started(point, round(expected * per_recorder) if expected else None)
    cut = _drive(point, spec.events, state, display, nodes, system.name, watch)
    for name, raw in raws.items():
        raw.warmup_end_ns = nodes.starts_ns[name] + warmup_ns
    results.write_manifest(state.run_dir, state.raws)
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
        _stop(state, point.index, plan.name)
    state.monitor.remove_tree(TARGET_NODE)
    _fetch(state, nodes, raws)
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
    stats = point_stats(
        frame,
        schedule=point.load["schedule"],
        target_rate_per_s=systems.target_rate_per_s(point.load),
        late_ms=point.load["late_ms"],
        timeout_ms=point.load["timeout_ms"],
        cache_hit_flag=system.cache_hit_flag if point.server.get("cache") else None,
        queue_name=system.queue_name,
        connections=point.load["connections"] if system.one_request_per_connection else None,
        system=system.name,
    )
    warmup_end_s = min(r.warmup_end_ns - r.run_start_ns for r in raws.values()) / 1e9
    stats.update(
        point=point.index,
        series=point.series,
        label=point.label,
        swept=point.swept,
        target_rate_per_s=systems.target_rate_per_s(point.load),
    )
    if target is not None:
        stats["target"] = target
    if (codes := http_status_counts(frame)) is not None:
        stats["http_statuses"] = codes
    if system.name in ("http", "grpc"):  # HTTP/1.1 or HTTP/2, its streams (docs/http2.md)
        stats["http"] = http_analysis.done_fields(state.run_dir, point.index, sorted(raws))
    stats["resources"] = point_resources(
        _resource_inputs(state, point, system, plans, where, stats, frame, warmup_end_s)
    )
    if check is not None:
        stats["check"] = check
    if cut is not None:
        stats["cut_short"] = cut
    if point.experiment.get("slo"):
        stats["slo"] = point_slo(frame, slo.parse(point.experiment["slo"]), stats)
    add_interference(stats, state.timeseries, point.index, warmup_end_s)
    state.points.append(stats)
    results.write_json(
        state.run_dir / results.SUMMARY, _summary(spec, state, "running", state.extra)
    )
    state.event("point_end", point.index)
    display.point_finished(point, stats)


def _fetch(state: RunState, nodes: PointNodes, raws: dict[str, results.RawFile]) -> None:
    """Brings the files that nodes on remote hosts wrote (recorders' samples and
    histograms, nodes' outputs) into raw/; a local host's node wrote them there already."""
    files = {name: list(paths) for name, paths in nodes.outputs.items()}
    for name, raw in raws.items():
        files.setdefault(name, []).extend(
            [state.run_dir / raw.samples, state.run_dir / raw.histogram]
        )
    for name, paths in files.items():
        if name not in nodes.started:
            continue
        host = state.hosts.host_of(nodes.where[name])
        for local in paths:
            if host.node_path(local) != str(local):
                host.fetch(host.node_path(local), local)


_ADDR = re.compile(r"\{addr:([A-Za-z0-9_-]+)\}|\{(scratch)\}")


def _substitute(value: Any, addrs: dict[str, str]) -> Any:
    """A copy of a node config with every "{addr:NAME}" replaced by NAME's address and
    "{scratch}" by the point's scratch folder (run_dir/scratch/pNNN: files a system makes,
    removed after the point unless `knee run --keep-scratch`)."""
    if isinstance(value, dict):
        return {k: _substitute(v, addrs) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, addrs) for v in value]
    if isinstance(value, str):

        def address(m: re.Match[str]) -> str:
            key = m.group(1) or m.group(2)
            if key not in addrs:
                raise ValueError(f"node config refers to {m.group(0)} before that node is ready")
            return addrs[key]

        return _ADDR.sub(address, value)
    return value


def _start_node(state: RunState, point: Point, nodes: PointNodes, name: str, system: str) -> Node:
    """Starts one node of the point; a node that does not record is waited for until ready."""
    tag = f"p{point.index:03d}"
    node_config = nodes.configs[name]
    host_name = nodes.where[name]
    node = Node(
        name,
        nodes.plans[name].role,
        system,
        node_config,
        config_path=state.run_dir / "nodes" / f"{name}.{tag}.json",
        log_path=state.run_dir / "nodes" / f"{name}.stderr.log",
        events_path=state.run_dir / "nodes" / f"{name}.{tag}.events.jsonl",
        host=state.hosts.host_of(host_name),
        wrap=state.hosts.wrap_for(name, host_name),
    )
    state.nodes[name] = node
    nodes.started.add(name)
    state.monitor.add(name, node.pid)
    state.remote_usage.pop(name, None)
    on = "" if host_name == LOCAL else f" on {host_name}"
    state.event("node_start", point.index, name, f"pid {node.pid}{on}")
    if all(n["name"] != name for n in nodes.record.topology):  # as first started
        plan = nodes.plans[name]
        nodes.record.topology.append(
            {
                "name": name,
                "role": plan.role,
                "records": plan.records,
                "host": host_name,
                "limits": state.hosts.limits_of(name, host_name),
                "config": node_config,
            }
        )
        run_params.write_point(state.run_dir, nodes.record)
    if not nodes.plans[name].records:
        ready = node.wait_ready(READY_TIMEOUT_S)
        nodes.addrs[name] = ready.get("addr", "")
        state.event("node_ready", point.index, name, nodes.addrs[name])
    return node


def _current_primary(state: RunState, nodes: PointNodes) -> str | None:
    """The replica that believes it is primary, by the running, unfrozen replicas' latest
    ``primary`` events (the lowest-numbered if a split brain has two); None when none does
    (e.g. a failover is still under way)."""
    claims = []
    for name in nodes.plans:
        node = state.nodes.get(name)
        view = node.latest.get("primary") if node is not None else None
        if view is None or name in nodes.frozen or not node.alive():
            continue
        if view.get("primary") == view.get("replica"):
            claims.append((int(view["replica"]), name))
    return min(claims)[1] if claims else None


def _apply_event(
    state: RunState, point: Point, nodes: PointNodes, event: dict[str, Any], system: str
) -> None:
    name, action = event["node"], event["action"]
    detail = f"at {event['at_s']:g} s"
    if name == PRIMARY:
        resolved = _current_primary(state, nodes)
        if resolved is None:
            state.event(f"{action}_skipped", point.index, name, detail + ": no primary")
            _applied(state, nodes, event, "skipped: no replica is primary")
            return
        event, name = {**event, "resolved": resolved}, resolved
        detail += " (the primary)"
    node = state.nodes.get(name)
    if action == "start":
        if node is not None and node.alive():
            state.event("start_skipped", point.index, name, detail + ": already running")
            _applied(state, nodes, event, "skipped: already running")
            return
        if node is not None:
            _stop(state, point.index, name)
        if name in nodes.addrs:  # back on the address its clients know
            nodes.configs[name] = {**nodes.configs[name], "listen": nodes.addrs[name]}
        nodes.ended.discard(name)
        state.event("start", point.index, name, detail)
        _applied(state, nodes, event, "applied")
        _start_node(state, point, nodes, name, system)
        return
    if node is None or not node.alive():
        state.event(f"{action}_skipped", point.index, name, detail + ": not running")
        _applied(state, nodes, event, "skipped: not running")
        return
    if action in ("freeze", "resume"):
        if (action == "freeze") == (name in nodes.frozen):
            state.event(f"{action}_skipped", point.index, name, detail + ": already so")
            _applied(state, nodes, event, "skipped: already " + action[:6] + "d")
            return
        state.event(action, point.index, name, f"{detail}, pid {node.pid}")
        _applied(state, nodes, event, "applied")
        node.signal(signal.SIGSTOP if action == "freeze" else signal.SIGCONT)
        (nodes.frozen.add if action == "freeze" else nodes.frozen.discard)(name)
        return
    nodes.ended.add(name)
    nodes.frozen.discard(name)
    state.event(action, point.index, name, f"{detail}, pid {node.pid}")
    _applied(state, nodes, event, "applied")
    if action == "kill":
        node.kill()
    else:
        node.stop()


def _applied(state: RunState, nodes: PointNodes, event: dict[str, Any], outcome: str) -> None:
    """Adds a timeline event to the point's record as the runner applied (or skipped) it."""
    nodes.record.events.append({**event, "t_s": state.t_s(), "outcome": outcome})
    run_params.write_point(state.run_dir, nodes.record)


def _drive(
    point: Point,
    timeline: list[dict[str, Any]],
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
    bound_s = point.load.get("duration_s")
    deadline = t0 + bound_s + point.load["timeout_ms"] / 1e3 + STUCK_MARGIN_S if bound_s else None
    progress: dict[str, dict[str, Any]] = {}
    next_sample = t0 + SAMPLE_INTERVAL_S
    while True:
        interrupt.check()
        now = time.monotonic()
        while pending and now - t0 >= pending[0]["at_s"]:
            _apply_event(state, point, nodes, pending.pop(0), system)
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
                f"did not finish within {bound_s + STUCK_MARGIN_S:g} s"
            )
        if now >= next_sample:
            next_sample += SAMPLE_INTERVAL_S
            display.sampled(_sample(state, point.index))
        time.sleep(0.05)
    display.sampled(_sample(state, point.index))
    missing = [n for n in nodes.recorders if n not in nodes.starts_ns]
    if missing:
        raise state.nodes[missing[0]].failure("ended without reporting its start")
    return cut


def _sample(state: RunState, point: int) -> list[dict[str, Any]]:
    """Adds one interval's rows to the time series; returns them."""
    start = len(state.timeseries)
    t_s = state.t_s()
    for name, usage in state.monitor.sample().items():
        node = state.nodes.get(name)
        if node is None:
            if name == TARGET_NODE:  # the service knee measures but did not start
                row = {"t_s": t_s, "point": point, "node": name, "role": TARGET_ROLE, **usage}
                state.timeseries.append(row)
            continue
        counters = node.latest.get("stats") or node.latest.get("progress") or {}
        row: dict[str, Any] = {"t_s": t_s, "point": point, "node": name, "role": node.role}
        row.update(usage)
        if node.host.remote:  # the local process is the node's ssh client
            row["ssh_cpu_percent"] = row["cpu_percent"]
            # The ssh client's waits are not the node's; its host reports none: unknown.
            row["cpu_wait_percent"] = None
            usage = node.host.usage(node.proc) or node.latest.get("usage")
            row.update(_remote_usage(state, name, usage))
        limits = state.hosts.limits_of(name, node.host.name)
        if limits.get("cpu_cores"):
            # CPU % relative to what the node may use: 100 = its whole quota.
            row["cpu_quota_cores"] = limits["cpu_cores"]
            row["cpu_percent_of_quota"] = row["cpu_percent"] / limits["cpu_cores"]
        for key in contract.TIMESERIES_FIELDS:
            if key in counters:
                row[key] = counters[key]
        state.timeseries.append(row)
    host = state.monitor.host  # the same interval, host-wide: foreign CPU, steal, iowait
    if host is not None:
        state.timeseries.append(
            {"t_s": t_s, "point": point, "node": HOST_NODE, "role": HOST_ROLE, **host}
        )
    for name, counters in state.hosts.interface_rows().items():  # each host's own link
        state.timeseries.append(
            {
                "t_s": t_s,
                "point": point,
                "node": f"link:{name}",
                "role": resource_usage.LINK_ROLE,
                **counters,
            }
        )
    return state.timeseries[start:]


def _remote_usage(state: RunState, name: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    """A remote node's CPU % and memory from its host's `usage` lines (cumulative CPU s)."""
    if not usage:
        return {}
    now, cpu_s = time.monotonic(), float(usage.get("cpu_s", 0.0))
    before = state.remote_usage.get(name)
    state.remote_usage[name] = (now, cpu_s)
    cpu_percent = resource_usage.cpu_percent_between(before, (now, cpu_s))
    return {"rss_bytes": usage.get("rss_bytes"), "cpu_percent": cpu_percent}


def _h2(stats: dict[str, Any]) -> bool:
    return (stats.get("http") or {}).get("protocol") == "h2"


def _slots(point: Point, system: systems.System, stats: dict[str, Any]) -> int | None:
    """How many requests the generator can have in flight at once, where a due request waits
    for one (the `connections` resource): its connections (HTTP/1.1: one request each), or
    over HTTP/2 its streams, connections x the server's SETTINGS_MAX_CONCURRENT_STREAMS (or
    the client's cap; None: no limit was set, so no such resource)."""
    if _h2(stats):
        return stats["http"].get("streams_limit_total")
    return point.load["connections"] if system.one_request_per_connection else None


def _resource_inputs(
    state: RunState,
    point: Point,
    system: systems.System,
    plans: list[systems.NodePlan],
    where: dict[str, str],
    stats: dict[str, Any],
    frame: Any,
    after_s: float,
) -> resource_usage.Inputs:
    """What knee.resources.usage needs of a point: each node's role, name in the system's
    words, CPU limit and pool; each emulated link's rate; the generator's connections."""
    nodes: dict[str, resource_usage.NodeInfo] = {}
    for plan in plans:
        pool = None
        if system.pool_key and plan.role == "serve":
            pool = (plan.config.get("server") or {}).get(system.pool_key)
        nodes[plan.name] = resource_usage.NodeInfo(
            role=plan.role,
            label=systems.part_label(system, plan.name),
            cpu_cores=state.hosts.limits_of(plan.name, where[plan.name]).get("cpu_cores"),
            pool=int(pool) if pool else None,
            generator=plan.role == "load",
            host=where[plan.name],
        )
    target = stats.get("target") or {}
    if target.get("found"):
        workers = target.get("workers")
        nodes[TARGET_NODE] = resource_usage.NodeInfo(
            role=TARGET_ROLE,
            label=f"the target {target['name']}",
            cpu_cores=target.get("cpu_cores"),  # its affinity or cgroup quota; None: all
            pool=workers,  # prefork workers; their busy time from Server-Timing
        )
    links = {
        name: float(host.rate_mbit) * 1e6 / 8
        for name, host in state.hosts.hosts.items()
        if getattr(host, "rate_mbit", None)
    }
    return resource_usage.Inputs(
        point=point.index,
        after_s=after_s,
        rows=state.timeseries,
        stats=stats,
        nodes=nodes,
        link_bytes_per_s=links,
        frame=frame,
        connections=_slots(point, system, stats),
        slots="streams" if _h2(stats) else "connections",
        timeout_ms=point.load["timeout_ms"],
        part=system.detail_part(point.server) if system.detail_part else None,
        host_cores={h: c for h in set(where.values()) if (c := state.hosts.cores_of(h))},
    )


#: The node name and role of the process tree serving an external target, in timeseries.
TARGET_NODE = "target"
TARGET_ROLE = "target"


def _watch_target(
    state: RunState, point: Point, system: systems.System, where: dict[str, str]
) -> dict[str, Any] | None:
    """Finds the process listening on the point's external target (knee.resources.listener)
    and samples its tree's CPU as the node "target"; the point's `target` record: what was
    found, or why nothing was. None when the point has no external target."""
    url = system.external_target(point) if system.external_target else None
    if not url:
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netns_pid = None
    for name, host_name in where.items():  # the target as the generator's network sees it
        node = state.nodes.get(name)
        if node is not None and state.hosts.host_of(host_name).kind == "netns":
            netns_pid = node.pid
            break
    found = find_listener(parts.hostname or "127.0.0.1", port, netns_pid=netns_pid)
    if isinstance(found, str):
        state.event("target", point.index, TARGET_NODE, found)
        return {"found": False, "reason": found}
    state.monitor.add_tree(TARGET_NODE, found.root_pid)
    # Its cores, as the kernel limits them: its affinity (taskset, a cpuset) and its
    # cgroup's CPU quota (docker --cpus, systemd's CPUQuota), as for knee's own nodes.
    limit = process_cpu_limit(found.root_pid)
    detail = f"{found.name}, pid {found.root_pid}, {len(found.pids)} processes"
    if limit["cpu_cores"] is not None:
        detail += f", {limit['cpu_cores']:g} cores"
    state.event("target", point.index, TARGET_NODE, detail)
    return {
        "found": True,
        "name": found.name,
        "root_pid": found.root_pid,
        "pids": list(found.pids),
        "workers": found.workers,
        **limit,
    }


def _stop(state: RunState, point: int | None, name: str) -> None:
    node = state.nodes.pop(name, None)
    if node is not None:
        code = node.stop()
        state.event("node_stop", point, name, f"exit code {code}")


def _stop_all(state: RunState) -> None:
    for name in list(state.nodes):
        _stop(state, None, name)


def _summary(
    spec: Spec, state: RunState, status: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "experiment": spec.experiment["name"],
        "system": spec.experiment["system"],
        "preset": spec.preset,
        "status": status,
        "points": state.points,
        **(extra or {}),
    }


def _write_outputs(
    spec: Spec, state: RunState, status: str, extra: dict[str, Any] | None = None
) -> None:
    results.write_table(state.run_dir / results.EVENTS, state.events)
    results.write_table(state.run_dir / results.TIMESERIES, state.timeseries)
    results.write_samples(state.run_dir, state.raws)
    results.write_json(state.run_dir / results.SUMMARY, _summary(spec, state, status, extra))
