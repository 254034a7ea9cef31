"""Resource exhaustion against every framed-TCP server (echo, matrix, chat, share): 10,000
idle connections, slowloris, a client that never reads, and a full disk under a load
generator and under `knee run`. Each case asserts that the server keeps serving a normal
client and that its memory and threads stay bounded (docs/limits.md); none asserts speed.

Stream is not here: its service is UDP (no connections to hold, no frames to trickle); its
bounds are in docs/limits.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from attack_clients import (
    SYSTEMS,
    MiB,
    close_all,
    heavy_request,
    never_read,
    open_idle,
    raise_open_files,
    served,
    server_params,
    slowloris,
    trickle,
    usage,
    wait_threads,
)
from conftest import Processes, RunLoad, Server, StartServer, unavailable
from wire_client import LENGTH, Client

from knee.results import SAMPLE_DTYPE, read_manifest, read_sample_records

IDLE_CONNECTIONS = 10_000
#: Small, so that the connections it admits (a thread each) cost the test little.
MAX_CONNECTIONS = 64
#: Short timeouts, so that each case takes seconds.
READ_TIMEOUT_MS = 1000
WRITE_TIMEOUT_MS = 1000
SLOW_CLIENTS = 20
#: What the slowloris clients announce: the default max_frame_bytes.
ANNOUNCED_BYTES = 16 * MiB
#: RSS a case may add to a server: far below what an unbounded buffer would cost (20 slow
#: clients x 16 MiB announced = 320 MiB; a never-read client: its requests' replies, 100s
#: of MiB), far above what a thread and a 64 KiB read buffer per connection cost.
RSS_GROWTH_BOUND_BYTES = 96 * MiB


def start(start_server: StartServer, tmp_path: Path, system: str, **limits: Any) -> Server:
    srv = start_server(system, server_params(system, tmp_path), **limits)
    if system == "share":
        srv.wait_stats(lambda e: e.get("files_ready") is True, timeout_s=20)
    return srv


def latest_stats(srv: Server, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return srv.wait_stats(pred, timeout_s=10)


@pytest.mark.parametrize("system", SYSTEMS)
def test_idle_connections_beyond_max_connections_are_refused_and_logged_once_a_second(
    start_server: StartServer, tmp_path: Path, system: str
) -> None:
    flood = IDLE_CONNECTIONS
    raise_open_files(flood + 1024)
    srv = start(start_server, tmp_path, system, max_connections=MAX_CONNECTIONS)
    before = usage(srv.pid)
    with Client(srv.addr) as normal:
        assert served(normal)
        socks = open_idle(srv.addr, flood)
        try:
            # The normal client holds one slot: every flood connection past the rest is refused.
            want = flood - (MAX_CONNECTIONS - 1)
            stats = latest_stats(srv, lambda e: e["refused"] >= want)
            assert stats["refused"] == want
            assert stats["connections"] == MAX_CONNECTIONS
            during = usage(srv.pid)
            assert served(normal), "the server stopped serving under the flood"
        finally:
            close_all(socks)
    # Once they are closed, their threads end: back to where the server began.
    assert wait_threads(srv.pid, before.threads) == before.threads
    assert during.rss_bytes - before.rss_bytes < RSS_GROWTH_BOUND_BYTES
    with Client(srv.addr) as later:
        assert served(later)
    srv.stop()
    refusals = [ln for ln in srv.stderr().splitlines() if "refusing a connection" in ln]
    # One line a second at most, each with the count it stood for: never one per refusal.
    assert 1 <= len(refusals) <= 10, refusals
    counted = [int(m) for ln in refusals for m in re.findall(r"and (\d+) more", ln)]
    flushed = [
        int(m)
        for ln in srv.stderr().splitlines()
        for m in re.findall(r"(\d+) more connections refused", ln)
    ]
    assert len(refusals) + sum(counted) + sum(flushed) == want


@pytest.mark.parametrize("system", SYSTEMS)
def test_slowloris_is_closed_by_the_read_timeout_and_the_server_goes_on(
    start_server: StartServer, tmp_path: Path, system: str
) -> None:
    srv = start(start_server, tmp_path, system, read_timeout_ms=READ_TIMEOUT_MS)
    before = usage(srv.pid)
    with Client(srv.addr) as normal:
        socks = slowloris(srv.addr, SLOW_CLIENTS, ANNOUNCED_BYTES)
        try:
            # Each trickles a byte a second; the read timeout (1 s) ends every one of them
            # within a few seconds, long before its frame could be whole.
            took_s = trickle(socks, timeout_s=15)
            assert took_s < 15, "slow clients were still connected after 15 s"
            assert served(normal)
        finally:
            close_all(socks)
    stats = latest_stats(srv, lambda e: e["timed_out"] >= SLOW_CLIENTS)
    assert stats["timed_out"] == SLOW_CLIENTS
    assert stats["bad_frames"] == 0
    assert wait_threads(srv.pid, before.threads) == before.threads
    assert usage(srv.pid).rss_bytes - before.rss_bytes < RSS_GROWTH_BOUND_BYTES
    assert "took longer than read_timeout_ms = 1000" in srv.stderr()


def test_slow_clients_announcing_large_frames_do_not_cost_their_size(
    start_server: StartServer, tmp_path: Path
) -> None:
    """While 20 clients hold frames announced at 16 MiB, the server holds no more than what
    arrived: before the reader grew its buffer as bytes came, this cost 320 MiB."""
    srv = start(start_server, tmp_path, "echo", read_timeout_ms=30_000)
    before = usage(srv.pid)
    socks = open_idle(srv.addr, 2 * SLOW_CLIENTS)
    try:
        for s in socks:
            s.sendall(LENGTH.pack(ANNOUNCED_BYTES) + b"\x01" * 1000)
        latest_stats(srv, lambda e: e["connections"] == 2 * SLOW_CLIENTS)
        held = usage(srv.pid)
        with Client(srv.addr) as normal:
            assert served(normal)
    finally:
        close_all(socks)
    assert held.rss_bytes - before.rss_bytes < RSS_GROWTH_BOUND_BYTES


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_client_that_never_reads_is_closed_by_the_write_timeout_in_bounded_memory(
    start_server: StartServer, tmp_path: Path, system: str
) -> None:
    srv = start(start_server, tmp_path, system, write_timeout_ms=WRITE_TIMEOUT_MS)
    request = heavy_request(system)
    before = usage(srv.pid)
    with Client(srv.addr) as normal:
        sock, sent_bytes = never_read(srv.addr, request, max_bytes=64 * MiB)
        try:
            stats = latest_stats(srv, lambda e: e["timed_out"] >= 1)
            during = usage(srv.pid)
            assert stats["timed_out"] == 1
            assert served(normal), "the server stopped serving beside a stalled client"
        finally:
            sock.close()
    assert sent_bytes > 0
    assert during.rss_bytes - before.rss_bytes < RSS_GROWTH_BOUND_BYTES
    assert wait_threads(srv.pid, before.threads) == before.threads
    assert "replies not taken within write_timeout_ms" in srv.stderr()


# --- a full disk --------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Any:
    """A 1 MiB tmpfs mounted in the test's directory (root only), unmounted at the end."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        unavailable(f"mounting a tmpfs needs root: {e}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False, timeout=30)


def test_a_full_disk_fails_the_load_with_one_line_and_keeps_the_samples_readable(
    start_server: StartServer, run_load: RunLoad, small_tmpfs: Path
) -> None:
    srv = start_server("echo")
    samples_path = small_tmpfs / "gen.samples.bin"
    # 96 B a sample: 30,000 samples are 2.9 MB, three times the disk.
    run = run_load(
        "echo",
        srv.addr,
        {"kind": "constant", "rate_per_s": 20_000},
        check=False,
        requests=30_000,
        samples_path=str(samples_path),
    )
    assert run.returncode == 2, run.stderr
    errors = [ln for ln in run.stderr.splitlines() if "No space left on device" in ln]
    assert len(errors) >= 1, run.stderr
    assert "writing samples" in errors[-1]
    records = read_sample_records(samples_path)
    assert records.dtype == SAMPLE_DTYPE
    # What fit is there, whole and in order; the reader drops a partial last record.
    assert 1000 < len(records) < 30_000
    assert (records["request_id"][1:] > records["request_id"][:-1]).all()
    assert srv.alive()


def test_knee_run_on_a_full_disk_fails_with_a_message_and_leaves_a_readable_run(
    small_tmpfs: Path, processes: Processes, tmp_path: Path
) -> None:
    spec = tmp_path / "full.toml"
    # 20,000 requests a second for 2 s: 3.8 MB of samples, more than the disk holds.
    spec.write_text(
        '[experiment]\nname = "full"\nsystem = "echo"\n\n'
        '[load]\nschedule = "poisson"\nrate_per_s = 20000\nduration_s = 2\nwarmup_s = 0\n'
    )
    out = small_tmpfs / "runs"
    proc = processes.spawn(
        [sys.executable, "-m", "knee.cli", "run", str(spec), "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, err = proc.communicate(timeout=120)
    stderr = err.decode(errors="replace")
    assert proc.returncode == 3, stderr
    assert "Traceback" not in stderr, stderr
    assert "No space left on device" in stderr.splitlines()[0], stderr
    (run_dir,) = out.iterdir()
    assert f"writing the run directory {run_dir} failed" in stderr
    # What was written is readable: the plan, and the samples the load wrote before the
    # disk filled (the reader drops a partial last record).
    assert json.loads((run_dir / "plan.json").read_text())
    (raw,) = read_manifest(run_dir)
    records = read_sample_records(run_dir / raw.samples)
    assert len(records) > 1000
