"""The load generator and the server told the truth where it is hardest: a stalled server
(coordinated omission), a sender that falls behind (`late_ms`), more requests than may be in
flight (`max_outstanding`), a full server queue (`overloaded`), requests waiting in the socket
buffer behind a busy connection thread, replies read after their deadline, and requests in
flight when the run is stopped.

The processes are real (`knee-node` on 127.0.0.1). Stalls are made with SIGSTOP/SIGCONT on
the test's own processes, by PID, and the assertions follow from the stall, not from how fast
this machine is. Where a test must know that a byte reached a socket, it reads the socket's
queue from /proc/net/tcp instead of sleeping and hoping.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import wire_client as wc
from conftest import Event, JsonLines, LoadConfigs, Processes, RunLoad, Server, StartServer
from test_load import slow_matrix_run

from knee.results import read_sample_records

STATUS_OK, STATUS_TIMEOUT, STATUS_DROP, STATUS_ERROR = range(4)
ECHO_DRIVER = {"request_bytes": 16, "reply_bytes": 16}
#: An echo request frame with ECHO_DRIVER: length prefix, header, body.
ECHO_REQUEST_BYTES = 4 + 12 + 16
MS = 1_000_000
SECOND = 1_000_000_000


@pytest.fixture
def echo_server(start_server: StartServer) -> Server:
    return start_server("echo", {"threads": 0})


# --- helpers ------------------------------------------------------------------------------


@dataclass
class LoadProc:
    """A `knee-node load` running in the background."""

    proc: subprocess.Popen[bytes]
    lines: JsonLines
    config: dict[str, Any]
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start_ns(self) -> int:
        event = self.lines.wait_for(lambda e: e.get("event") == "start", 10)
        return int(event["start_ns"])

    def finish(self, timeout_s: float = 30) -> tuple[Event, np.ndarray]:
        """Its `done` line and sample records, once it has exited with 0."""
        try:
            done = self.lines.wait_for(lambda e: e.get("event") == "done", timeout_s)
            code = self.proc.wait(timeout=10)
        except (AssertionError, subprocess.TimeoutExpired) as e:
            Processes.stop(self.proc)
            raise AssertionError(f"{e}\nload log:\n{self.stderr_path.read_text()}") from None
        assert code == 0, f"load exited with {code}:\n{self.stderr_path.read_text()}"
        return done, read_sample_records(self.config["samples_path"])


SpawnLoad = Callable[..., LoadProc]
#: What a launch returns: a LoadProc (spawn_load) or a LoadRun (run_load).
L = TypeVar("L")


@pytest.fixture
def spawn_load(
    knee_node: str, processes: Processes, load_configs: LoadConfigs, tmp_path: Path
) -> SpawnLoad:
    """`spawn_load(system, target, schedule, **options) -> LoadProc`, not waited for."""

    def spawn(system: str, target: str, schedule: dict[str, Any], **options: Any) -> LoadProc:
        config = load_configs.make(target, schedule, **options)
        stderr_path = tmp_path / f"load{load_configs.count}.stderr.log"
        proc, lines = processes.spawn_json(
            [knee_node, "load", system, "--name", "gen", "--config", json.dumps(config)],
            stderr_path,
        )
        return LoadProc(proc, lines, config, stderr_path)

    return spawn


def stop_process(pid: int, timeout_s: float = 5) -> None:
    """SIGSTOP `pid` (a process this test started) and wait until every thread of it is
    stopped. `kill` returns before that: the group stop begins only when one thread takes
    the signal, and on a busy machine another thread can go on running meanwhile (seen: a
    frozen server's connection thread replied 16 ms after the SIGSTOP)."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped() -> bool:
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            try:
                state = stat.read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that has just exited
            if state not in ("T", "t"):
                return False
        return True

    wait_until(all_stopped, timeout_s, f"every thread of {pid} stopped")


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """Stops `pid` (a process this test started) for the block; SIGCONT whatever happens."""
    stop_process(pid)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def sleep_until(t_ns: int) -> None:
    left = t_ns - time.monotonic_ns()
    if left > 0:
        time.sleep(left / 1e9)


def port_of(addr: str) -> int:
    return wc.parse_addr(addr)[1]


def tcp_rx_queues(port: int) -> tuple[int, int]:
    """Bytes received and not yet read, from /proc/net/tcp: (by the server's connections on
    `port`, by the clients connected to it)."""
    server = client = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        local_port = int(f[1].rsplit(":", 1)[1], 16)
        remote_port = int(f[2].rsplit(":", 1)[1], 16)
        rx = int(f[4].split(":")[1], 16)
        if local_port == port and remote_port != 0:  # not the listener
            server += rx
        elif remote_port == port:
            client += rx
    return server, client


def wait_until(pred: Callable[[], bool], timeout_s: float, what: str) -> int:
    """Polls `pred` until true; the monotonic ns when it was seen true."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.002)
    return time.monotonic_ns()


def order_statistic(x: np.ndarray, q: float) -> float:
    """knee's percentile: x_(ceil(n q)) of the sorted values (1-based)."""
    s = np.sort(x)
    return float(s[math.ceil(len(s) * q) - 1])


# --- coordinated omission -----------------------------------------------------------------


def echo_constant(
    launch: Callable[..., L], echo_server: Server, rate_per_s: int, **config: Any
) -> L:
    """`launch` (spawn_load or run_load) of the echo engine against `echo_server` at a
    constant `rate_per_s`, with ECHO_DRIVER."""
    schedule = {"kind": "constant", "rate_per_s": rate_per_s}
    return launch("echo", echo_server.addr, schedule, driver=ECHO_DRIVER, **config)


def test_a_frozen_server_shows_in_every_percentile(
    echo_server: Server, spawn_load: SpawnLoad
) -> None:
    """Freeze the server for D = 1 s in a T = 6 s open loop at a constant 1,000/s. A request
    meant to leave t into the stall is answered at its end, D - t late, so the share of
    requests slower than x is (D - x) / T: p90 = D - 0.1 T = 0.4 s, p99 = D - 0.01 T = 0.94 s.
    A generator that waited for replies before sending (coordinated omission) would see one
    slow request and report ~0 for both."""
    rate, length_s, n = 1000, 6.0, 6000
    load = echo_constant(
        spawn_load, echo_server, rate, requests=n, duration_s=length_s + 1, timeout_ms=10_000
    )
    start_ns = load.start_ns()
    sleep_until(start_ns + int(2.5 * SECOND))
    with frozen(echo_server.pid):
        stopped_ns = time.monotonic_ns()  # the server is stopped from here on
        sleep_until(stopped_ns + SECOND)
        resumed_ns = time.monotonic_ns()  # ... until after this
    done, r = load.finish()

    # Every scheduled request has its record, and each was answered.
    assert len(r) == n
    assert np.array_equal(np.sort(r["request_id"]), np.arange(n))
    assert np.all(r["status"] == STATUS_OK), np.unique(r["status"], return_counts=True)
    assert (done["sent"], done["ok"]) == (n, n)

    latency_ns = r["received_ns"].astype(np.int64) - r["intended_ns"].astype(np.int64)
    stall_s = (resumed_ns - stopped_ns) / 1e9
    for q in (0.9, 0.99):
        expected_s = stall_s - (1 - q) * length_s
        got_s = order_statistic(latency_ns, q) / 1e9
        assert abs(got_s - expected_s) <= 0.1 * expected_s, (
            f"p{q * 100:g}: {got_s} s, {expected_s} s"
        )

    # The server counts the stall as queue: each request stalled in its socket buffer from
    # its send (it reaches the host within microseconds) to the resume at least. The slack
    # is the kernel's stamp granularity: it keeps one stamp per merged run of ~17 segments.
    sent = r["sent_ns"].astype(np.int64)
    stalled = (sent >= stopped_ns + 10 * MS) & (sent <= resumed_ns - 200 * MS)
    assert stalled.sum() >= 500
    waited_at_least_ns = resumed_ns - sent[stalled]
    queue_ns = r["queue_ns"][stalled].astype(np.int64)
    short = queue_ns < waited_at_least_ns - 100 * MS
    assert not short.any(), (
        f"{short.sum()} stalled requests with queue_ns below their wait: "
        f"{queue_ns[short][:5]} vs {waited_at_least_ns[short][:5]}"
    )


# --- late sends ---------------------------------------------------------------------------


def test_late_sends_in_the_done_line_match_the_samples(
    echo_server: Server, spawn_load: SpawnLoad
) -> None:
    """Freeze the generator itself for 300 ms: every request due while it was frozen leaves
    late, and the `late_sends` count equals the samples with sent - intended > late_ms."""
    late_ms = 5
    load = echo_constant(
        spawn_load, echo_server, 1000, requests=1500, duration_s=3, late_ms=late_ms
    )
    start_ns = load.start_ns()
    sleep_until(start_ns + SECOND // 2)
    with frozen(load.pid):
        stopped_ns = time.monotonic_ns()
        sleep_until(stopped_ns + 300 * MS)
        resumed_ns = time.monotonic_ns()
    done, r = load.finish()

    assert len(r) == 1500 and np.all(r["status"] == STATUS_OK)
    lateness_ns = r["sent_ns"].astype(np.int64) - r["intended_ns"].astype(np.int64)
    assert done["late_sends"] == int(np.count_nonzero(lateness_ns > late_ms * MS))
    # Due while the generator was frozen, more than late_ms before it resumed: late.
    intended = r["intended_ns"].astype(np.int64)
    due_frozen = (intended >= stopped_ns) & (intended < resumed_ns - late_ms * MS)
    assert due_frozen.sum() >= 200
    assert np.all(lateness_ns[due_frozen] > late_ms * MS)
    assert done["late_sends"] >= due_frozen.sum()
    # Their lateness is part of their latency (measured from the intended time).
    latency_ns = r["received_ns"].astype(np.int64) - intended
    assert np.all(latency_ns[due_frozen] >= lateness_ns[due_frozen])


# --- max_outstanding ----------------------------------------------------------------------


def test_requests_beyond_max_outstanding_are_drops_never_sent(
    echo_server: Server, run_load: RunLoad
) -> None:
    """Against a frozen server at most `max_outstanding` requests can be in flight: the rest
    of the schedule is recorded as drops that never left (no send time, no bytes)."""
    with frozen(echo_server.pid):
        run = echo_constant(
            run_load,
            echo_server,
            1000,
            requests=200,
            max_outstanding=10,
            timeout_ms=1000,  # longer than the 0.2 s schedule: nothing frees a slot before
        )
    r = np.sort(run.records, order="request_id")
    assert len(r) == 200 and np.array_equal(r["request_id"], np.arange(200))
    sent, dropped = r[:10], r[10:]
    assert np.all(sent["status"] == STATUS_TIMEOUT)
    assert np.all(sent["sent_ns"] > 0) and np.all(sent["bytes_out"] == ECHO_REQUEST_BYTES)
    assert np.all(dropped["status"] == STATUS_DROP)
    assert np.all(dropped["sent_ns"] == 0)
    assert np.all(dropped["bytes_out"] == 0)
    assert np.all(dropped["received_ns"] == 0) and np.all(dropped["bytes_in"] == 0)
    done = run.done
    assert (done["sent"], done["drops"], done["timeouts"], done["ok"]) == (10, 190, 10, 0)
    assert done["bytes_tx"] == 10 * ECHO_REQUEST_BYTES
    # Only a request that left can be a late send (late_ms is 1 by default).
    lateness_ns = sent["sent_ns"].astype(np.int64) - sent["intended_ns"].astype(np.int64)
    assert done["late_sends"] == int(np.count_nonzero(lateness_ns > MS))


# --- overloaded ---------------------------------------------------------------------------


def test_a_full_server_queue_answers_overloaded_and_those_are_drops(
    start_server: StartServer, run_load: RunLoad
) -> None:
    """One worker, room for one waiting request: a burst of 20 requests, each taking at least
    ~150 ms, sent within 10 ms. The server can accept the one it serves and one waiting; the
    others are shed at once, answered `overloaded`, and recorded as drops."""
    server, _, run = slow_matrix_run(
        start_server,
        run_load,
        150e6,
        {"kind": "constant", "rate_per_s": 2000},
        server={"max_queue": 1},
        requests=20,
        timeout_ms=30_000,
    )
    r = run.records
    assert len(r) == 20
    ok, dropped = r[r["status"] == STATUS_OK], r[r["status"] == STATUS_DROP]
    assert len(ok) + len(dropped) == 20, np.unique(r["status"], return_counts=True)
    assert len(ok) >= 1 and len(dropped) >= 10, (len(ok), len(dropped))
    # Shed requests were sent and answered (with an empty body), not lost.
    assert np.all(dropped["sent_ns"] > 0) and np.all(dropped["received_ns"] > dropped["sent_ns"])
    assert np.all(dropped["bytes_out"] == 4 + 12 + 8 + 8 * 50 * 50)
    assert np.all(dropped["bytes_in"] == 4 + 44)
    assert np.all(dropped["service_ns"] == 0)
    assert np.all(dropped["server_ns"] == dropped["queue_ns"])
    done = run.done
    assert (done["ok"], done["drops"]) == (len(ok), len(dropped))
    # The server counted exactly those.
    stats = server.wait_stats(lambda e: e["overloaded"] >= len(dropped))
    assert stats["overloaded"] == len(dropped)


# --- socket-buffer waiting is queue -------------------------------------------------------


def test_time_in_the_socket_buffer_behind_a_busy_connection_thread_is_queue(
    echo_server: Server,
) -> None:
    """Echo with `threads = 0` serves a connection's requests one at a time on its thread.
    A request that arrives while that thread is busy waits in the socket buffer: from its
    arrival at the host, that is server queue, not network."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A small receive buffer, so the server's 16 MiB reply cannot all be buffered.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(wc.TIMEOUT_S)
    sock.connect(wc.parse_addr(echo_server.addr))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with sock:
        # 1. A request whose 16 MiB reply the client does not read yet: the connection's
        #    thread blocks writing it.
        big_bytes = 16 << 20
        sock.sendall(wc.encode_request(1, wc.OP_ECHO, wc.echo_body(big_bytes)))
        port = port_of(echo_server.addr)
        wait_until(lambda: tcp_rx_queues(port)[1] > 0, 5, "the big reply reaching the client")
        # 2. A small request behind it; it is on the host once sendall returns (loopback).
        sock.sendall(wc.encode_request(2, wc.OP_ECHO, wc.echo_body(16)))
        sent_ns = time.monotonic_ns()
        # 3. The thread cannot take it up before the client reads the big reply.
        time.sleep(0.3)
        read_from_ns = time.monotonic_ns()
        big = wc.read_reply(sock)
        small = wc.read_reply(sock)
        assert (big.request_id, big.status, len(big.body)) == (1, wc.STATUS_OK, big_bytes)
        assert (small.request_id, small.status) == (2, wc.STATUS_OK)
        assert small.server_ns == small.queue_ns + small.service_ns
        waited_ns = read_from_ns - sent_ns
        assert small.queue_ns >= 0.9 * waited_ns, (small.queue_ns, waited_ns)

        # Requests pipelined in one segment all arrive at once: the last one waited while
        # the thread served every one before it.
        count = 50
        sock.sendall(
            b"".join(wc.encode_request(10 + i, wc.OP_ECHO, wc.echo_body(16)) for i in range(count))
        )
        replies = [wc.read_reply(sock) for _ in range(count)]
    assert [x.request_id for x in replies] == [10 + i for i in range(count)]
    assert all(x.server_ns == x.queue_ns + x.service_ns for x in replies)
    served_before_ns = sum(x.service_ns for x in replies[:-1])
    assert replies[-1].queue_ns >= served_before_ns > 0, (replies[-1].queue_ns, served_before_ns)


# --- deadlines and stops ------------------------------------------------------------------

SCHEDULES = {
    "open": {"kind": "constant", "rate_per_s": 10},
    "closed": {"kind": "closed", "clients": 1, "think_ms": 0},
}


@contextmanager
def one_request_held_by_a_frozen_server(
    echo_server: Server, spawn_load: SpawnLoad, loop: str, duration_s: float, timeout_ms: float
) -> Iterator[LoadProc]:
    """`loop`'s schedule sends one request to the echo server, frozen: the load, once the
    request is in the server's socket; the server resumes when the block ends."""
    with frozen(echo_server.pid):
        load = spawn_load(
            "echo",
            echo_server.addr,
            SCHEDULES[loop],
            requests=1,
            duration_s=duration_s,
            timeout_ms=timeout_ms,
            driver=ECHO_DRIVER,
        )
        load.start_ns()
        port = port_of(echo_server.addr)
        wait_until(lambda: tcp_rx_queues(port)[0] > 0, 5, "the request reaching the server")
        yield load


@pytest.mark.parametrize("loop", SCHEDULES)
def test_a_reply_read_after_its_deadline_is_a_timeout(
    echo_server: Server, spawn_load: SpawnLoad, loop: str
) -> None:
    """The reply reaches the generator's socket before the deadline, but the generator
    (frozen) reads it only after: whether the expiry or the read comes first, it is a
    timeout, and it is not counted again."""
    timeout_ms = 1000
    port = port_of(echo_server.addr)
    with one_request_held_by_a_frozen_server(echo_server, spawn_load, loop, 10, timeout_ms) as load:
        stop_process(load.pid)
    try:
        replied_ns = wait_until(
            lambda: tcp_rx_queues(port)[1] > 0, 5, "the reply reaching the generator"
        )
        sleep_until(replied_ns + (timeout_ms + 200) * MS)
    finally:
        os.kill(load.pid, signal.SIGCONT)
    done, r = load.finish()
    assert len(r) == 1
    (s,) = r
    assert replied_ns < s["sent_ns"] + timeout_ms * MS  # it was there in time, unread
    assert s["status"] == STATUS_TIMEOUT, s
    assert s["received_ns"] == 0
    assert (done["sent"], done["timeouts"], done["ok"]) == (1, 1, 0)
    assert done["latency"]["count"] == 0


@pytest.mark.parametrize("loop", SCHEDULES)
def test_requests_in_flight_when_stopped_are_drops(
    echo_server: Server, spawn_load: SpawnLoad, loop: str
) -> None:
    """SIGTERM while a request waits for a frozen server: after the 1 s grace, it is a drop
    (its timeout did not pass), the node still writes its samples and `done`, and exits 0."""
    with one_request_held_by_a_frozen_server(echo_server, spawn_load, loop, 30, 20_000) as load:
        os.kill(load.pid, signal.SIGTERM)
        done, r = load.finish(timeout_s=10)
    assert len(r) == 1
    (s,) = r
    assert s["status"] == STATUS_DROP, s
    assert s["sent_ns"] > 0 and s["received_ns"] == 0
    assert s["bytes_out"] == ECHO_REQUEST_BYTES  # it was sent, and lost with the stop
    assert (done["sent"], done["drops"], done["timeouts"]) == (1, 1, 0)
