"""One knee-node process started by the runner: its stdout events, its log, its stop."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from knee.config_values import ConfigTable
from knee.hosts.base import Host
from knee.hosts.local import LocalHost, node_binary

#: Lines of a node's stderr kept in memory to name a failure.
STDERR_TAIL_LINES = 20
#: Events kept waiting for the runner; a node prints about one per second.
EVENT_QUEUE_MAX = 10_000


class NodeFailed(RuntimeError):
    """A node exited when it should not have, or did not become ready."""

    def __init__(self, node: str, reason: str, stderr_tail: list[str]) -> None:
        self.node = node
        self.reason = reason
        self.stderr_tail = stderr_tail
        tail = "\n".join(f"    {line}" for line in stderr_tail) or "    (no output on stderr)"
        super().__init__(f"node {node} {reason}; its last stderr lines:\n{tail}")


class Node:
    """A started knee-node process, on its host (this machine's loopback by default).

    ``wrap`` turns the host's command into the one started here (e.g. joining the node's
    cgroups first, knee.hosts.cgroups.wrap); it must exec, so the pid stays the node's.
    """

    def __init__(
        self,
        name: str,
        role: str,
        system: str,
        config: ConfigTable,
        config_path: Path,
        log_path: Path,
        host: Host | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
        events_path: Path | None = None,
    ) -> None:
        self.name = name
        self.role = role
        self.host = host or LocalHost()
        text = json.dumps(config, indent=2)
        config_path.write_text(text)
        self.log_path = log_path
        self._log: BinaryIO | None = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        # Every stdout line as the node printed it (a system's own events: handoffs, ...).
        self._events_log: BinaryIO | None = (
            open(events_path, "ab") if events_path else None  # noqa: SIM115
        )
        binary = self.host.binary(node_binary())
        # A node on this machine reads the config file; a remote one gets it inline (configs
        # are a few kB; the kernel allows 128 kB per argument).
        config_arg = json.dumps(config) if self.host.remote else f"@{config_path}"
        cmd = self.host.command([binary, role, system, "--name", name, "--config", config_arg])
        if wrap is not None:
            cmd = wrap(cmd)
        # stdin is a pipe: an ssh host's lifeline and control channel (knee.hosts.ssh); a
        # local node never reads it.
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE,
        )
        self.pid = self.proc.pid
        self.events: queue.Queue[dict[str, Any]] = queue.Queue(EVENT_QUEUE_MAX)
        self.latest: dict[str, dict[str, Any]] = {}  # last event of each kind
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if self._events_log is not None:  # about a line a second: flushed as it comes
                self._events_log = _logged(self._events_log, raw)
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                self._stderr_tail.append(f"(stdout, not JSON) {raw.decode(errors='replace')}")
                continue
            self.latest[event.get("event", "?")] = event
            try:
                self.events.put_nowait(event)
            except queue.Full:
                pass  # `latest` still has it; the queue only feeds progress display

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            # The tail first: it names the node's failure even when its log cannot be written.
            self._stderr_tail.append(raw.decode(errors="replace").rstrip("\n"))
            if self._log is not None:
                self._log = _logged(self._log, raw)

    def stderr_tail(self) -> list[str]:
        return list(self._stderr_tail)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def failure(self, reason: str) -> NodeFailed:
        for t in self._readers:
            t.join(timeout=1.0)
        return NodeFailed(self.name, reason, self.stderr_tail())

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Waits for the node's `ready` line (a server's address)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "ready" in self.latest:
                return self.latest["ready"]
            if not self.alive():
                raise self.failure(f"exited with code {self.proc.returncode} before it was ready")
            time.sleep(0.01)
        raise self.failure(f"was not ready within {timeout_s:g} s")

    def signal(self, sig: int) -> None:
        """Sends a signal to the node, wherever it runs."""
        try:
            self.host.signal(self.proc, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL, and waits until the node is gone."""
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a remote node's lifeline did not answer
            self.proc.kill()
            self.proc.wait(timeout=5)

    def stop(self, grace_s: float = 3.0) -> int | None:
        """SIGTERM, then SIGKILL after the grace period. Returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        for t in self._readers:
            t.join(timeout=1.0)
        for log in (self._log, self._events_log):
            _close(log)
        return self.proc.returncode


def _logged(log: BinaryIO, raw: bytes) -> BinaryIO | None:
    """Appends `raw` to a node's log; None once the log cannot be written (a full disk): the
    node's lines then go on to the tail and the events, and the run fails on its own terms
    (the node's reason), not in a reader thread."""
    try:
        log.write(raw)
        log.flush()
    except OSError:
        _close(log)
        return None
    return log


def _close(log: BinaryIO | None) -> None:
    if log is None:
        return
    try:
        log.close()
    except OSError:
        pass  # its buffer could not be written (a full disk): what was written stays
