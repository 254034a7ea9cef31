"""The http target against real servers (tests/real_http_servers.py): python3 -m http.server,
gunicorn, uvicorn, Node, Go net/http and nginx (keep-alive, no keep-alive, TLS), each with a
tiny app (tests/http_apps/). At a rate every one of them carries easily, with a constant
schedule, every scheduled request must be answered 200 and the node must end on time; and
`knee http` against python3 -m http.server must do the same (HTTP/1.0, a connection per
request, a listen backlog of 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import constant_offsets
from real_http_servers import NAMES, RealServer, real_server
from report_helpers import only_dir, run_knee

import knee
from knee.analysis import http as http_analysis

OK = 0
#: A rate every server here carries easily, over 8 connections, for 2 s.
RATE_PER_S = 100.0
DURATION_S = 2.0
CONNECTIONS = 8
#: After the last send, replies in flight get the node's 1 s stop grace; 1 s more of margin.
ELAPSED_BOUND_S = DURATION_S + 1.0 + 1.0


def test_the_constant_schedule_is_counted_exactly() -> None:
    assert len(constant_offsets(100, 2.0)) == 200  # 0, 10 ms, ..., 1.99 s
    assert constant_offsets(3, 1.0) == [0, 333_333_333, 666_666_666]
    assert len(constant_offsets(1000, 0.0015)) == 2  # 0, 1 ms (2 ms is past 1.5 ms)
    assert constant_offsets(1, 1.0) == [0]  # the one at 1 s is at the end: not sent


def _knee_http(tmp_path: Path, url: str, *args: str) -> knee.results.Run:
    """`knee http URL ARGS --no-report` into tmp_path/runs: exits 0, its run opened."""
    runs = tmp_path / "runs"
    out = run_knee(
        "http", url, *args, "--no-report", "--no-progress", "--out", str(runs), timeout_s=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return knee.open_run(only_dir(runs))


@pytest.fixture(params=NAMES)
def server(request: pytest.FixtureRequest, tmp_path: Path, knee_node: str) -> Iterator[RealServer]:
    with real_server(request.param, tmp_path / "server", knee_node) as running:
        yield running


def _driver(server: RealServer, **extra: Any) -> dict[str, Any]:
    driver: dict[str, Any] = {"requests": [{"method": "GET", "path": server.path}]}
    if server.tls:
        driver["tls_insecure"] = True  # the throwaway certificate is self-signed
    return driver | extra


def _counts(values: np.ndarray) -> dict[int, int]:
    keys, counts = np.unique(values, return_counts=True)
    return {int(k): int(n) for k, n in zip(keys, counts, strict=True)}


def test_every_scheduled_request_is_answered(run_load: Any, server: RealServer) -> None:
    run = run_load(
        "http",
        server.url,
        {"kind": "constant", "rate_per_s": RATE_PER_S},
        duration_s=DURATION_S,
        connections=CONNECTIONS,
        driver=_driver(server),
    )
    r = run.records
    want = len(constant_offsets(RATE_PER_S, DURATION_S))
    counts = {k: _counts(r[k]) for k in ("status", "flags", "arg")}
    seen = f"status/HTTP code/reason counts {counts}; done {run.done}"
    assert len(r) == want, seen
    assert run.done["completed"] == want, seen
    assert set(r["status"]) == {OK} and set(r["flags"]) == {200}, seen
    assert run.wall_s <= ELAPSED_BOUND_S, seen  # from its spawn to its exit


def test_an_untrusted_certificate_fails_the_node_until_its_ca_is_trusted(
    run_load: Any, tmp_path: Path, knee_node: str
) -> None:
    """nginx's certificate is signed by a throwaway CA: refused before the start, with what
    to do about it, unless driver.tls_ca_file trusts that CA (a real chain, verified)."""
    with real_server("nginx-tls", tmp_path / "server", knee_node) as server:
        assert server.tls and server.ca_file
        requests = {"requests": [{"method": "GET", "path": server.path}]}

        def run(driver: dict[str, Any]) -> Any:
            return run_load(
                "http",
                server.url,
                {"kind": "constant", "rate_per_s": RATE_PER_S},
                check=False,
                duration_s=1.0,
                connections=2,
                driver=requests | driver,
            )

        refused = run({})
        trusted = run({"tls_ca_file": server.ca_file})
    assert refused.returncode != 0 and not refused.records.size, refused.done
    assert "UnknownIssuer" in refused.stderr and "--cacert" in refused.stderr, refused.stderr
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert set(trusted.records["status"]) == {OK}, trusted.done


def test_knee_http_over_tls_counts_each_handshake_in_its_connect_time(
    tmp_path: Path, knee_node: str
) -> None:
    """`knee http https://... --cacert CA` against nginx over TLS that closes after every
    response: every request but those on the connections made before the start opens a
    connection, and its connect time (TCP and the TLS handshake) is recorded apart, inside
    its latency."""
    with real_server("nginx-tls-close", tmp_path / "server", knee_node) as server:
        assert server.ca_file
        run = _knee_http(
            tmp_path, f"{server.url}{server.path}", "--cacert", server.ca_file,
            "--rate", "50", "--duration", "2s", "--connections", "4",
        )  # fmt: skip
    s = run.samples
    assert set(s["status"].astype(str)) == {"ok"}, s["status"].value_counts()
    opened = s[s["queue_ns"] > 0]
    assert len(opened) >= len(s) - 4, (len(opened), len(s))
    assert (opened["queue_ns"] < opened["latency_ns"]).all()
    (point,) = run.summary["points"]
    assert "connect_ns" in point and "queue_ns" not in point
    (http,) = http_analysis.points(run)  # after the warm-up, as the report shows it
    measured = s[~s["warmup"]]
    assert http.sent == len(measured)
    assert http.connected == int((measured["queue_ns"] > 0).sum()) >= len(measured) - 4


def test_knee_http_against_python_http_server(tmp_path: Path, knee_node: str) -> None:
    """The regression: HTTP/1.0, a connection per request and a backlog of 5 used to make
    most requests take 1,024 ms (a SYN retried) and the node never end."""
    with real_server("python-http.server", tmp_path / "server", knee_node) as server:
        run = _knee_http(
            tmp_path, f"{server.url}{server.path}", "--rate", "200", "--duration", "3s"
        )
    samples = run.samples
    # Poisson at 200/s for 3 s: about 600 (a shortfall below 400 is beyond chance).
    assert len(samples) > 400, len(samples)
    statuses = samples["status"].astype(str).value_counts().to_dict()
    codes = samples["http_status"].value_counts().to_dict()
    assert set(statuses) == {"ok"} and set(codes) == {200}, (statuses, codes)
