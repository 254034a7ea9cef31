"""The deadline rules every sending engine shares (load/flights.rs), over real processes.

Each of the four engines (the framed-TCP open loop, http, slices over Zenoh, stream over
UDP) runs against its own real server, which the test freezes with SIGSTOP:

- a request whose deadline passed while its server was frozen cannot have been answered in
  time (a frozen process sends nothing), so it is a timeout (stream: a timeout or, when its
  reply comes within the late window, late), recorded once, never ok;
- a request still unanswered when the node is stopped (SIGTERM) is a drop, recorded once the
  harness's grace (1 s) is over: the node waits that long for replies, and no longer for the
  request's own, much longer, timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import JsonLines, Processes

from knee.results import SAMPLE_DTYPE, read_sample_records

OK, TIMEOUT, DROP, LATE = 0, 1, 2, 4
#: The harness's stop grace (load/harness.rs STOP_GRACE_NS).
GRACE_S = 1.0
#: A frozen server stays frozen this long: several deadlines of the short timeout pass.
FREEZE_S = 1.5
#: Traffic before the freeze, so that the engine is under way (connections made, routes
#: known) when the server stops.
WARM_S = 0.5
SHORT_TIMEOUT_MS = 300.0
#: Far longer than a run: no request may time out before the stop.
LONG_TIMEOUT_MS = 20_000.0
RATE_PER_S = 20.0
#: A run that does not end by itself is stopped (and the test failed) after this.
END_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 20.0
ENGINES = ["open_loop", "http", "slices", "stream"]

#: A keep-alive HTTP/1.1 server (one thread per connection), as a process of its own so
#: that SIGSTOP freezes it whole.
HTTP_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@dataclass
class Target:
    """What a load node of one engine runs against: the processes to freeze and its config
    (without timeout, duration and output paths)."""

    system: str
    frozen: list[int]
    config: dict[str, Any]
    #: Statuses of a request whose deadline passed unanswered.
    expired: frozenset[int]


def _ready(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    lines = JsonLines(proc.stdout)
    return lines.wait_for(lambda e: e.get("event") == "ready", READY_TIMEOUT_S)


def _serve(node: str, processes: Processes, system: str, server: dict[str, Any]) -> tuple[int, str]:
    config = {"server": server, "listen": "127.0.0.1:0"}
    proc = processes.spawn(
        [node, "serve", system, "--name", "srv", "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    return proc.pid, str(_ready(proc)["addr"])


def _open_loop(node: str, processes: Processes, _tmp: Path) -> Target:
    pid, addr = _serve(node, processes, "echo", {"threads": 0})
    config = {
        "target": addr,
        "schedule": {"kind": "constant", "rate_per_s": RATE_PER_S},
        "seed": 1,
        "connections": 2,
        "driver": {"request_bytes": 16, "reply_bytes": 16},
    }
    return Target("echo", [pid], config, frozenset({TIMEOUT}))


def _http(_node: str, processes: Processes, _tmp: Path) -> Target:
    proc = processes.spawn(
        [sys.executable, "-c", HTTP_SERVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    config = {
        "target": f"http://127.0.0.1:{port}",
        "schedule": {"kind": "constant", "rate_per_s": RATE_PER_S},
        "seed": 1,
        "connections": 2,
        "driver": {"requests": [{"method": "GET", "path": "/"}]},
    }
    return Target("http", [proc.pid], config, frozenset({TIMEOUT}))


def _slices(node: str, processes: Processes, tmp: Path) -> Target:
    prefix = f"knee/slices/deadlines-{tmp.name}"
    # A failure timeout past every freeze: the frozen PN keeps its slices.
    common = {"slices": 2, "prefix": prefix, "heartbeat_ms": 50}
    _, lb = _serve(node, processes, "slices", {**common, "role": "lb", "failure_timeout_ms": 60_000,
                   "balance": True, "connect": []})  # fmt: skip
    pn, _ = _serve(node, processes, "slices", {**common, "role": "pn", "pn": 0, "threads": 1,
                   "work_repeat": 1, "queue_max": 1000, "log_path": str(tmp / "pn-0.log"),
                   "connect": [lb]})  # fmt: skip
    config = {
        "schedule": {"kind": "constant", "rate_per_s": RATE_PER_S},
        "seed": 1,
        # No retry: a deadline that passes gives the item up.
        "driver": {"prefix": prefix, "connect": [lb], "slices": 2, "image_bytes": 300,
                   "retries": 0, "sender": 1},
    }  # fmt: skip
    return Target("slices", [pn], config, frozenset({TIMEOUT}))


def _stream(node: str, processes: Processes, _tmp: Path) -> Target:
    server = {
        "streams": [[128, 64]],
        "delay": {"kind": "fixed", "ms": 1.0},
        "loss": {"kind": "bernoulli", "p": 0.0},
        "seed": 1,
    }
    pid, addr = _serve(node, processes, "stream", server)
    # Two requests at a time, frames without end: the run lasts until its duration or stop.
    config = {"services": [addr], "stream": 0, "blocks_per_frame": 32, "frames": 1_000_000,
              "outstanding": 2}  # fmt: skip
    # Stream's own rule: a reply within the late window after the deadline is late.
    return Target("stream", [pid], config, frozenset({TIMEOUT, LATE}))


TARGETS: dict[str, Callable[[str, Processes, Path], Target]] = {
    "open_loop": _open_loop,
    "http": _http,
    "slices": _slices,
    "stream": _stream,
}


def _wait_stopped(pid: int) -> None:
    """Returns once every thread of `pid` is stopped (SIGSTOP took effect): from then on it
    sends nothing."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            stat = (task / "stat").read_text()
            states.append(stat[stat.rindex(")") + 2])
        if all(s in "tT" for s in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop")


@contextmanager
def _frozen(pids: list[int]) -> Iterator[dict[str, int]]:
    """Freezes `pids`; yields {"stopped_ns"} (monotonic, after every thread stopped), and
    sets "resumed_ns" (just before SIGCONT) when the block ends."""
    times: dict[str, int] = {}
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for pid in pids:
            _wait_stopped(pid)
        times["stopped_ns"] = time.monotonic_ns()
        yield times
    finally:
        times["resumed_ns"] = time.monotonic_ns()
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


@dataclass
class Run:
    proc: subprocess.Popen[bytes]
    lines: JsonLines
    samples: Path

    def records(self) -> np.ndarray:
        if not self.samples.exists():
            return np.zeros(0, SAMPLE_DTYPE)
        return read_sample_records(self.samples)

    def done(self) -> dict[str, Any]:
        return self.lines.wait_for(lambda e: e.get("event") == "done", 1.0)


def _start_load(
    node: str, processes: Processes, tmp: Path, target: Target, timeout_ms: float, duration_s: float
) -> Run:
    samples = tmp / "load.samples.bin"
    config = {
        **target.config,
        "timeout_ms": timeout_ms,
        "duration_s": duration_s,
        "samples_path": str(samples),
        "histogram_path": str(tmp / "load.histogram.csv"),
    }
    proc = processes.spawn(
        [node, "load", target.system, "--name", "gen", "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=open(tmp / "load.stderr.log", "wb"),  # noqa: SIM115 - the child's
    )
    assert proc.stdout is not None
    lines = JsonLines(proc.stdout)
    lines.wait_for(lambda e: e.get("event") == "start", READY_TIMEOUT_S)
    return Run(proc, lines, samples)


def _wait_end(run: Run, tmp: Path) -> None:
    try:
        code = run.proc.wait(timeout=END_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        Processes.stop(run.proc)
        pytest.fail(f"the load did not end; log:\n{(tmp / 'load.stderr.log').read_text()}")
    assert code == 0, (tmp / "load.stderr.log").read_text()


def _once_each(records: np.ndarray, done: dict[str, Any]) -> None:
    """Every request is one sample: no id twice, and as many as the node completed."""
    ids = records["request_id"]
    assert len(np.unique(ids)) == len(ids) == done["completed"], done


FrozenUnderLoad = Callable[
    [float, float], AbstractContextManager[tuple[Target, Run, dict[str, int]]]
]


@pytest.fixture(params=ENGINES)
def frozen_under_load(
    request: pytest.FixtureRequest, knee_node: str, processes: Processes, tmp_path: Path
) -> FrozenUnderLoad:
    """`with frozen_under_load(timeout_ms, duration_s) as (target, run, times)`: each engine's
    target under load for WARM_S, then frozen for the block (`_frozen`'s times)."""

    @contextmanager
    def load(timeout_ms: float, duration_s: float) -> Iterator[tuple[Target, Run, dict[str, int]]]:
        target = TARGETS[request.param](knee_node, processes, tmp_path)
        run = _start_load(knee_node, processes, tmp_path, target, timeout_ms, duration_s)
        time.sleep(WARM_S)
        with _frozen(target.frozen) as times:
            yield target, run, times

    return load


def test_a_reply_after_its_deadline_is_a_timeout(
    frozen_under_load: FrozenUnderLoad, tmp_path: Path
) -> None:
    with frozen_under_load(SHORT_TIMEOUT_MS, 4.0) as (target, run, times):
        time.sleep(FREEZE_S)
    _wait_end(run, tmp_path)
    r = run.records()
    _once_each(r, run.done())
    sent = r["sent_ns"].astype(np.int64)
    deadline = sent + int(SHORT_TIMEOUT_MS * 1e6)
    # Sent to the frozen server, and due before it could answer: no reply came in time.
    missed = r[(sent > times["stopped_ns"]) & (deadline < times["resumed_ns"])]
    assert len(missed) >= 3, f"too few requests while frozen: {len(missed)} of {len(r)}"
    statuses = sorted(set(missed["status"].tolist()))
    assert set(statuses) <= target.expired, (
        f"{target.system}: statuses {statuses} past the deadline"
    )
    assert np.all(missed["received_ns"][missed["status"] == TIMEOUT] == 0)
    # The server answered before the freeze: the timeouts are the freeze's.
    assert np.count_nonzero(r["status"] == OK) > 0


def test_a_request_unanswered_at_the_stop_is_a_drop_after_the_grace(
    frozen_under_load: FrozenUnderLoad, tmp_path: Path
) -> None:
    with frozen_under_load(LONG_TIMEOUT_MS, 60.0) as (_, run, times):
        time.sleep(GRACE_S)
        stop_ns = time.monotonic_ns()
        os.kill(run.proc.pid, signal.SIGTERM)
        _wait_end(run, tmp_path)
        ended_ns = time.monotonic_ns()
    r = run.records()
    _once_each(r, run.done())
    # The node waited the grace for the replies in flight (none could come) ...
    assert ended_ns - stop_ns >= GRACE_S * 1e9
    # ... and then gave them up as drops: the requests in flight to the frozen server (those
    # sent while it was frozen among them); none timed out (their timeout is far off).
    unanswered = r[r["received_ns"] == 0]
    frozen = r["sent_ns"].astype(np.int64) > times["stopped_ns"]
    assert len(unanswered) >= 1 and np.all(r["received_ns"][frozen] == 0)
    assert np.all(unanswered["status"] == DROP), sorted(set(unanswered["status"].tolist()))
    assert np.count_nonzero(r["status"] == TIMEOUT) == 0
    assert run.done()["drops"] == np.count_nonzero(r["status"] == DROP)
