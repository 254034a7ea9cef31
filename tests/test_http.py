"""The http target on real processes: knee-node's load generator against a real nginx
(`knee-node serve http`, as a point runs it), against small servers of our own
that send chunked bodies, Server-Timing and every malformed response (tests/http_servers.py),
and a whole run that finds a one-worker server's capacity; the CLI's report in Chromium."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from http_servers import ROUTES, ScriptedServer, WorkerServer
from report_helpers import check_in_browser, check_pngs, only_dir, run_knee
from rich.console import Console
from saturation import saturation

import knee
from knee.contract import HTTP_ARGS
from knee.models import analyze
from knee.results import samples_frame
from knee.runner import run_experiment
from knee.runner.display import Display
from knee.spec import load_spec
from knee.stats.point import point_stats
from knee.toml_writer import dump_toml

REPO = Path(__file__).resolve().parents[1]
REASON = {name: code for code, name in HTTP_ARGS.items()}
OK, TIMEOUT, ERROR = 0, 1, 3


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory, knee_node: str) -> Iterator[str]:
    """A throwaway nginx, as a point runs one: `knee-node serve http` writes its config and
    supervises it (scripts/nginx install puts nginx-light on the machine)."""
    folder = tmp_path_factory.mktemp("nginx")
    config = {"listen": "127.0.0.1:0", "server": {"nginx": {"dir": str(folder / "nginx")}}}
    out, err = folder / "node.out", folder / "node.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:  # files: nothing to drain
        proc = subprocess.Popen(
            [knee_node, "serve", "http", "--name", "nginx", "--config", json.dumps(config)],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while not (ready := [e for e in _lines(out) if e.get("event") == "ready"]):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "nginx never became ready"
            time.sleep(0.05)
        yield f"http://{ready[0]['addr']}"
    finally:
        proc.terminate()  # by its PID; knee-node stops its nginx
        proc.wait(timeout=30)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    yield server
    server.close()


def _requests(*paths: str, method: str = "GET") -> list[dict[str, Any]]:
    return [{"method": method, "path": p} for p in paths]


def _closed(run_load: Any, url: str, requests: list[dict[str, Any]], n: int, **driver: Any):
    """n requests from one closed-loop client."""
    return run_load(
        "http",
        url,
        {"kind": "closed", "clients": 1},
        requests=n,
        timeout_ms=1000,
        driver={"requests": requests, **driver},
    )


def test_statuses_and_the_split_against_nginx(run_load: Any, nginx: str) -> None:
    requests = _requests("/", "/missing", "/status/201", "/status/204", "/status/500")
    requests.append({"method": "HEAD", "path": "/"})
    run = run_load(
        "http",
        nginx,
        {"kind": "poisson", "rate_per_s": 400},
        connections=2,
        requests=600,
        driver={"requests": requests},
    )
    r = run.records
    assert len(r) == 600 and run.done["completed"] == 600
    want = {0: (200, OK), 1: (404, ERROR), 2: (201, OK), 3: (204, OK), 4: (500, ERROR)}
    want[5] = (200, OK)
    for op, (code, status) in want.items():
        mine = r[r["op"] == op]
        assert len(mine) > 50, op  # weights are equal: about 100 each
        assert set(mine["flags"]) == {code} and set(mine["status"]) == {status}, op
        reason = {404: "status_4xx", 500: "status_5xx"}.get(code)
        assert set(mine["arg"]) == {REASON[reason] if reason else 0}, op  # every failure
    # nginx says app;dur=0 (whole ms): the split is present, and zero.
    assert set(r["service"]) == {1} and r["server_ns"].max() <= 5_000_000
    assert run.done["connections_opened"] == 2  # keep-alive: never opened again


def test_connection_close_is_opened_again_against_nginx(run_load: Any, nginx: str) -> None:
    run = _closed(run_load, nginx, _requests("/close"), 20)
    assert set(run.records["status"]) == {OK}
    assert run.done["connections_opened"] == 20


def test_chunked_body_and_server_timing(run_load: Any, scripted: ScriptedServer) -> None:
    run = _closed(run_load, scripted.url, _requests("/chunked"), 50, server_timing_detail="db")
    r = run.records
    assert set(r["status"]) == {OK} and set(r["flags"]) == {200} and set(r["service"]) == {1}
    assert set(r["server_ns"]) == {3_500_000} and set(r["detail_ns"]) == {1_250_000}
    # service_ns is held_ns (docs/http2.md): a closed loop never waits for a connection.
    assert set(r["service_ns"]) == {0} and set(r["queue_ns"]) == {0}
    assert set(r["bytes_in"]) == {len(ROUTES["/chunked"][0])}
    assert scripted.connections == 1 and run.done["connections_opened"] == 1


def test_keep_alive_and_a_missing_split(run_load: Any, scripted: ScriptedServer) -> None:
    run = _closed(run_load, scripted.url, _requests("/notiming", "/ok"), 200)
    r = run.records
    assert set(r["status"]) == {OK} and scripted.connections == 1
    split = r["service"] == 1
    # Absent is not zero: only /ok (op 1) carries app;dur=2.5.
    assert np.array_equal(split, r["op"] == 1)
    assert set(r["server_ns"][split]) == {2_500_000}
    assert set(r["server_ns"][~split]) == {2**64 - 1}  # no server time: unknown, not zero
    frame = samples_frame(r, point=0, series="s", node="load", run_start_ns=0, warmup_end_ns=0)
    assert (frame["server_ns"][~split] == -1).all() and (frame["network_ns"][~split] == -1).all()
    stats = point_stats(frame)
    assert stats["server_ns"]["n"] == int(split.sum()) == stats["network_ns"]["n"]
    assert stats["server_ns"]["mean"] == 2_500_000


def test_connection_close_from_our_server(run_load: Any, scripted: ScriptedServer) -> None:
    run = _closed(run_load, scripted.url, _requests("/close"), 10)
    assert set(run.records["status"]) == {OK} and scripted.connections == 10


@pytest.mark.parametrize(
    ("path", "reason", "status"),
    [
        ("/malformed", "malformed", ERROR),
        ("/short", "closed_mid_reply", ERROR),  # a lying Content-Length, then the close
        ("/extra", "extra_bytes", ERROR),  # a Content-Length shorter than the body
        ("/bigheader", "header_too_large", ERROR),
        ("/bigbody", "body_too_large", ERROR),
        ("/badchunk", "bad_chunk", ERROR),
        ("/empty", "closed_before_reply", ERROR),
        ("/upgrade", "upgrade", ERROR),
        ("/hang", "timeout", TIMEOUT),
    ],
)
def test_each_malformed_response_is_an_error_with_its_reason(
    run_load: Any, scripted: ScriptedServer, path: str, reason: str, status: int
) -> None:
    """Each bad response is one failed sample with its reason; the connection is opened
    again and the run goes on (here to its last request, then a good one). A hang costs
    its 1 s timeout: 14 requests there, 7 of them bad."""
    n = 14 if path == "/hang" else 40
    run = _closed(run_load, scripted.url, [*_requests(path), *_requests("/ok")], n)
    r = run.records
    assert len(r) == n and run.returncode == 0
    bad, good = r[r["op"] == 0], r[r["op"] == 1]
    assert len(bad) > 5 and len(good) > 5
    assert set(bad["status"]) == {status} and set(bad["arg"]) == {REASON[reason]}
    assert set(good["status"]) == {OK} and set(good["arg"]) == {0}
    assert run.done["connections_opened"] == len(bad) + 1
    assert scripted.connections == len(bad) + 1


#: The one-worker server's service time: capacity about 1 / 5 ms (its sleep overshoots).
SERVICE_S = 0.005
RATES_PER_S = [60, 120, 160, 260]
TOLERANCE = 0.10


def test_a_run_finds_a_one_worker_servers_capacity(tmp_path: Path) -> None:
    server = WorkerServer(SERVICE_S)
    try:
        spec = {
            "experiment": {"name": "http-capacity", "system": "http", "seed": 1},
            "server": {"target": server.url},
            "driver": {"requests": [{"method": "GET", "path": "/work"}]},
            "load": {
                "schedule": "poisson",
                "connections": 16,
                "warmup_s": 1.0,
                "duration_s": 6.0,
                "timeout_ms": 20_000,
            },
            "sweep": {"load.rate_per_s": RATES_PER_S},
        }
        path = tmp_path / "capacity.toml"
        path.write_text(dump_toml(spec))
        run_dir = run_experiment(
            load_spec(path), tmp_path / "runs", Display(Console(quiet=True), enabled=False)
        )
    finally:
        server.close()
    run = knee.open_run(run_dir)
    points = run.points
    cores = json.loads((run_dir / "env.json").read_text()).get("cores")
    (entry,) = analyze(points, run.spec, cores)
    primary = next(m for m in entry["models"] if m["primary"])
    over = max(points, key=lambda p: p["target_rate_per_s"])
    assert over["stability"]["verdict"] == "unstable"
    # The fit (from the stable points) against what the server delivered when overloaded, in
    # the same run: not a speed, the model's prediction of this server's own output.
    measured = saturation(run.samples, over["point"])
    assert measured.waiting > 0, "the overloaded point kept a queue to its window's end"
    fitted = primary["capacity_per_s"]
    print(f"\nfitted capacity {fitted:.1f}/s, delivered {measured.throughput_per_s:.1f}/s")
    assert abs(fitted / measured.throughput_per_s - 1) <= TOLERANCE, (primary, measured)


def test_knee_http_writes_a_run_and_a_report_that_draws(
    tmp_path: Path, scripted: ScriptedServer
) -> None:
    out = run_knee(
        "http",
        f"{scripted.url}/notiming",
        "--rates",
        "100,300",
        "--duration",
        "1.5s",
        "--warmup",
        "0.3s",
        "--connections",
        "2",
        "-H",
        "X-Test: 1",
        "--out",
        str(tmp_path / "runs"),
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = only_dir(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [p["target_rate_per_s"] for p in summary["points"]] == [100, 300]
    html = run_dir / "report.html"
    text = html.read_text()
    assert "HTTP: statuses, failures, connects and the Server-Timing split" in text
    assert "Split unavailable." in text
    dom = check_in_browser(html, tmp_path)
    assert "200: " in dom
    check_pngs(html)
    bad = run_knee("http", "ftp://example.invalid", "--rate", "10")
    assert bad.returncode == 2 and "expected http://HOST:PORT or https://" in bad.stderr
    insecure = run_knee("http", "http://127.0.0.1:9/", "--rate", "10", "--insecure")
    assert insecure.returncode == 2 and "are for https:// URLs" in insecure.stderr


def test_the_failure_reasons_agree_with_knee_node(knee_node: str) -> None:
    out = subprocess.run([knee_node, "describe"], capture_output=True, text=True, timeout=10)
    described = json.loads(out.stdout)["systems"]["http"]["args"]
    assert {code: name for name, code in described.items()} == HTTP_ARGS
