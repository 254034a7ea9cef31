"""Fixtures that run real knee-node processes on 127.0.0.1.

Every process is started through the `processes` registry and stopped by its PID when the
test ends (SIGTERM, then SIGKILL), whatever the test's outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knee.results import SAMPLE_DTYPE, read_sample_records
from knee.runner.node import node_binary

REPO = Path(__file__).resolve().parents[1]
# `knee` commands started by tests run this source tree too, not an installed copy.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH", "")) if p
)

#: Seconds a server gets to print its `ready` line.
READY_TIMEOUT_S = 10.0
#: Seconds a bounded load run may take before the test fails (they take ~1-2 s).
LOAD_TIMEOUT_S = 30.0

Event = dict[str, Any]


def _tree_binary() -> None:
    """Tests run this tree's knee-node (built now if stale), not an installed copy, unless
    $KNEE_NODE names one; every `knee` the tests start inherits the choice."""
    if os.environ.get("KNEE_NODE") or shutil.which("cargo") is None:
        return
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "--bin", "knee-node"],
        cwd=REPO,
        check=True,
        timeout=1800,
    )
    os.environ["KNEE_NODE"] = str(REPO / "target" / "release" / "knee-node")


_tree_binary()


#: Set by scripts/test when it runs as root, after installing ip, tc, nft and OpenSSH, and
#: implied in CI (CI=true, as for PostgreSQL in chat_db.py): then a host test that cannot
#: run is a failure, not a skip (nothing is silently left out). Run CI as root.
REQUIRE_HOSTS = os.environ.get("KNEE_TEST_REQUIRE_HOSTS") == "1" or os.environ.get("CI") == "true"


def unavailable(reason: str) -> None:
    """Skips a test that needs what this machine lacks (root, a kernel feature, sshd), or
    fails it where every host test must run (KNEE_TEST_REQUIRE_HOSTS=1 or CI=true)."""
    if REQUIRE_HOSTS:
        why = "KNEE_TEST_REQUIRE_HOSTS=1" if os.environ.get("CI") != "true" else "CI=true"
        pytest.fail(f"required under {why}, but: {reason}")
    pytest.skip(reason)


def need_engine(hosts: str, check: Callable[[], object]) -> None:
    """`unavailable` unless this is root (a container engine's socket, its containers'
    cgroups) and `check` (the engine's own, raising `Unsupported`) passes."""
    from knee.hosts.base import Unsupported

    if os.geteuid() != 0:
        unavailable(f"{hosts} need root (the daemon's socket, the containers' cgroups)")
    try:
        check()
    except Unsupported as e:
        unavailable(str(e))


@pytest.fixture(scope="session")
def knee_node() -> str:
    """Path of the knee-node binary the tests run."""
    try:
        return node_binary()
    except FileNotFoundError:
        pytest.fail("knee-node not found: install knee, build it with cargo, or set KNEE_NODE")


class Processes:
    """Processes started by one test; `stop_all` ends each by its PID."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc

    def spawn_json(
        self, args: list[str], stderr_path: Path
    ) -> tuple[subprocess.Popen[bytes], JsonLines]:
        """A knee-node command whose JSON lines are read as they come, its stderr to a file."""
        with open(stderr_path, "wb") as stderr:
            proc = self.spawn(args, stdout=subprocess.PIPE, stderr=stderr)
        return proc, JsonLines(proc.stdout)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> int:
        """SIGTERM by PID, SIGKILL if still alive after the grace period; the exit code."""
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=grace_s)
            except ProcessLookupError:
                proc.wait(timeout=grace_s)
        return proc.returncode

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def processes() -> Iterator[Processes]:
    registry = Processes()
    yield registry
    registry.stop_all()


class JsonLines:
    """Reads a process's stdout on a thread: one JSON object per line, kept in order."""

    def __init__(self, stream: Any) -> None:
        self.events: list[Event] = []
        self.garbage: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        try:
            for raw in stream:
                try:
                    event = json.loads(raw)
                except json.JSONDecodeError:
                    with self._cond:
                        self.garbage.append(raw.decode(errors="replace"))
                    continue
                with self._cond:
                    self.events.append(event)
                    self._cond.notify_all()
        except (ValueError, OSError):
            pass  # the stream was closed by the teardown
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[Event], bool], timeout_s: float, skip: int = 0) -> Event:
        """The first event (after the first `skip` matching ones) satisfying `pred`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                matching = [e for e in self.events if pred(e)]
                if len(matching) > skip:
                    return matching[skip]
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    why = "stdout closed" if self._eof else f"none within {timeout_s:g} s"
                    raise AssertionError(f"no such event ({why}); events: {self.events}")
                self._cond.wait(left)

    def snapshot(self) -> list[Event]:
        with self._cond:
            return list(self.events)


@dataclass
class Server:
    """A running `knee-node serve`."""

    proc: subprocess.Popen[bytes]
    addr: str
    pid: int
    stderr_path: Path
    stdout: JsonLines

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        """Everything the server logged so far (complete once it is stopped)."""
        return self.stderr_path.read_text(errors="replace")

    def wait_stderr(self, text: str, timeout_s: float = 5.0) -> str:
        """The server's log once it contains `text`."""
        deadline = time.monotonic() + timeout_s
        while True:
            log = self.stderr()
            if text in log:
                return log
            if time.monotonic() >= deadline:
                raise AssertionError(f"{text!r} not logged within {timeout_s:g} s; log:\n{log}")
            time.sleep(0.01)

    def wait_stats(self, pred: Callable[[Event], bool], timeout_s: float = 5.0) -> Event:
        return self.stdout.wait_for(lambda e: e.get("event") == "stats" and pred(e), timeout_s)

    def stop(self) -> int:
        """Stops the server (SIGTERM by PID); its exit code. `stderr()` is then complete."""
        return Processes.stop(self.proc)


StartServer = Callable[..., Server]


@pytest.fixture
def start_server(knee_node: str, processes: Processes, tmp_path: Path) -> StartServer:
    """`start_server(system, server_params, max_frame_bytes=None, **limits) -> Server`; the
    limits are serve config keys (`max_connections`, `read_timeout_ms`, ...)."""
    count = 0

    def start(
        system: str,
        server: dict[str, Any] | None = None,
        max_frame_bytes: int | None = None,
        **limits: Any,
    ) -> Server:
        nonlocal count
        count += 1
        config: dict[str, Any] = {"server": server or {}, "listen": "127.0.0.1:0", **limits}
        if max_frame_bytes is not None:
            config["max_frame_bytes"] = max_frame_bytes
        stderr_path = tmp_path / f"srv{count}.stderr.log"
        proc, lines = processes.spawn_json(
            [knee_node, "serve", system, "--name", "srv", "--config", json.dumps(config)],
            stderr_path,
        )
        try:
            ready = lines.wait_for(lambda e: e.get("event") == "ready", READY_TIMEOUT_S)
        except AssertionError as e:
            Processes.stop(proc)
            raise AssertionError(f"{e}\nserver log:\n{stderr_path.read_text()}") from None
        assert ready["pid"] == proc.pid
        return Server(proc, ready["addr"], proc.pid, stderr_path, lines)

    return start


def constant_offsets(rate_per_s: float, duration_s: float) -> list[int]:
    """The intended offsets (ns from the start) of a constant schedule inside `duration_s`,
    as knee-node places them (load/schedule.rs: request i at trunc(i * 1e9 / rate); the
    harness sends those before trunc(duration * 1e9)), in the same f64 arithmetic, so the
    count of scheduled requests is exact."""
    gap_ns, end_ns = 1e9 / rate_per_s, int(duration_s * 1e9)
    offsets: list[int] = []
    while (at := int(len(offsets) * gap_ns)) < end_ns:
        offsets.append(at)
    return offsets


@dataclass
class LoadRun:
    """A finished `knee-node load`: its stdout events, log and sample records."""

    returncode: int
    events: list[Event]
    stderr: str
    records: np.ndarray
    samples_path: Path
    histogram_path: Path
    config: dict[str, Any] = field(default_factory=dict)
    #: The process's life, from its spawn to its exit, as the test measured it (not the
    #: node's own `elapsed_s`, which starts at its start line, after its first connects).
    wall_s: float = 0.0

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def start_ns(self) -> int:
        return int(self.of("start")[0]["start_ns"])

    @property
    def done(self) -> Event:
        (done,) = self.of("done")
        return done


@dataclass
class LoadConfigs:
    """Writes load configs with sample and histogram paths in the test's directory."""

    tmp_path: Path
    count: int = 0

    def make(self, target: str, schedule: dict[str, Any], **options: Any) -> dict[str, Any]:
        self.count += 1
        config: dict[str, Any] = {
            "target": target,
            "schedule": schedule,
            "timeout_ms": 5000,
            "seed": 1,
            "samples_path": str(self.tmp_path / f"gen{self.count}.samples.bin"),
            "histogram_path": str(self.tmp_path / f"gen{self.count}.histogram.csv"),
        }
        config.update(options)
        if "duration_s" not in config and "requests" not in config:
            assert schedule["kind"] == "steps", "every test load must be bounded"
        return config


@pytest.fixture
def load_configs(tmp_path: Path) -> LoadConfigs:
    return LoadConfigs(tmp_path)


RunLoad = Callable[..., LoadRun]


@pytest.fixture
def run_load(knee_node: str, processes: Processes, load_configs: LoadConfigs) -> RunLoad:
    """`run_load(system, target, schedule, check=True, timeout_s=30, **options) -> LoadRun`:
    runs a bounded load generator to completion. Options are load config keys (`requests`,
    `duration_s`, `driver`, `seed`, ...). With `check`, a non-zero exit fails the test."""

    def run(
        system: str,
        target: str,
        schedule: dict[str, Any],
        check: bool = True,
        timeout_s: float = LOAD_TIMEOUT_S,
        **options: Any,
    ) -> LoadRun:
        config = load_configs.make(target, schedule, **options)
        spawned = time.monotonic()
        proc = processes.spawn(
            [knee_node, "load", system, "--name", "gen", "--config", json.dumps(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            Processes.stop(proc)
            out, err = proc.communicate()
            pytest.fail(f"load did not end within {timeout_s:g} s; log:\n{err.decode()}")
        wall_s = time.monotonic() - spawned  # communicate returns once it exited
        stderr = err.decode(errors="replace")
        if check:
            assert proc.returncode == 0, f"load exited with {proc.returncode}:\n{stderr}"
        events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        samples_path = Path(config["samples_path"])
        records = (
            read_sample_records(samples_path)
            if samples_path.exists()
            else np.zeros(0, dtype=SAMPLE_DTYPE)
        )
        return LoadRun(
            returncode=proc.returncode,
            events=events,
            stderr=stderr,
            records=records,
            samples_path=samples_path,
            histogram_path=Path(config["histogram_path"]),
            config=config,
            wall_s=wall_s,
        )

    return run
