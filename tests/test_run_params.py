"""What each point ran with, as the run directory records it (plan.json, points/pNNN.json,
read by knee.run_params), on real runs: the analysis reads those records, not the spec, and
a run that crashed or was interrupted still says what it planned and what ran."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from report_helpers import events_toml, stream_spec

import knee
from knee import run_params
from knee.analysis import chat
from knee.analysis import stream as stream_analysis


def _knee_run(tmp_path: Path, spec_text: str) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out)]
    res = subprocess.run(
        [*cmd, "--no-progress", "--no-report"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir


def _strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


# ------------------------------------------------------------------ chat: series overrides

CHAT_SERIES = """
[experiment]
name = "chat-series"
system = "chat"

[server]
replicas = 1

[load]
schedule = "closed"
clients = 1
think_ms = 0
duration_s = 0.8
requests = 100000
timeout_ms = 300
warmup_s = 0.1

[series.small]
driver = { reply_bytes = 4 }
sweep = { "load.clients" = [1, 2] }

[series.large]
driver = { reply_bytes = 2048 }
load = { think_ms = 0.5 }
sweep = { "load.clients" = [1, 2] }
"""


def test_chat_configurations_follow_series_overrides(tmp_path: Path) -> None:
    """The series override reply_bytes and think_ms, which chat's analysis reads: each
    point's configuration is what it ran with, not the spec's top level."""
    run_dir = _knee_run(tmp_path, CHAT_SERIES)
    run = knee.open_run(run_dir)
    cfg = chat.configurations(run).set_index("point")
    assert list(cfg["reply_bytes"]) == [4, 4, 2048, 2048]
    assert list(cfg["think_ms"]) == [0.0, 0.0, 0.5, 0.5]
    assert list(cfg["clients"]) == [1, 2, 1, 2]
    # What the nodes really did, independently of knee's records: the large series' replies
    # carry 2 KiB, the small one's a few bytes.
    ok = run.samples[run.samples["status"] == "ok"]
    reply_bytes = ok.groupby("point")["bytes_in"].median()
    assert (reply_bytes[[0, 1]] < 100).all() and (reply_bytes[[2, 3]] >= 2048).all()
    # The load node was started with the overridden driver, every placeholder replaced.
    params = run_params.point_params(run)
    load = next(n for n in params[2].topology if n["name"] == "load")
    assert load["records"] and load["config"]["driver"]["reply_bytes"] == 2048
    assert load["config"]["think_ms"] == 0.5
    replica = next(n for n in params[2].topology if n["name"] == "replica-0")
    assert replica["role"] == "serve" and not replica["records"]
    assert not [s for s in _strings(params[2].topology) if "{addr:" in s or "{scratch}" in s]
    assert load["config"]["replicas"][0].startswith("127.0.0.1:")
    # The figure's table splits by the overridden reply size (think time 0 only).
    assert list(chat.latency_vs_clients(run).columns) == [4]


# ------------------------------------------------------------------ stream: services of a series

STREAM_SERIES = (
    stream_spec("stream-services", 2, "[[64, 32]]", 3, 20)
    + """
[series.own]
server = { services = [
  { name = "near", delay = "fixed", delay_ms = 1.0, loss = "none" },
  { delay = "fixed", delay_ms = 2.0, loss = "none" },
] }
driver = { mode = "parallel" }
"""
)


def test_stream_analysis_names_the_services_that_ran(tmp_path: Path) -> None:
    """A series gives its own services (the second unnamed: the stream system names it by
    its index). The analysis names them as they ran, from the run directory's records alone:
    without spec.toml too."""
    run_dir = _knee_run(tmp_path, STREAM_SERIES)
    params = run_params.point_params(run_dir)[0]
    # As the system's rule completed them: the unnamed one named, every key defaulted.
    assert [s["name"] for s in params.server["services"]] == ["near", "service-1"]
    assert params.server["services"][1]["spread"] == 0.0
    assert {n["name"] for n in params.topology} == {"service-0", "service-1", "client"}
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare)
    (bare / "spec.toml").unlink()
    for path in (run_dir, bare):
        run = knee.open_run(path)
        boxes = stream_analysis.block_latency_boxplot(run)
        assert sorted(boxes["service_name"]) == ["near", "service-1"], path
        drops = stream_analysis.drop_rate_table(run)
        assert sorted(drops["service_name"]) == ["near", "service-1"]
        assert stream_analysis.timeouts_ms(run) == [20.0]
        table = stream_analysis.frames_and_bits_table(run)
        assert list(table["column"]) == ["parallel - all services"]


# ------------------------------------------------------------------ a crashed run

CRASH_SPEC = """
[experiment]
name = "crash"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 300
duration_s = 60
warmup_s = 0.1
timeout_ms = 200

[series.rate]
sweep = { "load.rate_per_s" = [300, 400] }

[series.closed]
load = { schedule = "closed", clients = 2, requests = 100 }
""" + events_toml((0.3, "stop", "server"))


def _until(pred: Callable[[], bool], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _disturb(tmp_path: Path, how: signal.Signals) -> Path:
    """Starts a long `knee run` and sends it `how` once its first point's event has been
    applied; ends any node it leaves behind (by PID). Returns the run directory."""
    spec = tmp_path / "crash.toml"
    spec.write_text(CRASH_SPEC)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[psutil.Process] = []
    try:

        def first_point_stopped_its_server() -> bool:
            dirs = [d for d in out.iterdir() if d.is_dir()] if out.exists() else []
            record = dirs[0] / "points" / "p000.json" if dirs else None
            return record is not None and record.exists() and '"stop"' in record.read_text()

        _until(first_point_stopped_its_server, 30)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(how)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for child in children:  # a runner killed by SIGKILL cannot stop its nodes
            if child.is_running():
                child.kill()
                child.wait(timeout=10)
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir


@pytest.mark.parametrize(
    ("how", "status"), [(signal.SIGKILL, "running"), (signal.SIGINT, "interrupted")]
)
def test_a_crashed_or_interrupted_run_still_says_what_it_planned_and_ran(
    tmp_path: Path, how: signal.Signals, status: str
) -> None:
    run_dir = _disturb(tmp_path, how)
    plan = json.loads((run_dir / run_params.PLAN).read_text())
    assert [p["label"] for p in plan["points"]] == [
        "rate rate_per_s=300",
        "rate rate_per_s=400",
        "closed",
    ]
    assert plan["events"] == [{"at_s": 0.3, "action": "stop", "node": "server"}]
    params = run_params.point_params(run_dir)
    assert [p.status for p in params.values()] == [status, "planned", "planned"]
    first = params[0]
    assert first.load["rate_per_s"] == 300.0 and first.swept == {"load.rate_per_s": 300.0}
    assert first.load["timeout_ms"] == 200.0 and first.server == {"threads": 0}
    assert [n["name"] for n in first.topology] == ["server", "load"]
    assert first.topology[1]["config"]["target"].startswith("127.0.0.1:")
    (event,) = first.events
    assert (event["action"], event["node"], event["outcome"]) == ("stop", "server", "applied")
    assert event["t_s"] >= first.started_s
    assert (first.ended_s is None) == (status == "running")
    assert params[2].load["schedule"] == "closed" and params[2].topology == []
    assert run_params.setting(params[1], "load.rate_per_s") == 400.0
    # A run directory without these records (older knee): the same points from spec.toml.
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    (old / run_params.PLAN).unlink()
    shutil.rmtree(old / run_params.POINTS)
    again = run_params.point_params(old)
    assert [p.label for p in again.values()] == [p["label"] for p in plan["points"]]
    assert not any(p.recorded for p in again.values())
    for i, p in again.items():
        for section in ("server", "load", "driver"):
            recorded = {k: v for k, v in getattr(params[i], section).items() if v is not None}
            assert getattr(p, section) == recorded, (i, section)
    assert run_params.setting(again[1], "load.rate_per_s") == 400.0
