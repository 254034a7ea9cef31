"""`knee run` with nodes on emulated hosts: the link's time shows in the network split, the
links' counters are in the run directory, a missing kernel feature refuses the spec before
anything starts, and what a killed runner leaves behind `knee cleanup` removes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import unavailable
from test_runner import knee_cmd, only_run_dir, run_knee, write_spec

from knee.hosts import Unsupported, netns
from knee.resources.bottleneck import ranked

RATE_MBIT = 50.0
#: On the wire a TCP segment of 1448 payload bytes is a 1514-byte Ethernet frame; the
#: link's rate counts frames (docs/hosts.md).
FRAME_OVERHEAD = 1514 / 1448

LAN_SPEC = f"""
[experiment]
name = "lan"
system = "matrix"

[hosts.srv]
kind = "netns"
rate_mbit = {RATE_MBIT}

[hosts.cli]
kind = "netns"
rate_mbit = {RATE_MBIT}

[placement]
server = "srv"
load = "cli"

[driver]
n = 100
p = 4

[load]
schedule = "closed"
clients = 1
requests = 40
warmup_requests = 5
warmup_s = 0
timeout_ms = 20000
"""


def _need(rate: bool = True) -> None:
    if os.geteuid() != 0:
        unavailable("emulated hosts need root")
    try:
        netns.check_features(need_rate=rate, need_loss=False, need_delay=False)
    except Unsupported as e:
        unavailable(str(e))


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_the_link_time_is_network_time(tmp_path: Path) -> None:
    """A 100 x 100 matrix (80 kB) each way over 50 Mbit/s links: the network part of each
    request is the time the wire takes for its bytes, and the compute part stays apart."""
    _need()
    before = _namespaces()
    out = tmp_path / "runs"
    proc = run_knee("run", str(write_spec(tmp_path, LAN_SPEC)), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out)
    html = (run_dir / "report.html").read_text()
    assert "<h3>Hosts</h3>" in html and "198.18.0.1" in html and "50 Mbit/s" in html
    assert "link:srv tx" in html  # the link's bytes drawn beside the nodes'
    samples = pd.read_parquet(run_dir / "samples.parquet")
    ok = samples[~samples["warmup"] & (samples["status"] == "ok")]
    assert len(ok) == 35
    wire_ms = (ok["bytes_out"] + ok["bytes_in"]).median() * 8 * FRAME_OVERHEAD / RATE_MBIT / 1e3
    network_ms = ok["network_ns"].median() / 1e6
    assert wire_ms > 20  # the link's share dominates, as it should at this size
    assert network_ms == pytest.approx(wire_ms, rel=0.15), (network_ms, wire_ms)
    assert ok["server_ns"].median() / 1e6 < network_ms / 4
    record = json.loads((run_dir / "points" / "p000.json").read_text())
    hosts = {n["name"]: n["host"] for n in record["topology"]}
    assert hosts == {"server": "srv", "load": "cli"}
    server_config = next(n["config"] for n in record["topology"] if n["name"] == "server")
    assert server_config["listen"].startswith("198.18.")
    env = json.loads((run_dir / "env.json").read_text())["hosts"]
    made = {h["name"]: h for h in env["hosts"]}
    assert made["srv"]["kind"] == "netns" and made["srv"]["rate_mbit"] == RATE_MBIT
    # Each host's own interface, counted every second: what crossed srv's link.
    ts = pd.read_parquet(run_dir / "timeseries.parquet")
    link = ts[ts["node"] == "link:srv"]
    assert (link["role"] == "link").all()
    total = (samples["bytes_out"] + samples["bytes_in"]).sum()
    assert link["bytes_tx"].max() + link["bytes_rx"].max() >= total * 0.9
    assert _namespaces() == before  # every namespace of the run is gone


def test_a_link_is_a_resource_measured_by_its_counters(tmp_path: Path) -> None:
    """A 200 x 200 matrix (320 kB) each way over 10 Mbit/s links, one client: each link is
    busy about half the time each way, and is the busiest resource of the point; its U is
    what the replies' bytes (as frames) over the window make of its rate."""
    _need()
    rate_mbit = 10.0
    text = LAN_SPEC.replace(f"rate_mbit = {RATE_MBIT}", f"rate_mbit = {rate_mbit}")
    text = text.replace("n = 100", "n = 200").replace("requests = 40", "requests = 1000")
    text = text.replace("warmup_s = 0", "warmup_s = 0.5\nduration_s = 6")
    out = tmp_path / "runs"
    proc = run_knee("run", str(write_spec(tmp_path, text)), "--out", str(out), "--no-report")
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out)
    (point,) = json.loads((run_dir / "summary.json").read_text())["points"]
    res = point["resources"]
    link = res["link:srv"]
    assert link["kind"] == "link" and link["capacity"] == rate_mbit * 1e6 / 8
    assert link["u_ci"] is not None and link["direction"] in ("in", "out")
    assert ranked(res)[0][0].startswith("link:"), ranked(res)
    samples = pd.read_parquet(run_dir / "samples.parquet")
    post = samples[~samples["warmup"] & (samples["status"] == "ok")]
    column = "bytes_in" if link["direction"] == "out" else "bytes_out"  # srv sends replies
    wire = post[column].sum() * FRAME_OVERHEAD / point["window_s"]
    assert link["u"] == pytest.approx(wire / link["capacity"], rel=0.2), (link, wire)


def test_a_missing_kernel_feature_refuses_the_spec_with_exit_2(tmp_path: Path) -> None:
    """A spec that needs what this machine lacks is refused in one line, exit 2, before
    anything starts. Where netem is missing (delay_ms), that is the piece; where the kernel
    has it, a missing piece is made for real instead: knee run with no `ip` or `tc` on its
    PATH (an empty directory), so the test never skips."""
    if os.geteuid() != 0:
        unavailable("emulated hosts need root")
    env = None
    try:
        netns.check_features(need_rate=False, need_loss=False, need_delay=True)
    except Unsupported as e:
        missing = str(e)
    else:  # this kernel has netem
        empty = tmp_path / "empty-path"
        empty.mkdir()
        env = {**os.environ, "PATH": str(empty)}
        missing = "ip not found: install iproute2 (scripts/host-tools)"
    text = LAN_SPEC.replace("[hosts.cli]", "delay_ms = 5\n\n[hosts.cli]")
    out = tmp_path / "runs"
    proc = subprocess.run(
        knee_cmd("run", str(write_spec(tmp_path, text)), "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"knee: {tmp_path / 'spec.toml'}: {missing}"]
    assert not out.exists()  # refused before anything started


def test_a_killed_runner_leaves_what_knee_cleanup_removes(tmp_path: Path) -> None:
    _need()
    records = tmp_path / "records"
    env = {**os.environ, "KNEE_RECORDS_DIR": str(records)}
    text = LAN_SPEC.replace("requests = 40", "requests = 100000\nduration_s = 60")
    before = _namespaces()
    runner = subprocess.Popen(
        knee_cmd("run", str(write_spec(tmp_path, text)), "--out", str(tmp_path / "runs")),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        run_dir = None
        while time.monotonic() < deadline:  # the load node has started: hosts are made
            dirs = list((tmp_path / "runs").glob("lan-*"))
            if dirs and (dirs[0] / "nodes" / "load.stderr.log").exists():
                run_dir = dirs[0]
                break
            time.sleep(0.1)
        assert run_dir is not None, "the run did not start within 30 s"
        made = _namespaces() - before
        assert len(made) == 3  # two hosts and the bridge's namespace
        runner.kill()
        runner.wait(timeout=10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(timeout=10)
    assert made <= _namespaces()  # left behind by the killed runner
    (record,) = list(records.glob("*.json"))
    assert set(json.loads(record.read_text())["namespaces"]) == made
    # The nodes die with their runner (knee-node asks for SIGTERM when its parent dies).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_pids_in(ns) for ns in made):
        time.sleep(0.1)
    assert not any(_pids_in(ns) for ns in made)
    proc = subprocess.run(knee_cmd("cleanup"), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _namespaces() == before
    assert not list(records.glob("*.json"))
    again = subprocess.run(knee_cmd("cleanup"), env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to clean up" in again.stdout


def _pids_in(namespace: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_sigint_tears_the_hosts_down(tmp_path: Path) -> None:
    _need()
    text = LAN_SPEC.replace("requests = 40", "requests = 100000\nduration_s = 60")
    before = _namespaces()
    runner = subprocess.Popen(
        knee_cmd("run", str(write_spec(tmp_path, text)), "--out", str(tmp_path / "runs")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_namespaces() - before) < 3:
        time.sleep(0.1)
    time.sleep(1.0)
    runner.send_signal(signal.SIGINT)
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 130 or "interrupted" in err, err
    assert _namespaces() == before
