"""`knee run` end to end: real knee-node processes, a real run directory."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from report_helpers import events_toml

import knee
from knee import results

ECHO_SPEC = """
[experiment]
name = "echo-test"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 400
duration_s = {duration_s}
warmup_s = 0.5

[series.rate]
sweep = {{ "load.rate_per_s" = {rates} }}

[series.closed]
load = {{ schedule = "closed", clients = 3, think_ms = 1, requests = 300 }}
"""


def write_spec(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def knee_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "knee.cli", *args]


def run_knee(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(knee_cmd(*args), capture_output=True, text=True, timeout=timeout_s)


def only_run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_run_writes_a_readable_run_directory(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ECHO_SPEC.format(duration_s=2.0, rates="[200, 800]"))
    out = tmp_path / "runs"
    res = run_knee("run", str(spec), "--out", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr
    run_dir = only_run_dir(out)
    assert f"run directory: {run_dir}" in res.stdout
    for name in (
        "spec.toml",
        "env.json",
        "samples.parquet",
        "timeseries.parquet",
        "events.parquet",
        "summary.json",
    ):
        assert (run_dir / name).is_file(), name

    run = knee.open_run(run_dir)
    assert run.summary["status"] == "complete"
    assert [p["label"] for p in run.points] == [
        "rate rate_per_s=200",
        "rate rate_per_s=800",
        "closed",
    ]
    s = run.samples
    assert set(s["point"]) == {0, 1, 2}
    assert (s["status"] == "ok").all()
    # Open-loop points: about rate x duration requests, latency from the intended time.
    for point, rate in ((0, 200), (1, 800)):
        n = int((s["point"] == point).sum())
        assert 0.7 * rate * 2.0 < n < 1.3 * rate * 2.0, (point, n)
    ok = s[s["status"] == "ok"]
    # Latency runs from the intended send (coordinated omission corrected), exactly.
    assert (ok["latency_ns"] == ok["received_ns"] - ok["intended_ns"]).all()
    assert (ok["sent_ns"] >= ok["intended_ns"]).all()
    assert (ok["network_ns"] + ok["server_ns"] == ok["received_ns"] - ok["sent_ns"]).all()
    # The closed loop sent exactly its request count; the warm-up is marked, not dropped.
    assert int((s["point"] == 2).sum()) == 300
    assert s.loc[s["point"] < 2, "warmup"].any()
    summary = {p["point"]: p for p in run.points}
    assert summary[1]["target_rate_per_s"] == 800
    assert summary[1]["count"] == int(((s["point"] == 1) & ~s["warmup"]).sum())
    assert 0.8 * 800 < summary[1]["achieved_rate_per_s"] < 1.2 * 800
    assert summary[1]["latency_ns"]["p50"] <= summary[1]["latency_ns"]["p99"]
    # Per-node CPU and network time series, and node lifecycle events.
    ts = run.timeseries
    assert {"server", "load"} <= set(ts["node"])
    assert ts["cpu_percent"].notna().all()
    assert ts.loc[ts["node"] == "server", "bytes_rx"].max() > 0
    kinds = list(run.events["kind"])
    assert kinds.count("node_start") == 6 and kinds.count("node_stop") == 6
    # knee-node's HDR histogram holds exactly the point's post-warm-up successful requests.
    raw = results.read_manifest(run_dir)[1]
    hist = results.read_histogram(run_dir / raw.histogram)
    assert int(hist["count"].sum()) == summary[1]["statuses"]["ok"]
    assert hist["value_ns"].max() >= summary[1]["latency_ns"]["max"]
    env = json.loads((run_dir / "env.json").read_text())
    assert env["cores"] >= 1 and env["knee_node_version"] != "unknown"


@pytest.mark.parametrize(
    ("body", "key", "expected"),
    [
        ("[load]\nrat_per_s = 3\nduration_s = 1\n", "load.rat_per_s", "unknown key"),
        (
            '[load]\nrate_per_s = "fast"\nduration_s = 1\n',
            "load.rate_per_s",
            "expected a number > 0",
        ),
        ("[load]\nrate_per_s = 5\n", "load.duration_s", "give duration_s or requests"),
        (
            '[sweep]\n"server.colour" = [1, 2]\n',
            "sweep.server.colour",
            "sweep over unknown parameter 'server.colour'",
        ),
    ],
)
def test_spec_errors_are_one_line_with_exit_code_2(
    tmp_path: Path, body: str, key: str, expected: str
) -> None:
    text = '[experiment]\nname = "e"\nsystem = "echo"\n' + body
    if "[load]" not in body:
        text += "[load]\nrate_per_s = 5\nduration_s = 1\n"
    spec = write_spec(tmp_path, text)
    res = run_knee("run", str(spec), "--out", str(tmp_path / "runs"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"{spec}: {key}: "), lines[0]
    assert expected in lines[0]
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_missing_field_and_unknown_system(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, '[experiment]\nsystem = "echo"\n')
    res = run_knee("run", str(spec))
    assert res.returncode == 2 and "experiment.name: missing" in res.stderr
    spec = write_spec(tmp_path, '[experiment]\nname = "x"\nsystem = "nope"\n')
    res = run_knee("run", str(spec))
    assert res.returncode == 2 and "experiment.system" in res.stderr


def _children_by_role(proc: psutil.Process, deadline_s: float) -> dict[str, psutil.Process]:
    """The runner's knee-node children, keyed by role (serve / load), once both exist."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = {}
        for child in proc.children():
            try:
                cmd = child.cmdline()
            except psutil.Error:
                continue
            if len(cmd) > 1 and cmd[1] in ("serve", "load"):
                found[cmd[1]] = child
        if len(found) == 2:
            return found
        time.sleep(0.05)
    raise AssertionError("the runner did not start a server and a load generator")


def _disturb_long_run(
    tmp_path: Path, after_s: float, disturb: Callable[[subprocess.Popen[str], dict], None]
) -> tuple[int, str, dict[str, psutil.Process], knee.Run]:
    """Starts a long `knee run`, disturbs it `after_s` into its first point, and returns its
    exit code, its stderr, the nodes it had started, and its run directory opened."""
    spec = write_spec(tmp_path, ECHO_SPEC.format(duration_s=60.0, rates="[300]"))
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        knee_cmd("run", str(spec), "--out", str(out), "--no-progress"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        nodes = _children_by_role(psutil.Process(proc.pid), 20)
        time.sleep(after_s)
        disturb(proc, nodes)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stderr, nodes, knee.open_run(only_run_dir(out))


def _gone(node: psutil.Process) -> bool:
    return not node.is_running() or node.status() == psutil.STATUS_ZOMBIE


def test_a_failing_node_stops_every_node_and_is_named(tmp_path: Path) -> None:
    # The server dies mid-point.
    code, stderr, nodes, run = _disturb_long_run(tmp_path, 1.0, lambda _, n: n["serve"].kill())
    assert code == 3, stderr
    assert "node server exited" in stderr
    assert "last stderr lines" in stderr
    assert _gone(nodes["load"])
    assert run.summary["status"] == "failed"
    assert "run_failed" in set(run.events["kind"])
    assert len(run.samples) > 0  # what was measured before the failure is kept


def test_ctrl_c_stops_every_node_and_keeps_the_run(tmp_path: Path) -> None:
    code, stderr, nodes, run = _disturb_long_run(
        tmp_path, 1.5, lambda proc, _: proc.send_signal(signal.SIGINT)
    )
    assert code == 130, stderr
    assert "interrupted" in stderr
    assert all(_gone(node) for node in nodes.values())
    assert run.summary["status"] == "interrupted"
    assert len(run.samples) > 100
    assert (run.samples["status"] == "ok").mean() > 0.9


EVENTS_SPEC = """
[experiment]
name = "events-test"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 200
duration_s = 4.0
warmup_s = 0.2
timeout_ms = 200
""" + events_toml((1.0, "kill", "server"), (2.0, "start", "server"))


def test_event_timeline_kills_and_restarts_a_node(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, EVENTS_SPEC)
    out = tmp_path / "runs"
    res = run_knee("run", str(spec), "--out", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr
    run = knee.open_run(only_run_dir(out))
    assert run.summary["status"] == "complete"
    ev = run.events
    kinds = list(ev["kind"])
    assert kinds.index("kill") < kinds.index("start"), kinds
    kill_t = float(ev.loc[ev["kind"] == "kill", "t_s"].iloc[0])
    start_t = float(ev.loc[ev["kind"] == "start", "t_s"].iloc[0])
    assert kill_t < start_t
    details = list(ev.loc[ev["kind"].isin(["kill", "start"]), "detail"])
    assert details[0].startswith("at 1 s") and details[1] == "at 2 s", details
    ready = ev[(ev["kind"] == "node_ready") & (ev["node"] == "server")]
    assert len(ready) == 2 and ready["detail"].nunique() == 1, ready  # same address again
    s = run.samples
    s = s[~s["warmup"]]
    kill_ns = kill_t * 1e9
    before = s[s["intended_ns"] < kill_ns - 0.1e9]
    after = s[s["intended_ns"] > kill_ns + 0.3e9]
    assert (before["status"] == "ok").mean() > 0.95
    # The open-loop generator does not reconnect: every request after the kill fails.
    assert len(after) > 100 and (after["status"] != "ok").all()


def test_event_naming_an_unknown_node_is_a_spec_error(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, EVENTS_SPEC.replace('node = "server"', 'node = "srv"', 1))
    res = run_knee("run", str(spec), "--out", str(tmp_path / "runs"))
    assert res.returncode == 2
    assert res.stderr.strip() == (
        f"{spec}: events[0].node: 'srv' is not a node of point 'main'; its nodes are: server, load"
    )
