"""Every client role runs inside one load harness: its `progress` and `done` lines carry the
common fields, and the counts in `done` are those of its samples. Each role runs against
real servers until its first progress line, then is stopped with SIGTERM, as a runner stops
a node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Event, Processes, Server, StartServer

from knee.results import read_sample_records

MS = 1_000_000
OK, TIMEOUT, DROP, ERROR, LATE = range(5)
COUNTS = {
    "sent",
    "completed",
    "ok",
    "timeouts",
    "drops",
    "errors",
    "late_sends",
    "late_replies",
    "bytes_tx",
    "bytes_rx",
}
PROGRESS = COUNTS | {"t_s", "rate_per_s", "sent_rate_per_s", "target_rate_per_s", "p99_ns"}
DONE = COUNTS | {"elapsed_s", "achieved_rate_per_s", "target_rate_per_s", "latency"}
LATENCY = {"count", "mean_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"}
STREAM = {
    "redundant",
    "retransmissions",
    "hedged",
    "stray_replies",
    "bad_replies",
    "send_errors",
    "frames",
    "complete_frames",
    "blocks_missing",
    "frames_per_s",
    "goodput_bits_per_s",
    "wire_bits_per_s",
}
#: Each role's own fields: on its done line, and (stream) on its progress lines.
DONE_EXTRA = {
    "chat": {"retries", "audit_rows", "audit_error"},
    "share": {"checksum_mismatches", "replica_fallbacks"},
    "stream": STREAM,
}
PROGRESS_EXTRA = {"stream": STREAM}
#: Seconds a role gets to print its first progress line, and then to end after SIGTERM.
PROGRESS_TIMEOUT_S = 15.0
DONE_TIMEOUT_S = 15.0


class StoppedRun:
    """A load node stopped with SIGTERM after its first progress line."""

    def __init__(self, events: list[Event], samples: Path) -> None:
        self.events = events
        self.records = read_sample_records(samples)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def done(self) -> Event:
        (done,) = self.of("done")
        return done


def run_until_progress(
    knee_node: str, processes: Processes, tmp_path: Path, system: str, config: dict[str, Any]
) -> StoppedRun:
    samples = tmp_path / f"{system}.samples.bin"
    config = {
        **config,
        "samples_path": str(samples),
        "histogram_path": str(tmp_path / f"{system}.histogram.csv"),
    }
    stderr_path = tmp_path / f"{system}.stderr.log"
    proc, lines = processes.spawn_json(
        [knee_node, "load", system, "--name", "load", "--config", json.dumps(config)], stderr_path
    )
    try:
        lines.wait_for(lambda e: e.get("event") == "progress", PROGRESS_TIMEOUT_S)
    finally:
        code = Processes.stop(proc, grace_s=DONE_TIMEOUT_S)
    log = stderr_path.read_text()
    assert code == 0, f"{system} load exited with {code}:\n{log}"
    lines.wait_for(lambda e: e.get("event") == "done", DONE_TIMEOUT_S)
    return StoppedRun(lines.snapshot(), samples)


def check_lines(run: StoppedRun, system: str) -> None:
    """The common fields on every line; the done counts are the samples'."""
    progress = run.of("progress")
    assert progress, run.events
    for line in progress:
        missing = (PROGRESS | PROGRESS_EXTRA.get(system, set())) - line.keys()
        assert not missing, f"{system} progress lacks {missing}: {line}"
        assert "late" not in line
    done = run.done
    missing = (DONE | DONE_EXTRA.get(system, set())) - done.keys()
    assert not missing, f"{system} done lacks {missing}: {done}"
    assert "late" not in done
    assert set(done["latency"]) == LATENCY
    r = run.records
    status = r["status"]
    assert done["completed"] == len(r) > 0
    assert done["sent"] == int(np.count_nonzero(r["sent_ns"] > 0))
    for key, code in [
        ("ok", OK),
        ("timeouts", TIMEOUT),
        ("drops", DROP),
        ("errors", ERROR),
        ("late_replies", LATE),
    ]:
        assert done[key] == int(np.count_nonzero(status == code)), (key, done)
    assert done["latency"]["count"] == int(np.count_nonzero(status == OK))  # no warm-up
    assert done["late_sends"] == late_sends(r, late_ms=1.0)
    # The last progress line came before the end: its counts are no more than done's.
    for key in COUNTS:
        assert progress[-1][key] <= done[key], key


def late_sends(r: np.ndarray, late_ms: float) -> int:
    sent = r[r["sent_ns"] > 0]
    lateness_ns = sent["sent_ns"].astype(np.int64) - sent["intended_ns"].astype(np.int64)
    return int(np.count_nonzero(lateness_ns > late_ms * MS))


@pytest.fixture
def echo_server(start_server: StartServer) -> Server:
    return start_server("echo", {"threads": 0})


ECHO = {"driver": {"request_bytes": 16, "reply_bytes": 16}, "duration_s": 30, "seed": 1}


def test_open_loop_lines(
    knee_node: str, processes: Processes, tmp_path: Path, echo_server: Server
) -> None:
    schedule = {"kind": "poisson", "rate_per_s": 500}
    config = {"target": echo_server.addr, "schedule": schedule, **ECHO}
    run = run_until_progress(knee_node, processes, tmp_path, "echo", config)
    check_lines(run, "echo")
    assert run.done["target_rate_per_s"] == 500
    assert all(p["target_rate_per_s"] == 500 for p in run.of("progress"))
    r = run.records
    assert run.done["bytes_tx"] == int(r["bytes_out"].sum())
    assert run.done["bytes_rx"] == int(r["bytes_in"].sum())


def test_closed_loop_lines(
    knee_node: str, processes: Processes, tmp_path: Path, echo_server: Server
) -> None:
    schedule = {"kind": "closed", "clients": 2, "think_ms": 2}
    config = {"target": echo_server.addr, "schedule": schedule, **ECHO}
    run = run_until_progress(knee_node, processes, tmp_path, "echo", config)
    check_lines(run, "echo")
    assert run.done["target_rate_per_s"] is None
    assert run.done["bytes_tx"] == int(run.records["bytes_out"].sum())


def test_chat_lines(
    knee_node: str, processes: Processes, tmp_path: Path, start_server: StartServer
) -> None:
    replica = start_server("chat", {"replica": 0, "sqlite_path": str(tmp_path / "chat.db")})
    config = {"replicas": [replica.addr], "clients": 2, "think_ms": 5, "duration_s": 30}
    run = run_until_progress(knee_node, processes, tmp_path, "chat", config)
    # One healthy replica: every request went in one attempt, so the sample's send time is
    # its first attempt's, which late_sends judges.
    assert (run.records["arg"] == 1).all()
    check_lines(run, "chat")
    assert run.done["retries"] == 0


def test_share_lines(
    knee_node: str, processes: Processes, tmp_path: Path, start_server: StartServer
) -> None:
    index = start_server("share", {"role": "index", "index": "concurrent"})
    peer_config = {
        "role": "peer",
        "index": "none",
        "share_dir": str(tmp_path / "peer-0"),
        "peer_index": 0,
        "files": 3,
        "file_bytes": 4096,
        "seed": 1,
    }
    peer = start_server("share", peer_config)
    peer.wait_stats(lambda e: e.get("files_ready") is True, timeout_s=30)
    config = {
        "peers": [peer.addr],
        "index": index.addr,
        "peer_index": 0,
        "phases": ["register"],
        "ops": 10_000_000,  # more than fit before the stop
        "duration_s": 30,
    }
    run = run_until_progress(knee_node, processes, tmp_path, "share", config)
    check_lines(run, "share")
    assert run.done["late_sends"] == 0  # an operation's intended time is its send
    assert run.done["bytes_tx"] == int(run.records["bytes_out"].sum())


def test_stream_lines_and_real_counts(
    knee_node: str, processes: Processes, tmp_path: Path, start_server: StartServer
) -> None:
    """Two services, one fast and one whose replies take 3 s: the fast one answers, the slow
    one holds its requests until the stop's 1 s grace is over, so they are drops (their
    10 s timeout did not pass), and done says so."""

    def service(delay_ms: float) -> Server:
        params = {
            "streams": [[128, 64]],
            "delay": {"kind": "fixed", "ms": delay_ms},
            "loss": {"kind": "bernoulli", "p": 0.0},
            "seed": 1,
        }
        return start_server("stream", params)

    fast, slow = service(1.0), service(3000.0)
    config = {
        "services": [fast.addr, slow.addr],
        "stream": 0,
        "blocks_per_frame": 32,
        "frames": 10,
        "outstanding": 2,
        "timeout_ms": 10_000,
        "duration_s": 30,
    }
    run = run_until_progress(knee_node, processes, tmp_path, "stream", config)
    check_lines(run, "stream")
    done, r = run.done, run.records
    assert done["drops"] == 2 and done["ok"] == 30, done  # the slow service's two slots
    assert set(r[r["status"] == DROP]["service"].tolist()) == {1}
    assert done["late_sends"] == 0  # a block request's intended time is its send
    assert done["timeouts"] == done["late_replies"] == 0
    assert done["bytes_tx"] == int(r["bytes_out"].sum())
    # Every datagram received is a recorded reply here (nothing stray or malformed).
    assert done["stray_replies"] == done["bad_replies"] == 0
    assert done["bytes_rx"] == int(r["bytes_in"].sum())
