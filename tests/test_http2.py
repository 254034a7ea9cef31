"""HTTP/2 in `knee-node load http` (docs/http2.md) against servers we did not write: nginx
(h2 by ALPN over TLS, h2c by prior knowledge in cleartext) and Go's net/http (the same two,
standard library only), and against hostile HTTP/2 servers on the `h2` library
(tests/hostile_h2_servers.py): a server that refuses or resets every third stream, one that
ends its connections with GOAWAY, one that never answers, one with one stream per
connection.

Every scheduled request is one sample with its status and reason, and the node ends at its
duration and the 1 s grace whatever the server does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import constant_offsets
from hostile_h2_servers import HostileH2Server
from real_http_servers import RealServer, real_server
from report_helpers import only_dir, run_knee, smoke_run

import knee
from knee.contract import HTTP_ARGS

OK, TIMEOUT, DROP, ERROR = 0, 1, 2, 3
REASON = {name: code for code, name in HTTP_ARGS.items()}
RATE_PER_S = 100.0
DURATION_S = 2.0
CONNECTIONS = 4
#: The duration, the node's 1 s grace, and 1 s of margin.
ELAPSED_BOUND_S = DURATION_S + 1.0 + 1.0
#: SETTINGS_MAX_CONCURRENT_STREAMS: nginx's default (http2_max_concurrent_streams 128) and
#: the go_h2 app's (Go's default, said explicitly there).
SERVER_STREAMS = {"nginx-h2-tls": 128, "nginx-h2c": 128, "go-h2-tls": 250, "go-h2c": 250}


def _reasons(records: np.ndarray) -> dict[str, int]:
    keys, counts = np.unique(records["arg"], return_counts=True)
    return {
        HTTP_ARGS.get(int(k), "none" if k == 0 else str(k)): int(n)
        for k, n in zip(keys, counts, strict=True)
    }


def _load(run_load: Any, url: str, driver: dict[str, Any], **options: Any) -> Any:
    options.setdefault("duration_s", DURATION_S)
    options.setdefault("connections", CONNECTIONS)
    schedule = options.pop("schedule", {"kind": "constant", "rate_per_s": RATE_PER_S})
    requests = driver.pop("requests", [{"method": "GET", "path": "/"}])
    if url.startswith("https://"):
        driver.setdefault("tls_insecure", True)  # throwaway certificates
    return run_load("http", url, schedule, driver={"requests": requests, **driver}, **options)


@pytest.fixture(params=list(SERVER_STREAMS))
def h2_server(
    request: pytest.FixtureRequest, tmp_path: Path, knee_node: str
) -> Iterator[RealServer]:
    with real_server(request.param, tmp_path / "server", knee_node) as running:
        yield running


def test_every_request_is_answered_over_h2_and_none_is_held(
    run_load: Any, h2_server: RealServer
) -> None:
    """nginx and Go, TLS (ALPN chooses h2 under `auto`) and h2c (prior knowledge): every
    scheduled request answered 200 over HTTP/2, the server's stream limit reported, and at
    this load no request waits for a stream (held_ns 0)."""
    protocol = "auto" if h2_server.tls else "h2c"
    run = _load(run_load, h2_server.url, {"protocol": protocol})
    r, done = run.records, run.done
    seen = f"reasons {_reasons(r)}; done {done}"
    assert len(r) == len(constant_offsets(RATE_PER_S, DURATION_S)), seen
    assert set(r["status"]) == {OK} and set(r["flags"]) == {200}, seen
    assert done["protocol"] == "h2", seen
    limit = SERVER_STREAMS[h2_server.name]
    assert done["server_max_streams"] == limit, seen
    assert done["streams_limit_total"] == limit * CONNECTIONS, seen
    assert 1 <= done["max_streams_in_use"] <= limit * CONNECTIONS, seen
    assert (r["service_ns"] == 0).all(), seen  # held_ns
    assert done["goaways"] == done["resets_received"] == done["refused_resent"] == 0, seen
    assert done["elapsed_s"] <= ELAPSED_BOUND_S, seen


def test_http1_is_forced_against_an_h2_server(
    run_load: Any, tmp_path: Path, knee_node: str
) -> None:
    """`driver.protocol = "http1"` offers only http/1.1 by ALPN: nginx (http2 on) speaks
    HTTP/1.1, and every request is answered."""
    with real_server("nginx-h2-tls", tmp_path / "server", knee_node) as server:
        run = _load(run_load, server.url, {"protocol": "http1"})
    assert set(run.records["status"]) == {OK}, _reasons(run.records)
    assert run.done["protocol"] == "http/1.1" and run.done["server_max_streams"] is None


def test_h2_is_required_or_auto_falls_back(run_load: Any, tmp_path: Path, knee_node: str) -> None:
    """Against nginx over TLS without HTTP/2: `h2` fails the node at setup with what to do,
    `auto` speaks HTTP/1.1."""
    with real_server("nginx-tls", tmp_path / "server", knee_node) as server:
        refused = _load(run_load, server.url, {"protocol": "h2"}, check=False, duration_s=1.0)
        auto = _load(run_load, server.url, {"protocol": "auto"}, duration_s=1.0)
    assert refused.returncode != 0 and not refused.records.size, refused.stderr[-2000:]
    assert "does not speak HTTP/2" in refused.stderr and "http1" in refused.stderr
    assert auto.done["protocol"] == "http/1.1" and set(auto.records["status"]) == {OK}


def test_h2c_and_h2_need_their_scheme(run_load: Any) -> None:
    """h2c is for http://, h2 for https://: the config says so before any connect."""
    for url, protocol in (("https://127.0.0.1:9", "h2c"), ("http://127.0.0.1:9", "h2")):
        run = _load(run_load, url, {"protocol": protocol}, check=False, duration_s=0.5)
        assert run.returncode != 0 and f"driver.protocol {protocol}" in run.stderr, run.stderr


@pytest.mark.parametrize("name", ["nginx-h2c", "nginx-keepalive"])
def test_4xx_and_5xx_have_their_own_reasons(
    run_load: Any, tmp_path: Path, knee_node: str, name: str
) -> None:
    """A 404 is an error with reason status_4xx, a 503 status_5xx, the status in flags:
    over HTTP/2 and HTTP/1.1 alike."""
    requests = [{"path": "/"}, {"path": "/missing"}, {"path": "/status/503"}]
    with real_server(name, tmp_path / "server", knee_node) as server:
        protocol = "h2c" if "h2" in name else "auto"
        run = _load(run_load, server.url, {"protocol": protocol, "requests": requests})
    r = run.records
    by_path = {
        0: (OK, 200, 0),
        1: (ERROR, 404, REASON["status_4xx"]),
        2: (ERROR, 503, REASON["status_5xx"]),
    }
    for op, (status, code, reason) in by_path.items():
        mine = r[r["op"] == op]
        assert len(mine) > 20, _reasons(r)
        assert set(mine["status"]) == {status} and set(mine["flags"]) == {code}, _reasons(mine)
        assert set(mine["arg"]) == {reason}, _reasons(mine)


def test_a_full_connection_holds_requests_and_their_wait_is_recorded(
    run_load: Any, tmp_path: Path, knee_node: str
) -> None:
    """Go with SETTINGS_MAX_CONCURRENT_STREAMS 1, one connection, a 20 ms handler, at 75
    requests/s (above 1 / 20 ms): requests wait for the one stream in knee's FIFO. Each
    records that wait (held_ns, from its intended time), its latency includes it, the sends
    are not late (the wait is the target's, not the generator's), and no more than one
    stream is ever in use."""
    rate = 75.0
    with real_server("go-h2c-one-stream", tmp_path / "server", knee_node) as server:
        run = _load(
            run_load, server.url, {"protocol": "h2c", "requests": [{"path": "/sleep"}]},
            connections=1, duration_s=1.0, schedule={"kind": "constant", "rate_per_s": rate},
        )  # fmt: skip
    r, done = run.records, run.done
    seen = f"reasons {_reasons(r)}; done {done}"
    assert len(r) == len(constant_offsets(rate, 1.0)) and set(r["status"]) == {OK}, seen
    assert done["server_max_streams"] == 1 and done["max_streams_in_use"] == 1, seen
    assert done["streams_limit_total"] == 1, seen
    held = r["service_ns"]
    assert (held > 0).mean() > 0.5, seen
    latency = r["received_ns"] - r["intended_ns"]
    assert (latency >= held + 20_000_000).all(), seen  # its wait, then the 20 ms handler
    # The last requests waited for all those before them: about (n - 1) * 20 ms - n / rate.
    assert held.max() > 200_000_000, seen
    assert done["late_sends"] <= 2, seen


def test_the_client_cap_on_streams_holds_too(run_load: Any, tmp_path: Path, knee_node: str) -> None:
    """`driver.max_streams = 1` against Go's 250: the client's cap is the limit."""
    with real_server("go-h2c", tmp_path / "server", knee_node) as server:
        run = _load(run_load, server.url, {"protocol": "h2c", "max_streams": 1}, connections=2)
    done = run.done
    assert set(run.records["status"]) == {OK}, _reasons(run.records)
    assert done["max_streams_in_use"] <= 2 and done["streams_limit_total"] == 2, done


def test_the_closed_loop_has_one_stream_per_client(
    run_load: Any, tmp_path: Path, knee_node: str
) -> None:
    with real_server("nginx-h2c", tmp_path / "server", knee_node) as server:
        run = _load(
            run_load, server.url, {"protocol": "h2c"}, connections=2,
            schedule={"kind": "closed", "clients": 4, "think_ms": 5.0},
        )  # fmt: skip
    r, done = run.records, run.done
    assert len(r) > 100 and set(r["status"]) == {OK}, _reasons(r)
    assert done["protocol"] == "h2" and 1 <= done["max_streams_in_use"] <= 4, done
    assert done["elapsed_s"] <= ELAPSED_BOUND_S


@pytest.fixture
def hostile() -> Iterator[Any]:
    servers: list[HostileH2Server] = []

    def start(mode: str, **options: Any) -> HostileH2Server:
        servers.append(HostileH2Server(mode, **options))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_refused_streams_are_sent_once_more(run_load: Any, hostile: Any) -> None:
    """REFUSED_STREAM on every third stream of each connection: the server never processed
    them, so each is sent once more (RFC 9113 section 8.7), on another connection; only a
    second refusal is recorded, as an error with reason refused. None is lost."""
    server = hostile("refuse_every_third")
    run = _load(run_load, server.url, {"protocol": "h2c"})
    r, done = run.records, run.done
    reasons = _reasons(r)
    seen = f"reasons {reasons}; done {done}"
    assert len(r) == len(constant_offsets(RATE_PER_S, DURATION_S)), seen
    assert set(reasons) <= {"none", "refused"}, seen
    refused_twice = reasons.get("refused", 0)
    assert done["refused_resent"] > 20 and refused_twice <= done["refused_resent"], seen
    # Every refusal is a RST_STREAM received: the first of each request, and the second.
    assert done["resets_received"] == done["refused_resent"] + refused_twice, seen
    assert set(r["status"][r["arg"] == REASON["refused"]]) <= {ERROR}, seen
    # Sent twice, answered once: more ok than the two thirds a server answers at once.
    assert reasons["none"] > len(r) * 2 / 3, seen


def test_resets_are_errors_with_their_reason(run_load: Any, hostile: Any) -> None:
    """RST_STREAM INTERNAL_ERROR on every third stream: those requests are errors, reason
    reset; the rest are answered."""
    server = hostile("rst_every_third")
    run = _load(run_load, server.url, {"protocol": "h2c"})
    r, done = run.records, run.done
    reasons = _reasons(r)
    assert set(reasons) == {"none", "reset"}, reasons
    assert 0.2 < reasons["reset"] / len(r) < 0.45, reasons
    assert set(r["status"][r["arg"] == REASON["reset"]]) == {ERROR}
    assert done["resets_received"] == reasons["reset"] and done["refused_resent"] == 0, done


def test_a_goaway_ends_the_connection_and_new_ones_are_made(run_load: Any, hostile: Any) -> None:
    """GOAWAY (NO_ERROR) after 10 requests per connection: new connections are made as
    requests need them, the streams above the GOAWAY's last stream id go again, and every
    request is answered."""
    server = hostile("goaway_mid_run", goaway_after=10)
    run = _load(run_load, server.url, {"protocol": "h2c"})
    r, done = run.records, run.done
    seen = f"reasons {_reasons(r)}; done {done}"
    assert len(r) == len(constant_offsets(RATE_PER_S, DURATION_S)), seen
    assert (r["status"] == OK).mean() > 0.95, seen
    assert done["goaways"] >= 10 and done["connections_opened"] > CONNECTIONS, seen
    assert set(_reasons(r)) <= {"none", "refused", "goaway"}, seen
    assert (r["queue_ns"] > 0).sum() > 0, seen  # some waited for a new connection


def test_a_goaway_that_drops_requests_in_flight_is_recorded(run_load: Any, hostile: Any) -> None:
    """GOAWAY whose last stream id covers requests it never answers, then the close: those
    requests may have been processed, so they are not sent again: errors, reason goaway."""
    server = hostile("goaway_drops_in_flight", goaway_after=10)
    run = _load(run_load, server.url, {"protocol": "h2c"})
    r, done = run.records, run.done
    reasons = _reasons(r)
    assert reasons.get("goaway", 0) > 0 and done["goaways"] > 0, (reasons, done)
    assert set(r["status"][r["arg"] == REASON["goaway"]]) == {ERROR}


def test_a_server_that_never_answers_cannot_hold_the_node(run_load: Any, hostile: Any) -> None:
    """Every request times out (a stream reset, CANCEL) or, at the end, is dropped
    `stopped`; the node ends at its duration and grace."""
    server = hostile("never_answers")
    run = _load(run_load, server.url, {"protocol": "h2c"}, timeout_ms=500)
    r, done = run.records, run.done
    reasons = _reasons(r)
    assert len(r) == len(constant_offsets(RATE_PER_S, DURATION_S)), reasons
    assert set(reasons) <= {"timeout", "stopped"} and reasons.get("timeout", 0) > 100, reasons
    assert done["elapsed_s"] <= ELAPSED_BOUND_S, done


def test_a_hostile_one_stream_server_holds_requests(run_load: Any, hostile: Any) -> None:
    """SETTINGS_MAX_CONCURRENT_STREAMS 1 and 20 ms per answer, at 60 requests/s (one every
    16.7 ms): knee never opens a second stream (the server would answer it with a
    PROTOCOL_ERROR GOAWAY) and records each request's wait for the one stream."""
    server = hostile("max_streams_1", delay_ms=20)
    run = _load(
        run_load, server.url, {"protocol": "h2c"}, connections=1, duration_s=1.0,
        schedule={"kind": "constant", "rate_per_s": 60.0},
    )  # fmt: skip
    r, done = run.records, run.done
    assert set(r["status"]) == {OK}, _reasons(r)
    assert done["max_streams_in_use"] == 1 and done["goaways"] == 0, done
    assert server.snapshot().protocol_errors == 0
    assert (r["service_ns"] > 0).mean() > 0.5, done


def test_a_body_without_window_is_held_until_its_timeout(run_load: Any, hostile: Any) -> None:
    """The server's window never opens: a POST's body waits for window (held time, in
    held_ns) until its timeout; a GET beside it is answered."""
    server = hostile("window_never_opened")
    requests = [{"path": "/"}, {"method": "POST", "path": "/upload", "body": "x" * 100_000}]
    run = _load(
        run_load, server.url, {"protocol": "h2c", "requests": requests}, timeout_ms=300,
        duration_s=1.0, schedule={"kind": "constant", "rate_per_s": 40.0},
    )  # fmt: skip
    r = run.records
    gets, posts = r[r["op"] == 0], r[r["op"] == 1]
    assert len(gets) > 5 and set(gets["status"]) == {OK}, _reasons(gets)
    assert len(posts) > 5 and set(posts["status"]) <= {TIMEOUT, DROP}, _reasons(posts)
    timed_out = posts[posts["status"] == TIMEOUT]
    assert len(timed_out) > 5 and (timed_out["service_ns"] >= 250_000_000).all(), _reasons(posts)


def test_knee_http_h2c_reports_streams_and_held_per_point(tmp_path: Path, knee_node: str) -> None:
    """`knee http URL --h2c`: the run speaks HTTP/2, and the point's summary has the done
    line's stream fields (`http`) and the held wait's distribution (`held_ns`); `--http1`
    against a server that speaks both stays on HTTP/1.1."""
    summaries = {}
    with real_server("go-h2c", tmp_path / "server", knee_node) as server:
        for flag in ("--h2c", "--http1"):
            runs = tmp_path / flag.strip("-")
            out = run_knee(
                "http", f"{server.url}/", flag, "--rate", "50", "--duration", "1s",
                "--warmup", "0s", "--connections", "2", "--no-report", "--no-progress",
                "--out", str(runs), timeout_s=120,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr[-3000:]
            summaries[flag] = knee.open_run(only_dir(runs)).summary["points"][0]
    h2, h1 = summaries["--h2c"], summaries["--http1"]
    assert h2["http"]["protocol"] == "h2" and h2["http"]["server_max_streams"] == 250, h2["http"]
    assert h2["http"]["connections_opened"] == 2 and h2["http"]["goaways"] == 0, h2["http"]
    assert h2["held_ns"]["n"] > 20 and h2["held_ns"]["max"] == 0, h2["held_ns"]
    assert h1["http"]["protocol"] == "http/1.1" and h1["http"]["server_max_streams"] is None


def test_the_http2_experiment_reports_its_streams_against_nginx_limit(tmp_path: Path) -> None:
    """experiments/http2-nginx.toml's smoke run (h2c to a real nginx with http2 on, 2
    connections): each point's summary keeps the done line's HTTP/2 fields (the protocol,
    nginx's SETTINGS_MAX_CONCURRENT_STREAMS of 128, the peak of streams in use within the
    2 x 128 limit), every request has its held wait, and the report's http table shows the
    protocol and the streams used of that limit."""
    run_dir, _ = smoke_run("http2-nginx", tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    html = (run_dir / "report.html").read_text()
    for point in summary["points"]:
        http = point["http"]
        assert (http["protocol"], http["server_max_streams"]) == ("h2", 128), http
        assert http["streams_limit_total"] == 2 * 128, http
        assert 1 <= http["max_streams_in_use"] <= 2 * 128, http
        assert http["goaways"] == http["resets_received"] == 0, http
        assert f"<td>{http['max_streams_in_use']} of 256</td>" in html
    samples = pd.read_parquet(run_dir / "samples.parquet", columns=["held_ns", "status"])
    assert (samples["held_ns"] >= 0).all() and len(samples) > 0


def test_over_http2_the_generator_resource_is_its_streams(tmp_path: Path) -> None:
    """The explain table's `connections` resource over HTTP/2 is the generator's streams:
    capacity connections x nginx's 128, its U the mean number of streams held (under 1)."""
    run_dir, _ = smoke_run("http2-nginx", tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    for point in summary["points"]:
        slots = point["resources"]["connections"]
        assert slots["capacity"] == 2 * 128, slots
        assert slots["label"] == "the generator's 256 streams", slots
        assert 0 < slots["u"] < 1, slots
