"""ssh hosts against a real OpenSSH server on 127.0.0.1 (`scripts/sshd`).

The "remote" machine is this one: a remote pid or path is checked in this /proc and file
system, which is exactly the remote's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import READY_TIMEOUT_S, REPO, Event, JsonLines, Processes, unavailable

from knee.hosts.base import HostError, Limits, Unsupported
from knee.hosts.ssh import ELF_MACHINES, SshHost, clock_offset, elf_machine
from knee.results import STATUS_NAMES, read_histogram, read_sample_records

#: Seconds within which a node must be gone once its lifeline ended (TERM, KILL after 3 s).
GONE_TIMEOUT_S = 10.0
#: Seconds `scripts/sshd start` may take (it may install OpenSSH first).
SSHD_START_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A throwaway sshd: {"address", "port", "user", "identity_file", "pid"}."""
    folder = tmp_path_factory.mktemp("sshd")
    try:
        res = subprocess.run(
            [str(REPO / "scripts" / "sshd"), "start", str(folder)],
            capture_output=True,
            text=True,
            timeout=SSHD_START_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        unavailable(f"scripts/sshd start: {e}")
    if res.returncode != 0:
        lines = res.stderr.strip().splitlines() or ["no message"]
        unavailable(f"no sshd (scripts/sshd start failed: {lines[-1]})")
    yield json.loads(res.stdout)
    subprocess.run([str(REPO / "scripts" / "sshd"), "stop", str(folder)], timeout=60)


def make_host(sshd: dict[str, Any], knee_node: str, **changes: Any) -> SshHost:
    options: dict[str, Any] = {
        "address": sshd["address"],
        "user": sshd["user"],
        "port": sshd["port"],
        "identity_file": sshd["identity_file"],
        "run_id": "test",
        "local_binary": knee_node,
    }
    options.update(changes)
    return SshHost("remote", Limits(), **options)


@pytest.fixture(scope="module")
def host(sshd: dict[str, Any], knee_node: str) -> Iterator[SshHost]:
    """One host set up for the module's tests (setup costs a connection and a copy)."""
    h = make_host(sshd, knee_node)
    h.setup()
    yield h
    h.teardown()


@dataclass
class RemoteNode:
    """A node started through an ssh host: the local ssh process and its stdout lines."""

    proc: subprocess.Popen[bytes]
    lines: JsonLines
    stderr_path: Path

    def ready(self) -> Event:
        try:
            return self.lines.wait_for(lambda e: e.get("event") == "ready", READY_TIMEOUT_S)
        except AssertionError as e:
            raise AssertionError(f"{e}\nlog:\n{self.stderr_path.read_text()}") from None

    def wait(self, timeout_s: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout_s)


StartNode = Callable[..., RemoteNode]


@pytest.fixture
def start_node(knee_node: str, tmp_path: Path) -> Iterator[StartNode]:
    """`start_node(host, role, system, config) -> RemoteNode`, as the runner starts one:
    stdin, stdout and stderr are pipes (stderr here a file). Every node is stopped at the
    end: lifeline closed, then its ssh process by PID."""
    started: list[subprocess.Popen[bytes]] = []

    def start(host: SshHost, role: str, system: str, config: dict[str, Any]) -> RemoteNode:
        name = f"{role}{len(started)}"
        argv = [host.binary(knee_node), role, system, "--name", name, "--config"]
        stderr_path = tmp_path / f"{name}.stderr.log"
        with open(stderr_path, "wb") as stderr:
            proc = subprocess.Popen(
                host.command([*argv, json.dumps(config)]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        started.append(proc)
        return RemoteNode(proc, JsonLines(proc.stdout), stderr_path)

    yield start
    for proc in started:
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        Processes.stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def serve_echo(start_node: StartNode, host: SshHost) -> tuple[RemoteNode, int]:
    """An echo server on the host, ready; the node and its remote pid."""
    node = start_node(host, "serve", "echo", {"listen": f"{host.address}:0", "server": {}})
    return node, int(node.ready()["pid"])


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def wait_gone(pid: int, timeout_s: float = GONE_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def state(pid: int) -> str:
    """The process's state letter (R, S, T for stopped, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]


def wait_state(pid: int, want: Callable[[str], bool], timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not want(s := state(pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return s


def master_pid(host: SshHost) -> int:
    res = subprocess.run(
        ["ssh", "-o", f"ControlPath={host.control_path}", "-O", "check", host.address],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    return int(res.stderr.split("pid=")[1].split(")")[0])


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_setup_copies_knee_node_checked_for_its_architecture(host: SshHost, knee_node: str) -> None:
    assert host.uname["arch"] in ELF_MACHINES[elf_machine(knee_node)]
    assert host.remote_dir is not None and host.remote_dir.startswith("/tmp/knee-test.")
    remote = Path(host.binary(knee_node))
    assert remote.parent == Path(host.remote_dir)
    assert remote.read_bytes() == Path(knee_node).read_bytes()
    assert os.access(remote, os.X_OK)
    assert (remote.parent / "lifeline.sh").is_file()
    described = host.describe()
    assert described["kind"] == "ssh" and described["address"] == host.address
    assert described["remote"] == host.uname and described["setup_s"] > 0


def test_a_load_through_ssh_writes_samples_that_fetch_brings_back(
    host: SshHost, start_node: StartNode, tmp_path: Path
) -> None:
    server, _ = serve_echo(start_node, host)
    local_samples, local_histogram = tmp_path / "gen.samples.bin", tmp_path / "gen.hist.csv"
    config = {
        "target": server.ready()["addr"],
        "schedule": {"kind": "constant", "rate_per_s": 2000},
        "requests": 200,
        "timeout_ms": 5000,
        "seed": 1,
        "samples_path": host.node_path(local_samples),
        "histogram_path": host.node_path(local_histogram),
    }
    assert config["samples_path"] == f"{host.remote_dir}/gen.samples.bin"
    load = start_node(host, "load", "echo", config)
    assert load.wait() == 0, load.stderr_path.read_text()
    done = load.lines.wait_for(lambda e: e.get("event") == "done", 5.0)
    assert done["completed"] == 200 and done["ok"] == 200

    host.fetch(config["samples_path"], local_samples)
    host.fetch(config["histogram_path"], local_histogram)
    records = read_sample_records(local_samples)
    assert len(records) == 200
    assert np.all(records["status"] == STATUS_NAMES.index("ok"))
    assert int(read_histogram(local_histogram)["count"].sum()) > 0
    # Fetched files are removed remotely; fetching one again names what is missing.
    assert not Path(config["samples_path"]).exists()
    with pytest.raises(HostError, match="gen.samples.bin") as missing:
        host.fetch(config["samples_path"], tmp_path / "again.bin")
    assert "\n" not in str(missing.value)
    assert not (tmp_path / "again.bin").exists()

    host.signal(server.proc, signal.SIGTERM)
    assert server.wait() == 0
    # The lifeline's own lines: the remote node's CPU time and memory.
    usage = server.lines.wait_for(lambda e: e.get("event") == "usage", 1.0)
    assert usage["cpu_s"] >= 0 and usage["rss_bytes"] > 0


def test_stop_continue_and_kill_through_the_lifeline(host: SshHost, start_node: StartNode) -> None:
    server, pid = serve_echo(start_node, host)
    host.signal(server.proc, signal.SIGSTOP)
    assert wait_state(pid, lambda s: s == "T") == "T"
    host.signal(server.proc, signal.SIGCONT)
    assert wait_state(pid, lambda s: s != "T") != "T"
    assert server.proc.poll() is None
    host.signal(server.proc, signal.SIGKILL)
    assert server.wait() == 128 + signal.SIGKILL  # the lifeline exits with the node's status
    assert not alive(pid)
    host.signal(server.proc, signal.SIGTERM)  # the lifeline is gone: nothing to do


def test_closing_the_lifeline_stops_the_node(host: SshHost, start_node: StartNode) -> None:
    server, pid = serve_echo(start_node, host)
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    assert server.wait() == 0  # SIGTERM: a server ends cleanly
    assert wait_gone(pid)


@pytest.mark.parametrize("lost", ["node's ssh process", "master connection"])
def test_a_lost_connection_stops_the_node(host: SshHost, start_node: StartNode, lost: str) -> None:
    server, pid = serve_echo(start_node, host)
    if lost == "master connection":
        os.kill(master_pid(host), signal.SIGKILL)
    else:
        server.proc.kill()
    assert wait_gone(pid), f"node {pid} still runs after its {lost} was killed"
    assert server.wait() != 0
    # The host connects again for what comes next.
    _, again = serve_echo(start_node, host)
    assert alive(again)


def test_teardown_stops_remote_nodes_and_removes_everything(
    sshd: dict[str, Any], knee_node: str, start_node: StartNode
) -> None:
    h = make_host(sshd, knee_node)
    h.setup()
    remote_dir, control_path = h.remote_dir, h.control_path
    assert remote_dir is not None and control_path is not None
    servers = [serve_echo(start_node, h) for _ in range(2)]
    master = master_pid(h)
    h.teardown()
    for server, pid in servers:
        assert not alive(pid)
        assert server.wait(GONE_TIMEOUT_S) == 0  # stopped by SIGTERM
    assert not Path(remote_dir).exists()
    assert not Path(control_path).parent.exists()
    assert wait_gone(master)
    h.teardown()  # again: nothing left, no error
    with pytest.raises(HostError, match="setup"):
        h.command(["true"])


def test_clock_offset_on_the_same_machine_is_zero_within_its_uncertainty(host: SshHost) -> None:
    assert host.clock_offset_ns is not None and host.clock_uncertainty_ns is not None
    assert host.clock_uncertainty_ns > 0
    assert abs(host.clock_offset_ns) <= host.clock_uncertainty_ns
    described = host.describe()
    assert described["clock_offset_ns"] == host.clock_offset_ns
    assert described["clock_uncertainty_ns"] == host.clock_uncertainty_ns


def test_clock_offset_of_round_trips() -> None:
    """A remote clock 1 ms ahead, one-way delays of 10 us out and 30 us back (offset off by
    half the asymmetry), with slower round trips the estimate leaves out."""
    sent = np.arange(50, dtype=np.int64) * 1_000_000
    delay_back = np.where(np.arange(50) % 5 == 0, 30_000, 500_000)
    remote = sent + 10_000 + 1_000_000
    received = sent + 10_000 + delay_back
    offset, uncertainty = clock_offset(sent, remote, received)
    assert offset == 1_000_000 - 10_000
    assert uncertainty == 20_000
    assert abs(offset - 1_000_000) <= uncertainty


def test_a_binary_for_another_architecture_is_refused(
    sshd: dict[str, Any], knee_node: str, tmp_path: Path
) -> None:
    local = ELF_MACHINES[elf_machine(knee_node)]
    other = next(m for m, names in ELF_MACHINES.items() if not set(names) & set(local))
    foreign = bytearray(Path(knee_node).read_bytes()[:4096])
    foreign[18:20] = other.to_bytes(2, "little" if foreign[5] == 1 else "big")
    path = tmp_path / "knee-node-foreign"
    path.write_bytes(bytes(foreign))
    h = make_host(sshd, str(path))
    with pytest.raises(HostError, match="architecture") as refused:
        h.setup()
    assert "\n" not in str(refused.value)
    assert h.remote_dir is None and h.control_path is None

    path.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(HostError, match="not an ELF"):
        make_host(sshd, str(path)).setup()


@pytest.mark.parametrize("why", ["nothing listens", "key not accepted"])
def test_an_unreachable_host_is_a_one_line_error(
    sshd: dict[str, Any], knee_node: str, tmp_path: Path, why: str
) -> None:
    if why == "nothing listens":
        h = make_host(sshd, knee_node, port=closed_port())
        expected = "refused"
    else:
        key = tmp_path / "not_authorized"
        shutil.copy(Path(sshd["identity_file"]).with_name("host_ed25519"), key)
        key.chmod(0o600)
        h = make_host(sshd, knee_node, identity_file=str(key))
        expected = "Permission denied"
    with pytest.raises(HostError, match=expected) as failed:
        h.setup()
    assert "\n" not in str(failed.value) and "remote" in str(failed.value)
    assert h.control_path is None


def test_limits_and_a_host_name_are_refused(sshd: dict[str, Any], knee_node: str) -> None:
    with pytest.raises(Unsupported, match="cgroups"):
        SshHost("remote", Limits(cpu_cores=1.0), "127.0.0.1")
    with pytest.raises(HostError, match="IP address"):
        make_host(sshd, knee_node, address="localhost")


SSH_RUN_SPEC = """
[experiment]
name = "ssh-run"
system = "echo"

[hosts.remote]
kind = "ssh"
address = "{address}"
port = {port}
user = "{user}"
identity_file = "{identity_file}"

[placement]
"*" = "remote"

[load]
schedule = "poisson"
rate_per_s = 200
duration_s = 3
warmup_s = 0.5
generators = 2
"""


def test_a_run_on_an_ssh_host(sshd: dict[str, Any], tmp_path: Path) -> None:
    """`knee run` with every node on an ssh host: knee-node copied over, the nodes started
    there, their samples fetched back and pooled, the remote CPU in the time series, the
    clock offset in env.json, and nothing left on the host afterwards."""
    from test_runner import only_run_dir, run_knee, write_spec

    spec = write_spec(tmp_path, SSH_RUN_SPEC.format(**sshd))
    out = tmp_path / "runs"
    proc = run_knee("run", str(spec), "--out", str(out), "--no-report")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out)
    point = json.loads((run_dir / "summary.json").read_text())["points"][0]
    assert [g["node"] for g in point["generators"]] == ["load-0", "load-1"]
    assert point["statuses"]["ok"] == point["count"] > 400
    hosts = json.loads((run_dir / "env.json").read_text())["hosts"]
    remote = next(h for h in hosts["hosts"] if h["name"] == "remote")
    assert remote["kind"] == "ssh"
    # The same machine: the offset is zero within its uncertainty.
    assert abs(remote["clock_offset_ns"]) <= remote["clock_uncertainty_ns"]
    import pandas as pd

    ts = pd.read_parquet(run_dir / "timeseries.parquet")
    server = ts[ts["node"] == "server"]
    assert server["cpu_percent"].notna().all() and "ssh_cpu_percent" in server
    samples = pd.read_parquet(run_dir / "samples.parquet")
    assert set(samples["node"].astype(str)) == {"load-0", "load-1"}
    run_id = hosts["run_id"]
    assert not list(Path("/tmp").glob(f"knee-{run_id}.*")), "the remote temp folder was left"
