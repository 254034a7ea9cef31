"""Bounds of knee-node seen from outside (docs/limits.md, issue 15 item 4b): a config over a
bound exits 2 with one line naming it, a request over one gets a clear refusal, a log is
capped, a timeout ends what it bounds. Every process is a real knee-node on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import wire_client as wc
from conftest import LoadConfigs, Processes, StartServer

from knee.results import read_sample_records

MIB = 1 << 20
STATUS_DROP = 2


def _run_node(knee_node: str, role: str, system: str, config: dict[str, Any]) -> tuple[int, str]:
    """Runs `knee-node ROLE SYSTEM` with `config` to its end: exit code and stderr."""
    proc = subprocess.run(
        [knee_node, role, system, "--name", "n", "--config", json.dumps(config)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
        check=False,
    )
    return proc.returncode, proc.stderr.decode(errors="replace")


def _load(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "target": "127.0.0.1:9",
        "schedule": {"kind": "constant", "rate_per_s": 10},
        "requests": 1,
        "samples_path": "/nonexistent/samples.bin",
        "histogram_path": "/nonexistent/histogram.csv",
    }
    config.update(overrides)
    return config


def _chat_load(replicas: int) -> dict[str, Any]:
    return {
        "replicas": ["127.0.0.1:9"] * replicas,
        "clients": 1,
        "requests_per_client": 1,
        "samples_path": "/nonexistent/samples.bin",
        "histogram_path": "/nonexistent/histogram.csv",
    }


def _share_load(peers: int) -> dict[str, Any]:
    return {
        "peer_index": 0,
        "peers": ["127.0.0.1:9"] * peers,
        "ops": 1,
        "duration_s": 1,
        "samples_path": "/nonexistent/samples.bin",
        "histogram_path": "/nonexistent/histogram.csv",
    }


def _slices_load(**overrides: Any) -> dict[str, Any]:
    driver = {"prefix": "knee/slices/limits", "slices": 4, **overrides.pop("driver", {})}
    config = _load(driver=driver, **overrides)
    del config["target"]
    return config


#: (role, system, config, the line's text): each config is one past a bound of docs/limits.md.
#: "{tmp}" in a config is the test's temporary folder.
OVER_BOUNDS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "chat dedup_window": (
        "serve",
        "chat",
        {"server": {"sqlite_path": "{tmp}/chat.db", "dedup_window": 1_000_001}},
        "dedup_window must be 1..=1000000",
    ),
    "share files": (
        "serve",
        "share",
        {"server": {"role": "peer", "index": "none", "share_dir": "{tmp}/s", "files": 100_001}},
        "files <= 100000 and file_bytes <= 68719476736",
    ),
    "share file_bytes": (
        "serve",
        "share",
        {
            "server": {
                "role": "peer",
                "index": "none",
                "share_dir": "{tmp}/s",
                "files": 1,
                "file_bytes": (64 << 30) + 1,
            }
        },
        "files <= 100000 and file_bytes <= 68719476736",
    ),
    "stream streams": (
        "serve",
        "stream",
        {"server": {"streams": [[16, 16]] * 257}},
        "streams: give 1..=256 [width_px, height_px] pairs",
    ),
    "stream side": (
        "serve",
        "stream",
        {"server": {"streams": [[4096 + 16, 16]]}},
        "each side must be a multiple of 16 in 16..=4096",
    ),
    "nginx workers": (
        "serve",
        "http",
        {"server": {"nginx": {"dir": "{tmp}/nginx", "workers": 65}}},
        "server.nginx.workers must be 1..=64",
    ),
    "load connections": (
        "load",
        "echo",
        _load(connections=1025),
        "load.connections: 1025 is above 1024",
    ),
    "echo request_bytes": (
        "load",
        "echo",
        _load(driver={"request_bytes": 16 * MIB - 12 + 1}),
        "driver.request_bytes: 16777205 is above 16777204",
    ),
    "echo reply_bytes": (
        "load",
        "echo",
        _load(driver={"reply_bytes": 16 * MIB - 44 + 1}),
        "driver.reply_bytes: 16777173 is above 16777172",
    ),
    "matrix n": (
        "load",
        "matrix",
        _load(driver={"n": 1025, "p": 1}),
        "driver.n: 1025 is above 1024",
    ),
    "matrix p": (
        "load",
        "matrix",
        _load(driver={"p": 1_000_001}),
        "driver.p: 1000001 is above 1000000",
    ),
    "chat replicas": ("load", "chat", _chat_load(65), "client.replicas: 65 entries, at most 64"),
    "share peers": ("load", "share", _share_load(251), "client.peers: 251 entries, at most 250"),
    "slices retries": (
        "load",
        "slices",
        _slices_load(driver={"retries": 101}),
        "driver.retries: 101 is above 100",
    ),
    "slices ack_ms": (
        "load",
        "slices",
        _slices_load(driver={"ack_ms": 10_001}),
        "driver.ack_ms: 10001 is above 10000",
    ),
    "slices max_outstanding": (
        "load",
        "slices",
        _slices_load(max_outstanding=1_000_001),
        "load.max_outstanding: 1000001 is above 1000000",
    ),
}


@pytest.mark.parametrize("case", list(OVER_BOUNDS))
def test_a_config_past_its_bound_exits_2_with_one_line_naming_the_bound(
    knee_node: str, tmp_path: Path, case: str
) -> None:
    """One past each config bound of docs/limits.md: the node exits 2 with one line that
    names the bound (its value in the line: a bound removed or changed fails here)."""
    role, system, config, text = OVER_BOUNDS[case]
    config = json.loads(json.dumps(config).replace("{tmp}", str(tmp_path)))
    if role == "serve":
        config["listen"] = "127.0.0.1:0"
    code, stderr = _run_node(knee_node, role, system, config)
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("[n] error: "), stderr
    assert text in lines[0], stderr


def test_echo_refuses_a_reply_over_16_mib_and_builds_one_of_16_mib(
    start_server: StartServer,
) -> None:
    """The server's own bound (`MAX_REPLY_BYTES`): 16 MiB + 1 is refused with its reason and
    the connection survives; 16 MiB is built."""
    server = start_server("echo", {})
    with wc.Client(server.addr) as c:
        reply = c.request(wc.OP_ECHO, wc.echo_body(16 * MIB + 1))
        assert reply.status == wc.STATUS_BAD_REQUEST
        assert reply.reason == "reply_bytes 16777217 exceeds 16777216"
        reply = c.request(wc.OP_ECHO, wc.echo_body(16 * MIB))
        assert (reply.status, len(reply.body)) == (wc.STATUS_OK, 16 * MIB)
    assert server.alive()


def test_an_echo_load_at_its_largest_bodies_is_served(
    start_server: StartServer, run_load: Any
) -> None:
    """Regression: the driver accepted 16 MiB bodies, whose frames (with their headers)
    exceed the 16 MiB frame limit of the server (requests) and the load (replies): every
    request was a drop. At the driver's bounds now, every request is answered."""
    server = start_server("echo", {})
    for driver in ({"request_bytes": 16 * MIB - 12}, {"reply_bytes": 16 * MIB - 44}):
        run = run_load(
            "echo",
            server.addr,
            {"kind": "constant", "rate_per_s": 20},
            requests=3,
            driver=driver,
        )
        assert run.done["ok"] == 3 and run.done["drops"] == 0, (driver, run.done, run.stderr)
    assert "oversized frame" not in server.stderr()


@pytest.mark.parametrize(
    ("over", "reason", "at", "want"),
    [
        # n = 1025: refused on its header, before its 8 MiB matrix is looked for.
        (struct.pack("<II", 1025, 1), "n = 1025 is outside 1..=1024", (1024, 1), 0.5),
        (
            (struct.pack("<II", 1, 1_000_001) + struct.pack("<d", 1.0)),
            "P = 1000001 is outside 1..=1000000",
            (1, 1_000_000),
            1.0,
        ),
    ],
    ids=["max_n", "max_p"],
)
def test_matrix_refuses_one_past_max_n_and_max_p_and_computes_at_them(
    start_server: StartServer, over: bytes, reason: str, at: tuple[int, int], want: float
) -> None:
    """One past `MAX_N` or `MAX_P` is refused with its reason; at `MAX_N` (P = 1) and at
    `MAX_P` (n = 1, by squaring) the power is computed."""
    server = start_server("matrix", {"algorithm": "squaring", "threads": 1, "cache": 0})
    n, p = at
    with wc.Client(server.addr) as c:
        reply = c.request(wc.OP_POWER, over)
        assert reply.status == wc.STATUS_BAD_REQUEST and reason in reply.reason, reply
        reply = c.request(wc.OP_POWER, wc.matrix_body(np.full((n, n), want), p))
        assert reply.status == wc.STATUS_OK, reply.body[:200]
        got = wc.decode_matrix(reply.body)
    assert got.shape == (n, n) and np.all(got == want)


def test_malformed_datagrams_are_read_2048_bytes_at_most_and_logged_10_times(
    start_server: StartServer,
) -> None:
    """30 datagrams of 5000 bytes: each is read as 2048 bytes (`RECV_BUFFER_BYTES`, so
    malformed), all 30 are counted, and only the first 10 are logged
    (`MAX_LOGGED_MALFORMED`)."""
    server = start_server("stream", {"streams": [[128, 64]]})
    host, port = wc.parse_addr(server.addr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _ in range(30):
            sock.sendto(os.urandom(5000), (host, port))
            time.sleep(0.001)  # the default receive buffer holds them, but need not
    server.wait_stats(lambda e: e.get("malformed") == 30, timeout_s=10)
    assert server.stop() == 0
    logged = [line for line in server.stderr().splitlines() if "malformed datagram" in line]
    assert len(logged) == 10, logged
    assert all(line.endswith("ignored: 2048 bytes, expected 24") for line in logged), logged


def test_an_nginx_that_keeps_failing_is_tried_on_3_ports_then_the_node_fails(
    knee_node: str, tmp_path: Path
) -> None:
    """`PORT_TRIES`: a stand-in nginx that exits at once is started three times (a new free
    port each), then the node fails with one line quoting why."""
    tries = tmp_path / "tries"
    fake = tmp_path / "fake-nginx"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tries}\nexit 1\n')
    fake.chmod(0o755)
    config = {
        "listen": "127.0.0.1:0",
        "server": {"nginx": {"dir": str(tmp_path / "nginx"), "binary": str(fake)}},
    }
    code, stderr = _run_node(knee_node, "serve", "http", config)
    assert code != 0 and "nginx did not start: nginx exited" in stderr, stderr
    assert len(tries.read_text().splitlines()) == 3


@pytest.fixture
def unanswered_listener() -> Iterator[str]:
    """A listener whose accept queue is full (backlog 0, one connection queued): it drops
    further SYNs, as a dead host does, so a connect to it waits for its timeout."""
    with socket.socket() as listener, socket.socket() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        queued.connect(listener.getsockname())
        host, port = listener.getsockname()
        yield f"{host}:{port}"


def test_a_load_whose_server_never_answers_the_connect_fails_after_5_s(
    knee_node: str, load_configs: LoadConfigs, unanswered_listener: str
) -> None:
    """`CONNECT_TIMEOUT` of the load generator: a connect that gets no answer fails the load
    with one line naming the connection, not before 5 s and well before TCP's own ~2 min."""
    config = load_configs.make(
        unanswered_listener, {"kind": "constant", "rate_per_s": 10}, requests=1
    )
    started = time.monotonic()
    code, stderr = _run_node(knee_node, "load", "echo", config)
    took_s = time.monotonic() - started
    assert code != 0 and f"connection 0 to {unanswered_listener}" in stderr, stderr
    assert 5.0 <= took_s < 5.0 + 15.0, took_s


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts and reads every byte, and never replies."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    done = threading.Event()

    def serve() -> None:
        conns = []
        listener.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
                conn.setblocking(False)
                conns.append(conn)
            except TimeoutError:
                pass
            for conn in conns:
                try:
                    conn.recv(65536)
                except (BlockingIOError, OSError):
                    pass
        for conn in conns:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    host, port = listener.getsockname()
    yield f"{host}:{port}"
    done.set()
    thread.join(5)
    listener.close()


def _started_load(
    knee_node: str, processes: Processes, config: dict[str, Any], stderr: int
) -> subprocess.Popen[bytes]:
    """An echo load generator, once it printed its `start` line."""
    proc = processes.spawn(
        [knee_node, "load", "echo", "--name", "gen", "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["event"] == "start"
    return proc


def test_a_stopped_load_waits_1_s_for_replies_in_flight_then_drops_them(
    knee_node: str, processes: Processes, load_configs: LoadConfigs, silent_server: str
) -> None:
    """`STOP_GRACE_NS`: SIGTERM to a load whose requests are all in flight (60 s timeout):
    it waits the 1 s grace for their replies, not their timeout, then records each as a
    drop and exits 0."""
    config = load_configs.make(
        silent_server, {"kind": "constant", "rate_per_s": 50}, duration_s=30, timeout_ms=60_000
    )
    proc = _started_load(knee_node, processes, config, stderr=subprocess.PIPE)
    time.sleep(0.5)
    stopped = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    took_s = time.monotonic() - stopped
    assert proc.returncode == 0, err.decode()
    assert 1.0 <= took_s < 1.0 + 10.0, took_s
    (done,) = [e for e in map(json.loads, out.decode().splitlines()) if e.get("event") == "done"]
    records = read_sample_records(Path(config["samples_path"]))
    assert done["sent"] >= 1 and done["ok"] == 0 and done["timeouts"] == 0, done
    assert len(records) == done["drops"] >= done["sent"], done
    assert (records["status"] == STATUS_DROP).all() and (records["received_ns"] == 0).all()


def test_a_load_killed_with_sigkill_has_written_its_samples_before_a_second(
    start_server: StartServer, knee_node: str, processes: Processes, load_configs: LoadConfigs
) -> None:
    """`FLUSH_EVERY_NS`: a 1000/s load killed with SIGKILL half a second after its start has
    its samples on disk. Neither other rule could have written them by then: 1 MiB is 11 s
    of samples at this rate, and the periodic stats flush comes after a second. (The 100 ms
    rule itself: `load::recorder::tests::samples_are_written_at_1_mib_or_after_100_ms`.)"""
    server = start_server("echo", {})
    config = load_configs.make(
        server.addr, {"kind": "constant", "rate_per_s": 1000}, duration_s=30, timeout_ms=5000
    )
    proc = _started_load(knee_node, processes, config, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    # Whole records only: a torn last one is dropped.
    records = read_sample_records(Path(config["samples_path"]))
    assert len(records) > 0
    assert (records["status"] == 0).all()
