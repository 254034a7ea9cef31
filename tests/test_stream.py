"""The stream system over real processes: block services on UDP and the FrameAccessor."""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Processes, Server, StartServer

from knee.results import SAMPLE_DTYPE, read_sample_records
from knee.spec import SpecError, load_spec

MAGIC = int.from_bytes(b"KNST", "little")
REQUEST = struct.Struct("<IBBHIIQ")  # magic, version, kind, stream, frame, block, request id
REPLY_HEADER = struct.Struct("<IBBHIIQQQ")
BLOCK_BYTES = 768
OK, TIMEOUT, ERROR, LATE = 0, 1, 3, 4
FLAG_REDUNDANT, FLAG_RETRANSMISSION, FLAG_HEDGED = 1, 2, 4
#: One small stream: 8 x 4 blocks per frame.
STREAMS = [[128, 64]]
BLOCKS = 32


def service_params(delay_ms: float = 1.0, loss_p: float = 0.0, seed: int = 1) -> dict[str, Any]:
    return {
        "streams": STREAMS,
        "delay": {"kind": "fixed", "ms": delay_ms},
        "loss": {"kind": "bernoulli", "p": loss_p},
        "seed": seed,
    }


class ClientRun:
    def __init__(self, proc: subprocess.CompletedProcess[bytes], samples: Path) -> None:
        self.returncode = proc.returncode
        self.stderr = proc.stderr.decode(errors="replace")
        self.events = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.strip()]
        self.records = (
            read_sample_records(samples) if samples.exists() else np.zeros(0, SAMPLE_DTYPE)
        )

    @property
    def done(self) -> dict[str, Any]:
        (done,) = [e for e in self.events if e.get("event") == "done"]
        return done


@pytest.fixture
def run_client(knee_node: str, processes: Processes, tmp_path: Path) -> Any:
    """`run_client(servers, **options) -> ClientRun`: a bounded FrameAccessor run."""
    count = 0

    def run(servers: list[Server], **options: Any) -> ClientRun:
        nonlocal count
        count += 1
        config: dict[str, Any] = {
            "services": [s.addr for s in servers],
            "stream": 0,
            "blocks_per_frame": BLOCKS,
            "frames": 10,
            "timeout_ms": 50,
            "duration_s": 60,
            "samples_path": str(tmp_path / f"client{count}.bin"),
            "histogram_path": str(tmp_path / f"client{count}.csv"),
        }
        config.update(options)
        proc = processes.spawn(
            [knee_node, "load", "stream", "--name", "client", "--config", json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = proc.communicate(timeout=120)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        result = ClientRun(done, Path(config["samples_path"]))
        assert result.returncode == 0, result.stderr
        return result

    return run


def final_stats(server: Server) -> dict[str, Any]:
    """The service's counts as of its stop (its last `stats` line)."""
    assert server.stop() == 0
    return server.stdout.wait_for(lambda e: e.get("event") == "stats" and e.get("final"), 5.0)


def wilson_interval(k: int, n: int, z: float = 3.29) -> tuple[float, float]:
    """Binomial confidence interval (Wilson score; z = 3.29 is 99.9 %)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_measured_drop_rate_matches_the_emulated_rate(
    start_server: StartServer, run_client: Any
) -> None:
    p = 0.1
    server = start_server("stream", service_params(delay_ms=1.0, loss_p=p, seed=7))
    run = run_client([server], frames=60, outstanding=8)
    statuses = run.records["status"]
    n, lost = len(statuses), int(np.count_nonzero(statuses == TIMEOUT))
    assert n == run.done["sent"] == 60 * BLOCKS
    lo, hi = wilson_interval(lost, n)
    assert lo <= p <= hi, (lost, n, lo, hi)
    stats = final_stats(server)
    late, stray = int(np.count_nonzero(statuses == LATE)), run.done["stray_replies"]
    # What the service dropped is exactly what the client saw lost; every reply it sent
    # arrived, in time (ok) or after its timeout (late), never counted twice. (A reply later
    # than the 1 s late window would be stray: its request counts as lost.)
    assert stats["dropped"] == lost - stray
    assert stats["replied"] == int(np.count_nonzero(statuses == OK)) + late + stray
    assert stats["received"] == n and stats["malformed"] == 0
    assert run.done["blocks_missing"] == lost  # no retransmission: a lost block is missing


def most_in_flight(records: np.ndarray) -> int:
    """The most requests in flight at once: each answered request from its send to its
    reply, the recorded timestamps' own order (no speed is judged)."""
    ok = records[records["status"] == OK]
    starts, ends = np.sort(ok["sent_ns"]), np.sort(ok["received_ns"])
    # At each send: the requests sent up to it (itself included) minus those answered before.
    return int(np.max(np.arange(1, len(starts) + 1) - np.searchsorted(ends, starts, "right")))


def test_parallel_keeps_every_service_busy_at_once(
    start_server: StartServer, run_client: Any
) -> None:
    """What makes parallel faster, judged as an outcome: its blocks are in flight on every
    service at the same time (serial: one at a time), each frame's blocks spread over the
    services, and both fetch every frame in order."""
    servers = [start_server("stream", service_params(2.0, 0.05, seed=i)) for i in range(4)]
    serial = run_client(servers[:1], frames=8, outstanding=1)
    parallel = run_client(servers, frames=8, service_ids=[0, 1, 2, 3], outstanding=1)
    assert parallel.done["frames"] == serial.done["frames"] == 8
    for run in (serial, parallel):
        r = run.records
        # Every block of every frame was asked for, frames in order (a frame's first request
        # leaves no earlier than the previous frame's).
        assert set(zip(r["client"].tolist(), r["arg"].tolist(), strict=True)) == {
            (f, b) for f in range(8) for b in range(BLOCKS)
        }
        first_sent = [int(r["sent_ns"][r["client"] == f].min()) for f in range(8)]
        assert first_sent == sorted(first_sent)
    assert most_in_flight(serial.records) == 1, "serial: one request in flight"
    assert most_in_flight(parallel.records) > 1, "parallel: services answered side by side"
    assert most_in_flight(parallel.records) <= 4, "at most `outstanding` per service"
    # Each frame's blocks spread over every service.
    p = parallel.records
    for f in range(8):
        assert set(p["service"][p["client"] == f].tolist()) == {0, 1, 2, 3}, f


def test_a_reply_after_its_timeout_is_late_not_dropped_and_received(
    start_server: StartServer, run_client: Any
) -> None:
    server = start_server("stream", service_params(delay_ms=40.0))
    run = run_client([server], frames=1, timeout_ms=10)
    statuses = run.records["status"]
    assert len(statuses) == BLOCKS == run.done["sent"]
    assert np.all(statuses == LATE), statuses
    assert np.all(run.records["received_ns"] > run.records["sent_ns"] + 10_000_000)
    assert run.done["timeouts"] == 0 and run.done["late_replies"] == BLOCKS
    assert run.done["blocks_missing"] == BLOCKS  # late data does not fill the frame
    assert final_stats(server)["dropped"] == 0


def test_retransmission_fills_every_block(start_server: StartServer, run_client: Any) -> None:
    server = start_server("stream", service_params(delay_ms=1.0, loss_p=0.3, seed=3))
    run = run_client([server], frames=3, retransmit=20, adaptive_timeout=True, min_rto_ms=5)
    assert run.done["complete_frames"] == 3 and run.done["blocks_missing"] == 0
    flags, statuses = run.records["flags"], run.records["status"]
    retried = (flags & FLAG_RETRANSMISSION) != 0
    assert retried.any() and run.done["retransmissions"] == int(retried.sum())
    # Every block of every frame arrived exactly once as useful data.
    useful = run.records[(statuses == OK) & ((flags & FLAG_REDUNDANT) == 0)]
    pairs = set(zip(useful["client"].tolist(), useful["arg"].tolist(), strict=True))
    assert len(useful) == len(pairs) == 3 * BLOCKS


def test_hedging_sends_to_two_services_and_takes_the_first_reply(
    start_server: StartServer, run_client: Any
) -> None:
    fast = start_server("stream", service_params(delay_ms=1.0, seed=1))
    slow = start_server("stream", service_params(delay_ms=25.0, seed=2))
    run = run_client([fast, slow], frames=2, hedge=True, outstanding=4, timeout_ms=500)
    r = run.records
    hedged = r[(r["flags"] & FLAG_HEDGED) != 0]
    assert len(hedged) >= 2 and run.done["hedged"] == len(hedged) // 2
    by_block: dict[tuple[int, int], list[np.void]] = {}
    for rec in hedged:
        by_block.setdefault((int(rec["client"]), int(rec["arg"])), []).append(rec)
    for copies in by_block.values():
        assert len(copies) == 2
        assert {int(c["service"]) for c in copies} == {0, 1}, "the two copies go to two services"
        first, second = sorted(copies, key=lambda c: int(c["received_ns"]))
        assert first["status"] == OK and not first["flags"] & FLAG_REDUNDANT
        assert second["flags"] & FLAG_REDUNDANT, "the slower copy is redundant"
        assert int(first["service"]) == 0
    assert run.done["complete_frames"] == 2


def request(stream: int, frame: int, block: int, request_id: int, **over: int) -> bytes:
    fields = dict(magic=MAGIC, version=1, kind=0)
    fields.update(over)
    return REQUEST.pack(
        fields["magic"], fields["version"], fields["kind"], stream, frame, block, request_id
    )


def test_malformed_datagrams_are_ignored_and_counted(start_server: StartServer) -> None:
    server = start_server("stream", service_params(delay_ms=0.0))
    host, port = server.addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    malformed = [
        b"",
        b"KN",
        request(0, 0, 0, 1)[:-1],  # short
        request(0, 0, 0, 1) + b"x",  # long
        request(0, 0, 0, 1, magic=0xDEADBEEF),
        request(0, 0, 0, 1, version=9),
        request(0, 0, 0, 1, kind=200),
        os.urandom(24),
        os.urandom(5000),  # longer than the service reads: truncated, then refused
    ]
    if REQUEST.unpack(malformed[7])[0] == MAGIC:  # pragma: no cover - 1 in 2^32
        malformed[7] = b"\0" * 24
    for datagram in malformed:
        sock.sendto(datagram, (host, int(port)))
    # Well formed, huge numbers: no such stream or block -> an error reply, not a crash.
    sock.sendto(request(65535, 2**32 - 1, 2**32 - 1, 2**64 - 1), (host, int(port)))
    reply = sock.recv(4096)
    assert len(reply) == REPLY_HEADER.size
    assert REPLY_HEADER.unpack(reply)[2] == 1 and REPLY_HEADER.unpack(reply)[6] == 2**64 - 1
    # The service keeps serving: a valid request gets its block.
    sock.sendto(request(0, 5, BLOCKS - 1, 77), (host, int(port)))
    reply = sock.recv(4096)
    assert len(reply) == REPLY_HEADER.size + BLOCK_BYTES
    magic, _, status, stream, frame, block, rid, _, _ = REPLY_HEADER.unpack_from(reply)
    assert (magic, status, stream, frame, block, rid) == (MAGIC, 0, 0, 5, BLOCKS - 1, 77)
    sock.close()
    assert server.alive()
    stats = final_stats(server)
    assert stats["malformed"] == len(malformed)
    assert stats["bad_requests"] == 1 and stats["replied"] == 2
    assert "malformed datagram" in server.stderr()


QUICK_SPEC = """
[experiment]
name = "stream-test"
system = "stream"

[server]
services = [{services}]

[driver]
stream = 0
frames = 2

[load]
schedule = "closed"
timeout_ms = 30
duration_s = 30
warmup_s = 0
"""


@pytest.mark.parametrize(
    ("services", "driver", "key", "message"),
    [
        (
            '{ delay = "fixed", delay_ms = 1, colour = 3 }',
            "",
            "server.services[0].colour",
            "unknown",
        ),
        ('{ delay = "lognormal", median_ms = -1 }', "", "median_ms", ">= 0"),
        ('{ loss = "bernoulli", loss_p = 2 }', "", "loss_p", "<= 1"),
        ('{ name = "a" }, { name = "a" }', "", "services[1].name", "used twice"),
        ("{}", "outstanding = 4", "driver.mode", "serial means"),
        ("{}", "service = 3", "driver.service", "no service 3"),
        ('{ name = "a" }', 'mode = "parallel"\nhedge = true', "driver.hedge", "two services"),
    ],
)
def test_spec_rules_name_the_bad_key(
    tmp_path: Path, services: str, driver: str, key: str, message: str
) -> None:
    text = QUICK_SPEC.replace("{services}", services).replace("frames = 2", "frames = 2\n" + driver)
    path = tmp_path / "spec.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert key in err.value.key and message in err.value.message, str(err.value)
