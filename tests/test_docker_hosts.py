"""Docker hosts (knee.hosts.docker) on the real daemon of scripts/docker: limits read back
from the containers' cgroups, the node protocol through the attached streams, a container
killed mid-run (its point's files kept), a killed runner, clean-up, and every address inside
198.18.0.0/15.
Skipped where there is no such daemon (a failure under KNEE_TEST_REQUIRE_HOSTS=1 or CI)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import need_engine
from report_helpers import knee_cmd, smoke_run

from knee import results
from knee.hosts import cleanup, docker
from knee.hosts.base import Limits, Unsupported
from knee.runner.node import Node
from knee.spec import SpecError, load_spec

KNEE_RANGE = ipaddress.ip_network("198.18.0.0/15")
#: Seconds to wait for a container to appear, or to go.
WAIT_S = 30.0
MIB = 1 << 20


def _need_daemon() -> None:
    need_engine("docker hosts", docker.check_daemon)


def _in_range(address: str) -> bool:
    return ipaddress.ip_address(address.rsplit(":", 1)[0]) in KNEE_RANGE


class Pair:
    """Two docker hosts of one run, with an echo server started on each."""

    def __init__(self, root: Path) -> None:
        self.network = docker.Network(cleanup.new_run_id())
        self.quota = docker.DockerHost(
            "quota", Limits(cpu_cores=0.5, memory_bytes=64 * MIB), self.network
        )
        self.pinned = docker.DockerHost("pinned", Limits(cpuset="0"), self.network)
        self.nodes: list[Node] = []
        self.root = root

    def start(self, host: docker.DockerHost, name: str) -> Node:
        node = Node(
            name,
            "serve",
            "echo",
            {"listen": f"{host.address}:0"},
            config_path=self.root / f"{name}.json",
            log_path=self.root / f"{name}.log",
            host=host,
        )
        self.nodes.append(node)
        return node


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    _need_daemon()
    p = Pair(tmp_path_factory.mktemp("docker"))
    try:
        p.quota.setup()
        p.pinned.setup()
        for host in (p.quota, p.pinned):
            p.start(host, f"echo-{host.name}").wait_ready(WAIT_S)
        yield p
    finally:
        for node in p.nodes:
            node.stop()
        p.quota.teardown()
        p.pinned.teardown()
        p.network.teardown()
    assert docker.labelled("container", p.network.run_id) == []
    assert docker.labelled("network", p.network.run_id) == []


def test_limits_are_read_back_from_the_containers_cgroups(pair: Pair) -> None:
    quota, pinned = pair.nodes
    dirs = pair.quota.cgroup_of(quota.proc)
    quota_us = int((dirs["cpu"] / "cpu.cfs_quota_us").read_text())
    period_us = int((dirs["cpu"] / "cpu.cfs_period_us").read_text())
    assert quota_us / period_us == pytest.approx(0.5)
    assert int((dirs["memory"] / "memory.limit_in_bytes").read_text()) == 64 * MIB
    cpus = (pair.pinned.cgroup_of(pinned.proc)["cpuset"] / "cpuset.cpus").read_text().strip()
    assert cpus == "0"
    # The node's CPU time and memory come from its container (its cgroup, its process).
    usage = pair.quota.usage(quota.proc)
    assert usage is not None and usage["cpu_s"] > 0 and usage["rss_bytes"] > MIB


def test_the_node_protocol_runs_through_the_attached_streams(pair: Pair) -> None:
    quota, _ = pair.nodes
    ready = quota.latest["ready"]
    assert ready["pid"] == 1  # the node is the container's own process
    assert ready["addr"].startswith(f"{pair.quota.address}:")
    deadline = time.monotonic() + WAIT_S
    while "stats" not in quota.latest and time.monotonic() < deadline:
        time.sleep(0.05)
    assert quota.latest["stats"]["requests"] == 0  # its once-a-second line, through attach


def test_every_address_is_inside_knee_range_and_nothing_is_routed_out(pair: Pair) -> None:
    assert ipaddress.ip_network(pair.network.subnet).subnet_of(KNEE_RANGE)
    assert all(_in_range(h.address) for h in (pair.quota, pair.pinned))
    assert all(_in_range(n.latest["ready"]["addr"]) for n in pair.nodes)
    names = docker.run(["network", "ls", "--format", "{{.Name}}"], "listing").split()
    subnets = docker.network_subnets(names)
    assert subnets and all(docker.outside_range(s) == [] for s in subnets.values())
    # A host's routes: its own subnet only, no default route (an internal network).
    holder_pid = pair.quota._pids[pair.quota.container]
    routes = Path(f"/proc/{holder_pid}/net/route").read_text().splitlines()[1:]
    assert routes and all(line.split()[1] != "00000000" for line in routes)
    # No IPv6 address (link-local included) in a host, on its bridge or its veth ends.
    assert Path(f"/proc/{holder_pid}/net/if_inet6").read_text() == ""
    out = subprocess.run(
        ["ip", "-j", "link", "show", "master", pair.network.bridge],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    ours = {pair.network.bridge, *(link["ifname"] for link in json.loads(out))}
    assert len(ours) == 3  # the bridge and the two holders' veth ends
    with_ipv6 = {line.split()[-1] for line in Path("/proc/net/if_inet6").read_text().splitlines()}
    assert ours.isdisjoint(with_ipv6)
    assert docker.outside_range(["172.17.0.0/16", "10.0.0.0/8", "198.19.64.0/24"]) == [
        "172.17.0.0/16",
        "10.0.0.0/8",
    ]


SPEC = """
[experiment]
name = "docker-kill"
system = "matrix"

[hosts.srv]
kind = "docker"
cpu_cores = 1.0

[hosts.cli]
kind = "docker"

[placement]
server = "srv"
load = "cli"

[server]
threads = 1

[driver]
n = 20
p = 100

[load]
rate_per_s = 100
requests = 3000
duration_s = 30
warmup_s = 0
warmup_requests = 0
"""


def _start_run(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """`knee run` of SPEC; returns it and its run id once its load container runs."""
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    runner = subprocess.Popen(
        knee_cmd("run", str(spec), "--out", str(tmp_path / "runs"), "--no-progress"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = docker.run(
            ["ps", "--filter", "label=knee.node=load", "--format", '{{.Label "knee.run"}}'],
            "listing",
        ).split()
        runs = [r for r in found if list((tmp_path / "runs").glob("*/nodes/load.stderr.log"))]
        if runs:
            return runner, runs[0]
        if runner.poll() is not None:
            break
        time.sleep(0.1)
    runner.kill()
    out, err = runner.communicate(timeout=WAIT_S)
    pytest.fail(f"the run's load container did not start: {err.decode()[-2000:]}")


def _wait_gone(run_id: str, kind: str) -> list[str]:
    deadline = time.monotonic() + WAIT_S
    while (left := docker.labelled(kind, run_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_container_killed_mid_run_fails_the_point_and_the_run_cleans_up(
    tmp_path: Path,
) -> None:
    _need_daemon()
    env = {**os.environ, "KNEE_RECORDS_DIR": str(tmp_path / "records")}
    runner, run_id = _start_run(tmp_path, env)
    (server,) = docker.run(
        ["ps", "--filter", f"label=knee.run={run_id}", "--filter", "label=knee.node=server",
         "--format", "{{.Names}}"],
        "listing",
    ).split()  # fmt: skip
    # Once the generator has reported progress: it has samples on its host's folder.
    events = next((tmp_path / "runs").glob("*/nodes")) / "load.p000.events.jsonl"
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and runner.poll() is None:
        if events.exists() and '"event":"progress"' in events.read_text():
            break
        time.sleep(0.1)
    docker.run(["kill", server], "killing the server's container")
    _, err = runner.communicate(timeout=WAIT_S * 2)
    assert runner.returncode != 0
    assert "node server exited with code 137 during the point" in err.decode()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "points" / "p000.json").read_text())["status"] == "failed"
    # The failed point's files came out of the load's container before it went (the run's
    # end fetches a failed point's files, before its hosts' teardown): the generator's
    # samples up to its last progress line at least.
    last = [json.loads(x) for x in events.read_text().splitlines() if '"progress"' in x][-1]
    samples = results.read_sample_records(run_dir / "raw" / "p000-load.samples.bin")
    assert len(samples) >= last["completed"] > 0
    assert docker.labelled("container", run_id) == []
    assert docker.labelled("network", run_id) == []
    assert not list((tmp_path / "records").glob("*.json"))


def test_a_killed_runners_containers_stop_and_knee_cleanup_removes_the_rest(
    tmp_path: Path,
) -> None:
    _need_daemon()
    records = tmp_path / "records"
    env = {**os.environ, "KNEE_RECORDS_DIR": str(records)}
    runner, run_id = _start_run(tmp_path, env)
    runner.kill()
    runner.communicate(timeout=WAIT_S)
    # Each container's stdin was the runner's: it ended, and so did the container (--rm).
    assert _wait_gone(run_id, "container") == []
    assert docker.labelled("network", run_id) == [f"knee-{run_id}-docker"]
    (record,) = list(records.glob("*.json"))
    assert json.loads(record.read_text())["docker"] == [f"knee-{run_id}-docker"]
    proc = subprocess.run(knee_cmd("cleanup"), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"removed docker network knee-{run_id}-docker" in proc.stdout
    assert docker.labelled("network", run_id) == []
    assert not list(records.glob("*.json"))


def test_the_image_is_named_by_knee_nodes_hash_and_reused(pair: Pair, knee_node: str) -> None:
    sha = docker.binary_sha256(knee_node)
    assert pair.quota.image == f"knee-node:{sha[:16]}"
    fmt = '{{index .Config.Labels "knee.node_sha256"}} {{json .Config.Entrypoint}}'
    label, entrypoint = docker.run(
        ["image", "inspect", "--format", fmt, pair.quota.image], ""
    ).split()
    assert (label, json.loads(entrypoint)) == (sha, ["/knee-node"])
    assert docker.knee_images() == [pair.quota.image]  # one per build
    assert docker.ensure_image(knee_node, "again") == pair.quota.image  # found, not made


def test_no_daemon_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_daemon()  # the client
    monkeypatch.setenv("KNEE_DOCKER_HOST", "unix:///nonexistent/knee-docker.sock")
    with pytest.raises(Unsupported) as e:
        docker.check_daemon()
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("docker hosts: no daemon at unix:///nonexistent/knee-docker.sock")
    assert message.endswith("; run scripts/docker")


def test_a_docker_host_has_no_link_rate(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        SPEC.replace(
            'kind = "docker"\n\n[placement]', 'kind = "docker"\nrate_mbit = 100\n\n[placement]'
        )
    )
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert "\n" not in str(e.value)
    assert e.value.key == "hosts.cli.rate_mbit"  # unknown for a docker host


def test_matrix_docker_smoke_names_each_containers_resources(tmp_path: Path) -> None:
    """experiments/matrix-docker.toml's smoke run (scripts/e2e's, where kept): the hosts as
    made, each node's limits, the containers' CPU against --cpus and their links' bytes."""
    _need_daemon()
    run_dir, _ = smoke_run("matrix-docker", tmp_path)
    hosts = {h["name"]: h for h in json.loads((run_dir / "env.json").read_text())["hosts"]["hosts"]}
    for name in ("srv", "cli"):
        assert hosts[name]["kind"] == "docker" and _in_range(hosts[name]["address"])
        assert ipaddress.ip_network(hosts[name]["subnet"]).subnet_of(KNEE_RANGE)
        assert hosts[name]["limits"] == {"cpu_cores": 1.0}
    point = json.loads((run_dir / "points" / "p000.json").read_text())
    where = {n["name"]: (n["host"], n["limits"]) for n in point["topology"]}
    assert where == {"server": ("srv", {"cpu_cores": 1.0}), "load": ("cli", {"cpu_cores": 1.0})}
    summary = json.loads((run_dir / "summary.json").read_text())
    docker_points = [p for p in summary["points"] if p["series"] == "docker"]
    for p in docker_points:
        server = p["resources"]["server"]
        assert (server["kind"], server["capacity"]) == ("cpu", 1.0)  # its --cpus
        assert {"link:srv", "link:cli"} <= set(p["resources"])  # the holders' interfaces
    rows = pd.read_parquet(run_dir / "timeseries.parquet")
    links = rows[rows["node"] == "link:srv"]
    assert (links["bytes_rx"] > 0).all() and (links["bytes_tx"] > 0).all()
