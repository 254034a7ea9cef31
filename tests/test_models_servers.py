"""The number of servers where the system does not declare it (knee.models.servers): c =
saturated throughput x mean service time, declared vs estimated vs assumed, the verdict
that no model fits, and `model_knee`. Synthetic points shaped like summary.json's, and one
real run against gunicorn with 2 sync workers and an app that sleeps 20 ms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from real_http_servers import SLEEP_MS, SLEEP_WORKERS, real_server
from report_helpers import only_dir, run_knee
from test_models import synthetic_point

import knee
from knee.models import analyze, mmc
from knee.models.analyze import model_knee
from knee.stats import distribution

#: A spec without server.threads: the system declares no concurrency (as http).
SPEC: dict[str, Any] = {"load": {"schedule": "poisson"}, "server": {}, "series": {"s": {}}}
#: The synthetic pool: 2 servers of 10 ms (capacity 200/s).
SERVERS = 2
SERVICE_S = 0.010
DELAY_NS = 1e5
WINDOW_S = 10.0


def point(
    index: int,
    rate: float,
    rng: np.random.Generator,
    *,
    stable: bool = True,
    wait_ns: float | None = None,
    n: int = 2000,
) -> dict[str, Any]:
    """A summary.json point of an M/M/2 server: exponential service; each request waits
    the model's mean wait (stable) or, over capacity, a long queue, and the throughput is
    what 2 busy servers complete (OK replies counted in a window of WINDOW_S)."""
    service = rng.exponential(SERVICE_S * 1e9, n)
    if wait_ns is None:
        wait_s = mmc.wait_mean_s(rate, SERVICE_S, SERVERS) if stable else 2.0
        wait_ns = float(wait_s or 0.0) * 1e9
    throughput = rate if stable else SERVERS / SERVICE_S
    entry = synthetic_point(
        index,
        rate,
        service,
        delay_ns=DELAY_NS,
        wait_ns=wait_ns,
        stable=stable,
        throughput_per_s=throughput,
    )
    return {**entry, "ok_in_window": round(throughput * WINDOW_S)}


def pool_points(seed: int, over: bool = True) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    pts = [point(i, r, rng) for i, r in enumerate((40, 80, 120, 150))]
    if over:
        pts += [point(4, 260, rng, stable=False), point(5, 320, rng, stable=False)]
    return pts


def test_c_is_estimated_from_saturated_throughput() -> None:
    (entry,) = analyze(pool_points(1), SPEC, cores=1)
    (group,) = entry["groups"]
    est = group["servers_estimate"]
    assert group["servers"] == 2 and group["servers_source"] == "estimated"
    assert est["c"] == 2 and est["service_from"] == "server_ns"
    lo, hi = est["interval"]
    assert lo < est["value"] < hi and lo < 2 < hi
    assert est["throughput_per_s"] == pytest.approx(200)
    # The primary model is the pool's, at the estimated c; cores do not cap an estimate.
    (primary,) = [m for m in entry["models"] if m["primary"]]
    assert (primary["kind"], primary["servers"], primary["servers_source"]) == (
        "M/M/c",
        2,
        "estimated",
    )
    assert primary["capacity_per_s"] == pytest.approx(SERVERS / SERVICE_S, rel=0.10)
    assert "estimated" in primary["label"] and len(entry["models"]) == 1
    assert group["fits"] is True and "No model fits" not in entry["note"]
    assert "Servers: c = 2, estimated from the data" in entry["note"]
    # Without service times the lowest stable load's mean latency stands in (an upper
    # bound: it includes the wait and the network). No fit then, but c is still there.
    bare = pool_points(1)
    for p in bare:
        p["service_ns"] = distribution(np.array([]))
    assert analyze(bare, SPEC, cores=1) == []
    from knee.models.servers import estimate_servers

    est2 = estimate_servers(bare, None, lambda p: float(p["achieved_rate_per_s"]))
    assert est2.service_from == "low_load_latency" and est2.c == 2
    json.dumps(entry)


def test_declared_servers_are_kept() -> None:
    spec = {**SPEC, "server": {"threads": 2}}
    (entry,) = analyze(pool_points(2), spec, cores=4)
    (group,) = entry["groups"]
    assert group["servers_source"] == "declared" and group["servers"] == 2
    # The data's c is given beside the declared one, as a cross-check.
    assert group["servers_estimate"]["c"] == 2
    assert "declared (server.threads)" in entry["note"]


def test_without_an_unstable_point_one_server_is_assumed() -> None:
    (entry,) = analyze(pool_points(3, over=False), SPEC, cores=2)
    (group,) = entry["groups"]
    assert group["servers"] == 1 and group["servers_source"] == "assumed"
    est = group["servers_estimate"]
    assert est["c"] == 1 and est["value"] is None and est["interval"] is None
    assert "cannot be measured: 1 is assumed" in est["detail"]
    assert "Servers: 1, assumed" in entry["note"]


def test_a_curve_no_model_fits() -> None:
    """Latency that grows ten times faster than M/M/2's wait: every model is off."""
    rng = np.random.default_rng(4)
    pts = pool_points(4)
    for p in pts[:4]:
        wait = 10 * (mmc.wait_mean_s(p["target_rate_per_s"], SERVICE_S, SERVERS) or 0) * 1e9
        pts[p["point"]] = point(p["point"], p["target_rate_per_s"], rng, wait_ns=wait + 5e6)
    (entry,) = analyze(pts, SPEC, cores=2)
    (group,) = entry["groups"]
    assert group["servers"] == 2 and group["fits"] is False
    assert "No model fits these points" in entry["note"]
    assert model_knee(group, entry["models"])["fits"] is False
    # A capacity that disagrees: c = 2.5 from the data makes 2 or 3 servers miss it.
    half = pool_points(5)
    for p in half[4:]:
        p["throughput_per_s"], p["ok_in_window"] = 250.0, round(250 * WINDOW_S)
    (entry,) = analyze(half, SPEC, cores=2)
    assert entry["groups"][0]["fits"] is False and "completed 250/s" in entry["note"]


def test_model_knee_has_an_interval() -> None:
    (entry,) = analyze(pool_points(6), SPEC, cores=2)
    (group,) = entry["groups"]
    knee_ = model_knee(group, entry["models"])
    assert knee_ is not None and knee_["kind"] == "M/M/c" and knee_["servers"] == 2
    lo, hi = knee_["interval"]
    assert lo <= knee_["x"] <= hi and lo < hi
    cap_lo, cap_hi = knee_["capacity_interval_per_s"]
    assert cap_lo <= knee_["capacity_per_s"] <= cap_hi
    assert knee_["servers_source"] == "estimated" and knee_["fits"] is True
    assert model_knee({"group": {"other": 1}}, entry["models"]) is None


def test_gunicorn_with_two_workers(tmp_path: Path, knee_node: str) -> None:
    """2 sync workers, each request sleeping 20 ms (Server-Timing): capacity 100/s; c from
    the point over capacity is 2."""
    assert SLEEP_WORKERS == 2 and SLEEP_MS == 20.0
    out = tmp_path / "runs"
    with real_server("gunicorn-sleep", tmp_path / "srv", knee_node) as server:
        done = run_knee(
            "http", f"{server.url}/", "--rates", "30,60,130", "--duration", "6s",
            "--connections", "16", "--out", str(out), "--no-progress", "--no-report",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = only_dir(out)
    run = knee.open_run(run_dir)
    cores = json.loads((run_dir / "env.json").read_text()).get("cores")
    (entry,) = analyze(run.points, run.spec, cores)
    (group,) = entry["groups"]
    print("\n" + entry["note"])
    assert group["servers_source"] == "estimated" and group["servers_estimate"]["c"] == 2
    assert group["servers_estimate"]["service_from"] == "server_ns"
