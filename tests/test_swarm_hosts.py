"""Swarm hosts (knee.hosts.swarm) on the real swarm of scripts/docker worker (a manager, this
machine's node, and a worker node knee-sw1 in a network namespace): a point's two generators
as two replicas of one service on the worker, each with its slot and its share, started at
one wall-clock time, their requests crossing the overlay to the server on the manager; each
task's clock checked over the overlay; every address inside 198.18.0.0/15; the worker's
tasks read over ssh (its daemon, their cgroups and interfaces: the node has no socket
label); limits read back from the tasks' cgroups on both nodes; a killed runner's services
stop on both nodes and `knee cleanup` removes the rest; a generator killed mid-point keeps
its samples up to its last progress line (its files pushed as they grow); no swarm, an
unknown node, or a node whose ssh destination does not answer, refused in one line. One
smoke run (scripts/e2e's, where kept) serves several tests. Skipped without such a swarm (a
failure under KNEE_TEST_REQUIRE_HOSTS=1 or CI)."""

from __future__ import annotations

import io
import ipaddress
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import need_engine, unavailable
from report_helpers import knee_cmd, smoke_run

from knee import results
from knee.hosts import cleanup, engine, swarm, swarm_task
from knee.hosts.base import HostError, Limits, Unsupported
from knee.hosts.node_daemon import NodeDaemon
from knee.spec import SpecError, load_spec

KNEE_RANGE = ipaddress.ip_network("198.18.0.0/15")
#: Seconds to wait for the tasks of a run to appear, or to go.
WAIT_S = 60.0
#: The replicas' starts may differ by one CFS period (100 ms): a replica limited to a quarter
#: core that has used its quota when the start time comes runs again at the next period.
#: Without the gate they differ by their tasks' start times, which are 0.1-1 s apart.
START_SPREAD_NS = 100_000_000
MIB = 1 << 20
#: The worker node of scripts/docker worker, and the client key of its sshd.
WORKER = "knee-sw1"
WORKER_KEY = "/run/knee-sw1/ssh/client_ed25519"


def _need_swarm() -> None:
    need_engine("swarm hosts", swarm.check_swarm)
    try:
        worker = swarm.node_destination(WORKER)
    except HostError:
        worker = None
    if worker is None or not Path(WORKER_KEY).exists():
        unavailable(f"no swarm node {WORKER} with a knee.ssh label: run scripts/docker worker")


@pytest.fixture(scope="module")
def worker() -> Iterator[NodeDaemon]:
    """The worker's daemon, over ssh (its own master connection)."""
    _need_swarm()
    daemon = swarm.node_daemon(WORKER, WORKER_KEY)
    yield daemon
    daemon.close()


def _in_range(address: str) -> bool:
    return ipaddress.ip_address(address.rsplit(":", 1)[0]) in KNEE_RANGE


def _events(run_dir: Path, node: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in (run_dir / "nodes" / f"{node}.p000.events.jsonl").read_text().splitlines():
        event = json.loads(line)
        out.setdefault(event["event"], []).append(event)
    return out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need_swarm()
    run_dir, _ = smoke_run("matrix-swarm", tmp_path_factory.mktemp("swarm"))
    return run_dir


def test_two_generators_are_two_replicas_of_one_service_each_with_its_slot_and_share(
    smoke: Path,
) -> None:
    tasks = {n: _events(smoke, n)["clock"][0]["task"] for n in ("load-0", "load-1")}
    # A task's container is SERVICE.SLOT.TASK_ID.
    parts = {n: re.match(r"^(knee-\w+-gen-load-\d+)\.(\d+)\.\w+$", t) for n, t in tasks.items()}
    assert all(parts.values()), tasks
    assert parts["load-0"][1] == parts["load-1"][1]  # type: ignore[index]  # one service
    assert (parts["load-0"][2], parts["load-1"][2]) == ("1", "2")  # type: ignore[index]
    topology = json.loads((smoke / "points" / "p000.json").read_text())["topology"]
    configs = {n["name"]: n["config"] for n in topology}
    assert [configs[f"load-{i}"]["schedule"]["rate_per_s"] for i in (0, 1)] == [50.0, 50.0]
    assert configs["load-0"]["seed"] != configs["load-1"]["seed"]
    # Each slot sent its own share: together, what the point counts (warm-up included).
    point = json.loads((smoke / "summary.json").read_text())["points"][0]
    sent = [_events(smoke, f"load-{i}")["done"][0]["sent"] for i in (0, 1)]
    assert all(s > 0 for s in sent)
    assert sum(sent) == point["sent"] + point["warmup_count"]
    # Every request of the window answered: from the worker to the manager and back, over
    # the overlay.
    assert point["ok_in_window"] == point["sent_in_window"] > 0
    # Resources as on other hosts: the server's CPU against its limit, each host's link.
    server = point["resources"]["server"]
    assert (server["kind"], server["capacity"]) == ("cpu", 1.0)
    assert {"link:srv", "link:gen"} <= set(point["resources"])
    # The generators on the worker, its daemon reached over ssh; the server on this
    # machine's node, through knee's socket.
    hosts = json.loads((smoke / "env.json").read_text())["hosts"]["hosts"]
    placed = {h["name"]: (h["swarm_node"], h["daemon"]) for h in hosts if h["kind"] == "swarm"}
    assert placed == {
        "srv": (swarm.this_node(), engine.socket()),
        "gen": (WORKER, f"ssh://{swarm.node_destination(WORKER)}"),
    }


def test_the_workers_tasks_are_read_over_ssh_their_cpu_from_their_cgroups_their_bytes(
    smoke: Path,
) -> None:
    # The worker's node names no socket here: knee reaches it over ssh only.
    labels = engine.run(["node", "inspect", WORKER, "--format", "{{json .Spec.Labels}}"], "")
    assert json.loads(labels) == {"knee.ssh": swarm.node_destination(WORKER)}
    # Each generator's CPU seconds, read from its task's cgroup over ssh at each sample: some,
    # and no more than its quarter core allows over the samples' span.
    ts = results.open_run(smoke).timeseries
    for node in ("load-0", "load-1"):
        rows = ts[ts["node"] == node].sort_values("t_s")
        dt = rows["t_s"].diff().fillna(0.0)
        cpu_s = float((rows["cpu_percent"].fillna(0.0) / 100 * dt).sum())
        span_s = float(rows["t_s"].iloc[-1] - rows["t_s"].iloc[0])
        assert 0 < cpu_s <= span_s * 0.25 * 1.05, (node, cpu_s, span_s)
    # The generators' host's link: their tasks' overlay interfaces, read over ssh, carried
    # the point's requests and replies.
    link = ts[ts["node"] == "link:gen"]
    assert link["bytes_rx"].max() > 0 and link["bytes_tx"].max() > 0


def test_the_replicas_start_at_one_wall_clock_time(smoke: Path) -> None:
    events = [_events(smoke, f"load-{i}") for i in (0, 1)]
    (at0,), (at1,) = (e["start_at"] for e in events)
    assert at0["unix_ns"] == at1["unix_ns"] and at0["replicas"] == 2
    starts = [e["start"][0]["start_ns"] for e in events]  # one machine: one monotonic clock
    assert abs(starts[0] - starts[1]) < START_SPREAD_NS


def test_each_tasks_clock_is_checked_over_the_overlay_and_every_address_is_in_knee_range(
    smoke: Path, worker: NodeDaemon
) -> None:
    hosts = json.loads((smoke / "env.json").read_text())["hosts"]["hosts"]
    subnets = {h["subnet"] for h in hosts if h["kind"] == "swarm"}
    assert len(subnets) == 1
    overlay = ipaddress.ip_network(subnets.pop())
    assert overlay.subnet_of(KNEE_RANGE)
    for node in ("load-0", "load-1"):  # the recorders: their sample times need the clock
        (clock,) = _events(smoke, node)["clock"]
        # Dialed at the task's address on the run's overlay (the worker's task, from a
        # container on this machine's node).
        address, port = clock["dialed"].rsplit(":", 1)
        assert ipaddress.ip_address(address) in overlay and int(port) == swarm.CLOCK_PORT
        # One kernel: the offset is zero within the bound of its round trips.
        assert 0 < clock["uncertainty_ns"] < 50_000_000
        assert abs(clock["offset_ns"]) <= clock["uncertainty_ns"]
    assert _in_range(_events(smoke, "server")["ready"][0]["addr"])
    for daemon in (engine.socket(), worker):  # this node's, the worker's (over ssh)
        names = engine.run(["network", "ls", "--format", "{{.Name}}"], "", host=daemon).split()
        assert {"ingress", "docker_gwbridge"} <= set(names)
        subnets = engine.network_subnets(names, host=daemon).values()
        assert all(engine.outside_range(s) == [] for s in subnets)


SPEC = """
[experiment]
name = "swarm-kill"
system = "matrix"

[hosts.srv]
kind = "swarm"
cpu_cores = 1.0
memory_mb = 64

[hosts.gen]
kind = "swarm"
node = "knee-sw1"
identity_file = "/run/knee-sw1/ssh/client_ed25519"
cpu_cores = 0.25

[placement]
server = "srv"
"load-*" = "gen"

[driver]
n = 20
p = 10

[load]
generators = 2
rate_per_s = 20
duration_s = 60
warmup_s = 0
"""


def _running(run_id: str, host: str | None, *daemons: engine.DaemonRef) -> list[str]:
    """Running containers of the run (of host ``host``), on ``daemons``."""
    label = ["--filter", f"label=knee.host={host}"] if host else []
    return [
        name
        for d in daemons
        for name in engine.run(
            ["ps", "--filter", f"label=knee.run={run_id}", *label, "--format", "{{.Names}}"],
            "listing",
            host=d,
        ).split()
    ]


def _start_run(spec_text: str, tmp_path: Path, records: Path) -> subprocess.Popen[bytes]:
    """`knee run` of the spec into tmp_path/runs, its run records in `records` (for
    `knee cleanup`), started in the background."""
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    return subprocess.Popen(
        knee_cmd("run", str(spec), "--out", str(tmp_path / "runs"), "--no-progress"),
        env={**os.environ, "KNEE_RECORDS_DIR": str(records)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_limits_are_read_back_and_a_killed_runners_services_stop_and_cleanup_removes_them(
    tmp_path: Path, worker: NodeDaemon
) -> None:
    records = tmp_path / "records"
    runner = _start_run(SPEC, tmp_path, records)
    deadline, run_id, gens = time.monotonic() + WAIT_S, "", []
    while time.monotonic() < deadline and runner.poll() is None:
        run_ids = [p.stem for p in records.glob("*.json")]
        if run_ids and len(gens := _running(run_ids[0], "gen", worker)) == 2:
            run_id = run_ids[0]
            break
        time.sleep(0.2)
    if not run_id:
        runner.kill()
        pytest.fail(f"the run's tasks did not start: {runner.communicate()[1].decode()[-2000:]}")
    try:
        (srv,) = _running(run_id, "srv", engine.socket())
        fmt = "{{.State.Pid}} {{json .Config.Env}}"
        mounts = "{{range .Mounts}}{{.Type}} {{end}}"
        here = NodeDaemon(socket=engine.socket())
        on = {srv: here, **dict.fromkeys(gens, worker)}  # the daemon of each (ssh: the worker)
        for name, cores in ((srv, 1.0), *((g, 0.25) for g in gens)):
            daemon = on[name]
            pid, envs = engine.run(["inspect", "--format", fmt, name], "", host=daemon).split(
                " ", 1
            )
            # Read on the task's node (over ssh for the worker's), in one command each.
            cpu = daemon.cgroup_dirs(int(pid))["cpu"]
            quota, period = str(cpu / "cpu.cfs_quota_us"), str(cpu / "cpu.cfs_period_us")
            net_dev, route = f"/proc/{pid}/net/dev", f"/proc/{pid}/net/route"
            got = daemon.read([quota, period, net_dev, route])
            assert int(got[quota] or 0) / int(got[period] or 1) == pytest.approx(cores)
            # No bind mount: the node protocol and its files go over the overlay network.
            types = engine.run(["inspect", "--format", mounts, name], "", host=daemon).split()
            assert types == ["tmpfs", "tmpfs"]
            slot = name.split(".")[1]  # SERVICE.SLOT.TASK_ID
            assert f"KNEE_SLOT={slot}" in json.loads(envs)
            # One interface on the run's overlay network, no default route.
            lines = (got[net_dev] or "").splitlines()[2:]
            assert sorted(line.split(":")[0].strip() for line in lines) == ["eth0", "lo"]
            routes = (got[route] or "").splitlines()[1:]
            assert routes and all(line.split()[1] != "00000000" for line in routes)
        memory = here.cgroup_dirs(
            int(engine.run(["inspect", "--format", "{{.State.Pid}}", srv], ""))
        )
        limit = str(memory["memory"] / "memory.limit_in_bytes")
        assert int(here.read([limit])[limit] or 0) == 64 * MIB
    finally:
        runner.kill()
        runner.communicate(timeout=WAIT_S)
    # The runner held every task's lifeline: it ended, so did the nodes on both swarm nodes
    # (no restart).
    deadline = time.monotonic() + WAIT_S
    both = (engine.socket(), worker)
    while _running(run_id, None, *both) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running(run_id, None, *both) == []
    assert len(swarm.services(run_id)) == 2  # left for knee cleanup
    env = {**os.environ, "KNEE_RECORDS_DIR": str(records)}
    proc = subprocess.run(knee_cmd("cleanup"), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"removed docker network knee-{run_id}-swarm" in proc.stdout
    assert swarm.services(run_id) == []
    assert engine.run(["network", "ls", "--filter", f"label=knee.run={run_id}", "-q"], "") == ""
    assert not list(records.glob("*.json"))


def test_no_swarm_and_a_cpuset_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("cpu_cores = 0.25", 'cpuset = "0"'))
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert e.value.key == "hosts.gen.cpuset" and "\n" not in str(e.value)
    _need_swarm()  # the client
    monkeypatch.setenv("KNEE_DOCKER_HOST", "unix:///nonexistent/knee-docker.sock")
    with pytest.raises(Unsupported) as refused:
        swarm.check_swarm()
    assert "\n" not in str(refused.value)
    assert str(refused.value).endswith("run scripts/docker")
    monkeypatch.delenv("KNEE_DOCKER_HOST")
    elsewhere = _refusal("another-machine")
    assert "\n" not in elsewhere and "another-machine" in elsewhere


def _refusal(node: str) -> str:
    """What setup() of a swarm host on ``node`` is refused with (Unsupported)."""
    network = swarm.Network(cleanup.new_run_id())
    host = swarm.SwarmHost("far", Limits(), network, node=node, identity_file=WORKER_KEY)
    try:
        with pytest.raises(Unsupported) as refused:
            host.setup()
    finally:
        host.teardown()
        network.teardown()
    return str(refused.value)


def test_a_node_whose_ssh_does_not_answer_or_without_its_label_is_refused_in_one_line() -> None:
    _need_swarm()
    label = swarm.node_destination(WORKER)
    update = ["node", "update", WORKER]
    try:
        # The worker's label names a port of its address where no sshd answers (refused at
        # once: an address where no machine answers costs the ARP's 3 s more).
        engine.run([*update, "--label-add", "knee.ssh=root@198.19.254.2:2"], "relabelling")
        far = _refusal(WORKER)
        # ssh's own reason (its connection refused), not a docker command's timeout.
        assert "\n" not in far and "knee.ssh=root@198.19.254.2:2" in far and "ssh: " in far
        assert "Connection refused" in far and "no answer within" not in far
        engine.run([*update, "--label-rm", "knee.ssh"], "relabelling")
        unlabelled = _refusal(WORKER)
        assert "\n" not in unlabelled
        assert f"set it (docker node update --label-add knee.ssh=root@ADDRESS {WORKER})" in (
            unlabelled
        )
    finally:
        engine.run([*update, "--label-add", f"knee.ssh={label}"], "relabelling")


KILL_SPEC = """
[experiment]
name = "swarm-kill-load"
system = "matrix"

[hosts.gen]
kind = "swarm"
node = "knee-sw1"
identity_file = "/run/knee-sw1/ssh/client_ed25519"
cpu_cores = 0.5

[placement]
server = "gen"
load = "gen"

[driver]
n = 20
p = 10

[load]
rate_per_s = 100
duration_s = 30
warmup_s = 0
"""
#: The recorder writes its samples at least every 100 ms: one flush at KILL_SPEC's rate.
ONE_FLUSH = 100 * 0.1


def test_a_generator_killed_mid_point_keeps_its_samples_up_to_its_last_progress_line(
    tmp_path: Path, worker: NodeDaemon
) -> None:
    records = tmp_path / "records"
    runner = _start_run(KILL_SPEC, tmp_path, records)
    deadline, task = time.monotonic() + WAIT_S, ""
    while time.monotonic() < deadline and runner.poll() is None:
        logs = list((tmp_path / "runs").glob("*/nodes/load.p000.events.jsonl"))
        # A progress line: the generator's files were pushed mid-point.
        if logs and '"event":"progress"' in logs[0].read_text():
            (run_id,) = [p.stem for p in records.glob("*.json")]
            (task,) = [t for t in _running(run_id, "gen", worker) if "-load-" in t]
            break
        time.sleep(0.1)
    if not task:
        runner.kill()
        pytest.fail(f"the generator did not progress: {runner.communicate()[1].decode()[-2000:]}")
    engine.run(["kill", task], "killing the generator's task", host=worker)  # over ssh
    _, err = runner.communicate(timeout=WAIT_S * 2)
    assert runner.returncode != 0
    assert "node load exited with code 137" in err.decode()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "points" / "p000.json").read_text())["status"] == "failed"
    # Its samples came up to its last progress line (pushed just before it), and they are
    # knee-node's records.
    last = _events(run_dir, "load")["progress"][-1]
    samples = results.read_sample_records(run_dir / "raw" / "p000-load.samples.bin")
    assert len(samples) >= last["completed"] > 0
    assert len(samples) >= last["sent"] - ONE_FLUSH
    assert swarm.services(run_id) == []  # the run cleaned up


def _frame(name: str, offset: int, data: bytes) -> bytes:
    head = {"event": "file", "name": name, "offset": offset, "bytes": len(data)}
    return json.dumps(head, separators=(",", ":")).encode() + b"\n" + data


def test_the_agent_appends_each_frame_at_its_offset_and_refuses_one_that_does_not_fit(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    stream = io.BytesIO(
        _frame("s.bin", 0, b"abc")
        + b'{"event":"progress","sent":3}\n'
        + _frame("s.bin", 3, b"de")
        + _frame("s.bin", 9, b"zz")  # a gap: refused, and the file's later frames
        + _frame("s.bin", 5, b"f")
        + _frame("h.csv", 0, b"value_ns,count\n")
    )
    problems: list[str] = []
    swarm_task.pass_on(stream, tmp_path, problems)
    assert problems == []
    assert (tmp_path / "s.bin").read_bytes() == b"abcde"
    assert (tmp_path / "h.csv").read_bytes() == b"value_ns,count\n"
    out, err = capsysbinary.readouterr()
    assert out == b'{"event":"progress","sent":3}\n'  # the other lines go on
    assert err.decode().splitlines() == [
        "swarm task: s.bin: a frame at offset 9, the copy has 5 bytes: refused, with the "
        "file's later frames"
    ]
    # A connection that ends inside a frame: what came is kept, and the end is named.
    swarm_task.pass_on(io.BytesIO(_frame("s.bin", 5, b"ghij")[:-2]), tmp_path, problems)
    assert (tmp_path / "s.bin").read_bytes() == b"abcdegh"
    assert problems == ["s.bin: 2 of a frame's 4 bytes missing"]
