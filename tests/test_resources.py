"""Resources per point (knee.resources, issue 30) on real runs: each kind is measured and
ranked, and U, D and the bound are checked against values computed here from the run's own
raw data (samples.parquet, timeseries.parquet), not from knee's statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import unavailable
from http_servers import WorkerServer
from real_http_servers import real_server
from test_hosts_limits import cgroups_usable
from test_runner import only_run_dir, run_knee, write_spec

from knee.analysis.answers import from_points
from knee.resources.bottleneck import explain, ranked

MATRIX_SPEC = """
[experiment]
name = "resources"
system = "matrix"

[server]
threads = 1

[driver]
n = 50
p = 400

[load]
schedule = "poisson"
duration_s = 3
warmup_s = 0.5
timeout_ms = 5000

[series.rate]
sweep = {{ "load.rate_per_s" = [{rates}] }}
"""

CHAT_SPEC = """
[experiment]
name = "resources-chat"
system = "chat"

[server]
replicas = 1

[driver]
mix = "session"

[load]
schedule = "closed"
clients = 4
think_ms = 1
duration_s = 3
warmup_s = 0.5
"""


def _run(tmp_path: Path, text: str) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path / "runs"
    res = run_knee("run", str(write_spec(tmp_path, text)), "--out", str(out), "--no-report")
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = only_run_dir(out)
    return run_dir, json.loads((run_dir / "summary.json").read_text())["points"]


def _window_rows(run_dir: Path, point: dict[str, Any], node: str) -> pd.DataFrame:
    """The node's per-second rows inside the point's measurement window, chosen here from
    the samples' own post-warm-up send times."""
    samples = pd.read_parquet(run_dir / "samples.parquet")
    mine = samples[(samples["point"] == point["point"]) & ~samples["warmup"]]
    start_s = mine["intended_ns"].min() / 1e9
    ts = pd.read_parquet(run_dir / "timeseries.parquet")
    rows = ts[(ts["point"] == point["point"]) & (ts["node"] == node)]
    # The runner's warm-up end is the node's start plus warmup_s: within a few ms of the
    # first post-warm-up send, and the rows are a second apart.
    return rows[(rows["t_s"] >= start_s - 0.05) & (rows["t_s"] <= start_s + point["window_s"] + 1)]


def test_cpu_and_pool_of_a_one_thread_server_against_its_raw_data(tmp_path: Path) -> None:
    run_dir, points = _run(tmp_path, MATRIX_SPEC.format(rates="40, 1000"))
    low = points[0]
    res = low["resources"]
    cpu, pool = res["server"], res["pool:server"]
    assert cpu["kind"] == "cpu" and cpu["label"] == "the server's CPU"
    assert cpu["capacity"] == 1.0  # one worker thread runs on at most one core
    assert pool["kind"] == "pool" and pool["capacity"] == 1.0
    assert res["load"]["generator"] is True and "connections" not in res  # not http
    # CPU: the mean of the per-second CPU % in the window, against one core.
    rows = _window_rows(run_dir, low, "server")
    assert cpu["u"] == pytest.approx(rows["cpu_percent"].mean() / 100, rel=0.02, abs=0.005)
    x = low["completion_rate_per_s"]
    assert cpu["d_ns"] == pytest.approx(cpu["u"] / x * 1e9)
    assert cpu["bound_per_s"] == pytest.approx(x / cpu["u"])
    # The pool: X_ok x the mean service time of the ok requests after the warm-up.
    samples = pd.read_parquet(run_dir / "samples.parquet")
    ok = samples[(samples["point"] == 0) & ~samples["warmup"] & (samples["status"] == "ok")]
    busy = low["throughput_per_s"] * ok["service_ns"].mean() / 1e9
    assert pool["busy"] == pytest.approx(busy, rel=1e-9)
    assert pool["u"] == pytest.approx(busy)  # one worker
    assert 0 < pool["u"] < 0.5  # 40/s of a few ms each
    # Ranked by U, the server comes first; a pool computing folds into its CPU.
    top, _ = ranked(res)[0]
    assert top in ("server", "pool:server")
    # Over capacity (1000/s), the server is the bottleneck of the curve, its bound near the
    # throughput the run measured there.
    (group,) = from_points(points, None)
    ex = group["bottleneck"]
    assert ex == explain(points, group["capacity"], group["saturated_throughput"])
    assert ex["bottleneck"]["resource"] in ("server", "pool:server")
    assert ex["at_point"] == 0 and ex["measured_per_s"][1] is not None
    assert ex["sentence"].startswith("set by the server's")


def test_the_database_of_chat_is_a_part_with_its_own_time(tmp_path: Path) -> None:
    run_dir, points = _run(tmp_path, CHAT_SPEC)
    (p,) = points
    part = p["resources"]["part:database"]
    assert part["kind"] == "part" and part["capacity"] == 1.0  # SQLite: one at a time
    assert part["label"].startswith("the database (SQLite")
    samples = pd.read_parquet(run_dir / "samples.parquet")
    ok = samples[~samples["warmup"] & (samples["status"] == "ok")]
    with_waits = p["throughput_per_s"] * ok["detail_ns"].mean() / 1e9  # waits for the lock too
    assert part["busy_with_waits"] == pytest.approx(with_waits)
    assert part["u"] == pytest.approx(min(with_waits, 1.0)) and part["includes_waiting"]
    assert part["contended"] == (with_waits > 1.05)
    assert p["resources"]["replica-0"]["label"] == "replica 0's CPU"
    assert [n for n, _ in ranked(p["resources"])]  # every measured kind ranks


def test_connections_held_are_recomputed_from_the_samples(tmp_path: Path) -> None:
    """The generator's connections (http, one request at a time on each): U = the mean
    number held, from each request's connect to its reply, over the window."""
    srv = WorkerServer(service_s=0.005, workers=4)  # a generator's resource: any server
    try:
        out = tmp_path / "runs"
        res = run_knee(
            "http",
            f"{srv.url}/",
            "--rate",
            "100",
            "--duration",
            "3",
            "--connections",
            "2",
            "--out",
            str(out),
            "--no-report",
        )
    finally:
        srv.close()
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = only_run_dir(out)
    (p,) = json.loads((run_dir / "summary.json").read_text())["points"]
    conns = p["resources"]["connections"]
    assert conns["kind"] == "connections" and conns["capacity"] == 2
    s = pd.read_parquet(run_dir / "samples.parquet")
    s = s[s["sent_ns"] > 0]
    lo = s.loc[~s["warmup"], "intended_ns"].min()
    hi = lo + p["window_s"] * 1e9
    start = np.clip(s["sent_ns"] - s["queue_ns"], lo, hi)
    end = np.clip(s["received_ns"].where(s["received_ns"] > 0, hi), lo, hi)
    held = float((end - start).sum()) / (hi - lo)
    assert conns["u"] == pytest.approx(held / 2, rel=0.05, abs=0.01)
    assert 0.0 <= conns["all_busy_share"] <= conns["u"] + 0.01


def test_a_limit_no_sampled_resource_shows_is_said_to_be_unseen(
    tmp_path: Path, knee_node: str
) -> None:
    """gunicorn's one worker of 8 threads sleeping under one lock, without Server-Timing: at
    most 1 / sleep per second, with its CPU idle. The busiest resource the run sees would
    allow far more than was measured, so the report says the limit is something it cannot
    see rather than naming the wrong part."""
    with real_server("gunicorn-lock", tmp_path / "srv", knee_node) as server:
        res = run_knee(
            "http", server.url + "/", "--rates", "10,20,90", "--duration", "5",
            "--out", str(tmp_path / "runs"), "--no-report", timeout_s=200,
        )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "runs")
    points = json.loads((run_dir / "summary.json").read_text())["points"]
    assert all(p["target"]["found"] and p["target"]["name"] == "gunicorn" for p in points)
    assert all("pool:target" not in p["resources"] for p in points)  # no service time
    (group,) = from_points(points, None)
    assert group["capacity"]["interval_per_s"][1] == 90  # over 1 / 20 ms = 50/s
    ex = group["bottleneck"]
    assert ex["unseen"] and ex["agreement"] == "above", ex
    assert ex["bottleneck"]["bound_per_s"] > 1.1 * ex["measured_per_s"][1]
    assert ex["sentence"].startswith("set by something the run cannot see"), ex["sentence"]
    cpu = points[-1]["resources"]["target"]
    assert cpu["u"] < 0.5  # idle, as the lock's sleepers are


def test_a_host_with_a_cpu_limit_is_one_resource_for_its_nodes(tmp_path: Path) -> None:
    """Two nodes on one host of 0.5 core share its limit: the host's CPU is their sum each
    second against 0.5, beside each node's against the same 0.5."""
    if reason := cgroups_usable(0.5):
        unavailable(reason)
    text = MATRIX_SPEC.format(rates="60") + (
        '\n[hosts.box]\nkind = "local"\ncpu_cores = 0.5\n\n[placement]\nserver = "box"\n'
        'load = "box"\n'
    )
    run_dir, (p,) = _run(tmp_path, text)
    host = p["resources"]["host:box"]
    assert host["kind"] == "cpu" and host["capacity"] == 0.5
    assert host["label"] == "host box's CPU (the load generator, the server)"
    assert p["resources"]["server"]["capacity"] == 0.5  # the host's limit, its own
    rows = pd.concat([_window_rows(run_dir, p, n) for n in ("server", "load")])
    both = rows.pivot_table(index="t_s", columns="node", values="cpu_percent").dropna()
    summed = both.sum(axis=1) / 100  # the seconds with a row of each
    assert host["busy"] == pytest.approx(summed.mean(), rel=0.05, abs=0.005)
    # Over the same seconds the host is busier than its server alone (the generator runs on
    # it too). The server's own U is over all its seconds, so it is not compared here.
    assert host["busy"] > both["server"].mean() / 100


def test_agrees_above_below_and_unclear_at_the_tolerance_edges() -> None:
    """The bound 1/D against a measured capacity [100, 200]/s widened by 10% on each side,
    [90, 220]: its value inside agrees (the edges included); its whole interval outside is
    above or below; a value outside whose interval reaches in is unclear."""
    from knee.resources.bottleneck import TOLERANCE, agreement

    def verdict(b: float, ci: list[float] | None = None) -> str | None:
        return agreement({"bound_per_s": b, "bound_ci_per_s": ci}, 100.0, 200.0)[0]

    w_lo, w_hi = 100.0 * (1 - TOLERANCE), 200.0 * (1 + TOLERANCE)
    assert verdict(150.0, [10.0, 1000.0]) == "agrees"
    assert verdict(w_hi) == "agrees" and verdict(w_lo) == "agrees"  # the edges
    assert verdict(w_hi * 1.001) == "above" and verdict(w_lo * 0.999) == "below"
    assert verdict(260.0, [250.0, 270.0]) == "above"
    assert verdict(70.0, [60.0, 80.0]) == "below"
    # A ratio of 1.30 (bench/README.md's case 1) with a wide interval is not "agrees".
    assert verdict(1.3 * 200.0, [200.0, 300.0]) == "unclear"
    assert verdict(80.0, [70.0, 95.0]) == "unclear"
    # No upper end measured: a bound above the lower end cannot be judged above.
    assert agreement({"bound_per_s": 500.0}, 100.0, None)[0] is None
    assert agreement({"bound_per_s": 50.0}, 100.0, None)[0] == "below"
    _, ratio = agreement({"bound_per_s": 260.0}, 100.0, 400.0)
    assert ratio == pytest.approx(260.0 / 200.0)  # against the bracket's geometric middle


def test_a_node_without_cpu_samples_is_unknown_not_idle(tmp_path: Path) -> None:
    """The resource table of a real run's point, built again from its run directory with
    the server's timeseries rows removed (as for a node that exited before the first
    sample): the server is listed with "no CPU samples", U and the bound unknown, not 0;
    the report says so."""
    from knee.report.sections.what_sets import Column, busiest
    from knee.resources.usage import Inputs, NodeInfo, point_resources

    run_dir, points = _run(tmp_path, MATRIX_SPEC.format(rates="40"))
    point = points[0]
    ts = pd.read_parquet(run_dir / "timeseries.parquet")
    rows = ts[ts["node"] != "server"].to_dict("records")
    samples = pd.read_parquet(run_dir / "samples.parquet")
    mine = samples[(samples["point"] == 0) & ~samples["warmup"]]
    nodes = {
        "server": NodeInfo("serve", "the server", None, pool=1),
        "load": NodeInfo("load", "the load generator", None, generator=True),
    }
    inp = Inputs(0, float(mine["intended_ns"].min()) / 1e9, rows, point, nodes)
    table = point_resources(inp)
    server = table["server"]
    assert server["detail"] == "no CPU samples" and server["cpu_samples"] == 0
    assert server["u"] is None and server["bound_per_s"] is None and server["busy"] is None
    assert table["load"]["cpu_samples"] > 0 and table["load"]["u"] is not None
    assert table["pool:server"]["on_cpu"] is None  # its CPU share is unknown too
    assert "server" not in [name for name, _ in ranked(table)]
    line = busiest(Column({**point, "resources": table}, 40.0, "40/s"))
    assert line is not None and "no CPU samples: the server" in line
