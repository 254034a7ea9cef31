"""The hostile HTTP/2 servers (tests/hostile_h2_servers.py) do what their mode says, seen by
HTTP/2 clients we did not write: nghttp2's h2load and nghttp (Debian's nghttp2-client) and
curl (libcurl over nghttp2), all installed by scripts/h2-peers. Each client's own account
(h2load's counts, nghttp's frame log, curl's exit code) is checked against the server's.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile_h2_servers import BODY, H2Stats, HostileH2Server
from real_http_servers import throwaway_certs

HERE = Path(__file__).resolve().parent
#: Seconds any one client run may take (each is bounded far below by its own arguments).
CLIENT_TIMEOUT_S = 30.0
#: curl's exit codes: the operation timed out; an HTTP/2 framing or stream error.
CURL_TIMED_OUT = 28
CURL_HTTP2_ERRORS = {16, 92}


def _need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"{tool} is missing: scripts/h2-peers install installs it")
    return found


@contextmanager
def serve(mode: str, **kwargs: object) -> Iterator[HostileH2Server]:
    server = HostileH2Server(mode, max_s=60.0, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.close()


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False
    )


def h2load(url: str, *args: str) -> dict[str, float]:
    """h2load's request counts (total, started, done, succeeded, failed, errored, timeout),
    its 2xx count and its wall time in s."""
    proc = run([_need("h2load"), *args, url])
    out = proc.stdout
    counts = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored, (\d+) timeout",
        out,
    )
    assert counts, f"h2load printed no counts (exit {proc.returncode}):\n{out}{proc.stderr}"
    keys = ("total", "started", "done", "succeeded", "failed", "errored", "timeout")
    found: dict[str, float] = {k: int(v) for k, v in zip(keys, counts.groups(), strict=True)}
    if status := re.search(r"status codes: (\d+) 2xx", out):
        found["2xx"] = int(status.group(1))
    if finished := re.search(r"finished in ([\d.]+)(ms|s)", out):
        found["wall_s"] = float(finished.group(1)) / (1e3 if finished.group(2) == "ms" else 1)
    found["h2"] = float("Application protocol: h2" in out or "h2c" in out)
    return found


def nghttp(url: str, *args: str) -> str:
    """nghttp's verbose frame log (-nv: no output of bodies, every frame printed)."""
    proc = run([_need("nghttp"), "-nv", "-t", "5", *args, url])
    return proc.stdout + proc.stderr


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return run([_need("curl"), "-sS", "--max-time", "5", *args])


def goaway_last_stream_id(log: str) -> int:
    found = re.search(r"recv GOAWAY frame.*\n\s*\(last_stream_id=(\d+)", log)
    assert found, f"no GOAWAY received:\n{log[-3000:]}"
    return int(found.group(1))


def streams_sent(log: str) -> list[int]:
    """The streams nghttp opened with a request (HEADERS it sent), in order."""
    return [int(s) for s in re.findall(r"send HEADERS frame <[^>]*stream_id=(\d+)>", log)]


def streams_answered(log: str) -> list[int]:
    return [int(s) for s in re.findall(r"recv \(stream_id=(\d+)\) :status: 200", log)]


def test_ok_answers_every_request_over_h2c() -> None:
    with serve("ok") as server:
        got = h2load(f"{server.url}/", "-n", "200", "-c", "2", "-m", "10")
        proc = curl("--http2-prior-knowledge", "-w", "\n%{http_version} %{http_code}", server.url)
        stats = server.snapshot()
    assert (got["succeeded"], got["2xx"], got["failed"]) == (200, 200, 0), got
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == BODY.decode() + "\n2 200"
    assert (stats.requests, stats.answered, stats.protocol_errors) == (201, 201, 0)
    assert stats.connections == 3


def test_ok_over_tls_negotiates_h2_by_alpn(tmp_path: Path) -> None:
    ca, cert, key = throwaway_certs(tmp_path / "tls")
    with serve("ok", tls=(cert, key)) as server:
        assert server.url.startswith("https://")
        proc = curl("--http2", "--cacert", str(ca), "-w", "\n%{http_version}", server.url)
        got = h2load(f"{server.url}/", "-n", "50", "-c", "1", "-m", "5")
        stats = server.snapshot()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == BODY.decode() + "\n2"  # HTTP/2, chosen by ALPN
    assert got["succeeded"] == 50 and got["h2"], got
    assert stats.answered == 51


def test_max_streams_1_serves_one_stream_at_a_time() -> None:
    delay_ms, n = 20.0, 20
    with serve("max_streams_1", delay_ms=delay_ms) as server:
        log = nghttp(server.url, "-m", "2")
        got = h2load(f"{server.url}/", "-n", str(n), "-c", "1", "-m", "10")
        stats = server.snapshot()
    assert "SETTINGS_MAX_CONCURRENT_STREAMS(0x03):1" in log, log
    assert got["succeeded"] == n, got
    # Once h2load had read the setting it never had two streams open; none was refused.
    assert stats.max_open_streams_after_ack == 1
    assert stats.protocol_errors == 0
    # One at a time, each held delay_ms: n requests take at least n delays (a lower bound
    # the server's serial service sets, whatever the machine's speed).
    assert got["wall_s"] >= n * delay_ms / 1e3, got


@dataclass
class TenOfTwenty:
    """nghttp's 20 requests on one connection to a server that answers 10 and goes away."""

    log: str
    stats: H2Stats
    sent: list[int]
    answered: list[int]
    last: int  # the GOAWAY's last_stream_id


def _ten_of_twenty(mode: str) -> TenOfTwenty:
    with serve(mode, goaway_after=10) as server:
        log = nghttp(server.url, "-m", "20")
        stats = server.snapshot()
    got = TenOfTwenty(
        log, stats, streams_sent(log), streams_answered(log), goaway_last_stream_id(log)
    )
    assert len(got.sent) == 20 and len(got.answered) == 10, log[-3000:]
    return got


def test_goaway_mid_run_goes_away_after_the_last_request_it_processed() -> None:
    got = _ten_of_twenty("goaway_mid_run")
    # last_stream_id is the last stream answered: every stream above it was not processed.
    assert got.last == max(got.answered) == sorted(got.sent)[9]
    assert "Some requests were not processed. total=20, processed=10" in got.log
    assert got.stats.goaway_last_stream_ids == [got.last] and got.stats.answered == 10


def test_goaway_mid_run_after_a_time() -> None:
    with serve("goaway_mid_run", goaway_after_s=0.5) as server:
        # One request at a time, 20 a second for up to 2 s: the GOAWAY comes at about 0.5 s.
        got = h2load(f"{server.url}/", "-n", "40", "-c", "1", "-m", "1", "--rps", "20")
        stats = server.snapshot()
    assert 0 < got["succeeded"] < 40 and got["failed"] == 40 - got["succeeded"], got
    assert stats.goaways == 1 and stats.answered == got["succeeded"]
    # Streams 1, 3, 5, ...: the GOAWAY names the last one answered.
    assert stats.goaway_last_stream_ids == [2 * stats.answered - 1]


def test_goaway_drops_in_flight_names_streams_it_never_answers() -> None:
    got = _ten_of_twenty("goaway_drops_in_flight")
    # last_stream_id covers every stream sent, ten of which were never answered.
    assert got.last == max(got.sent) > max(got.answered)
    stats = got.stats
    assert stats.goaway_last_stream_ids == [got.last] and stats.requests - stats.answered >= 1


def test_window_never_opened_never_takes_a_body(tmp_path: Path) -> None:
    # Larger than HTTP/2's default window (65,535 bytes), which a client may use before it
    # reads the server's SETTINGS (curl sometimes sends a small body in its first flight).
    body = tmp_path / "body"
    body.write_bytes(b"x" * 100_000)
    with serve("window_never_opened") as server:
        log = nghttp(server.url)
        get = curl("--http2-prior-knowledge", server.url)
        post = curl(
            "--http2-prior-knowledge", "--max-time", "1", "--data-binary", f"@{body}", server.url
        )
        stats = server.snapshot()
    assert "SETTINGS_INITIAL_WINDOW_SIZE(0x04):0" in log, log
    assert "recv WINDOW_UPDATE" not in log
    assert get.returncode == 0 and get.stdout == BODY.decode()  # no body: answered
    assert post.returncode == CURL_TIMED_OUT, (post.returncode, post.stderr)
    assert stats.body_bytes <= 65_535 and stats.answered == 2  # nghttp's GET and curl's


@pytest.mark.parametrize(
    ("mode", "code"),
    [("rst_every_third", "INTERNAL_ERROR(0x02)"), ("refuse_every_third", "REFUSED_STREAM(0x07)")],
)
def test_every_third_stream_is_reset(mode: str, code: str) -> None:
    with serve(mode) as server:
        got = h2load(f"{server.url}/", "-n", "30", "-c", "1", "-m", "1")
        log = nghttp(server.url, "-m", "9")
        stats = server.snapshot()
    assert (got["succeeded"], got["errored"]) == (20, 10), got
    resets = re.findall(r"recv RST_STREAM frame.*\n\s*\(error_code=([^)]+\))", log)
    assert resets == [code] * 3, log[-3000:]
    assert len(streams_answered(log)) == 6
    counted = stats.reset_refused if mode == "refuse_every_third" else stats.reset_internal_error
    assert (counted, stats.answered) == (13, 26)


def test_never_answers_reads_requests_and_answers_none() -> None:
    with serve("never_answers") as server:
        got = h2load(f"{server.url}/", "-n", "10", "-c", "1", "-m", "10", "-T", "1", "-N", "1")
        proc = curl("--http2-prior-knowledge", "--max-time", "1", server.url)
        stats = server.snapshot()
    assert got["succeeded"] == 0 and got["failed"] == 10, got
    assert proc.returncode == CURL_TIMED_OUT, (proc.returncode, proc.stderr)
    assert stats.requests == 11 and stats.answered == 0


def test_a_server_serves_at_most_max_connections() -> None:
    with serve("ok", max_connections=1) as server:
        first = curl("--http2-prior-knowledge", server.url)
        second = curl("--http2-prior-knowledge", server.url)
    assert first.returncode == 0
    assert second.returncode != 0  # closed at once, unanswered


def test_as_a_program_it_says_ready_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "hostile_h2_servers.py"), "ok", "--max-s", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready" and ready["mode"] == "ok"
        got = curl("--http2-prior-knowledge", ready["url"])
        assert got.stdout == BODY.decode()
        proc.send_signal(signal.SIGTERM)
        stats = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child
            proc.wait()
    assert stats["event"] == "stats" and stats["answered"] == 1
