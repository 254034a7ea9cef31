"""What a host is to the runner: somewhere knee-node processes start, with an address the
other nodes reach them at, limits on their CPU and memory, and a clean-up.

Three kinds (docs/hosts.md):
- ``local``: this machine's loopback, today's behaviour (`knee.hosts.local`);
- ``netns``: an emulated host, a network namespace knee makes, behind a veth into a bridge
  that lives in a namespace of its own (`knee.hosts.netns`);
- ``ssh``: a real machine reached with OpenSSH's client (`knee.hosts.ssh`).

A node is always a local process with stdout/stderr pipes the runner reads: the node itself
(local, netns) or the ssh client that runs it remotely. Its stdin is a pipe too: an ssh host
uses it as the node's lifeline and control channel (``signal``).
"""

from __future__ import annotations

import signal as signals
import subprocess
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


class HostError(RuntimeError):
    """A host could not be set up or used; str() is one line naming the host."""


class Unsupported(HostError):
    """This machine cannot give what the spec asks (a kernel feature, a permission, a
    program): the spec is refused before anything starts (`knee run` exits 2)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one node or of one host (every node on it together)."""

    cpu_cores: float | None = None  # CPU quota as a share of cores: 0.25 = a quarter core
    cpuset: str | None = None  # cores the processes may run on, e.g. "1" or "0-1"
    memory_bytes: int | None = None  # resident memory limit

    def empty(self) -> bool:
        return self.cpu_cores is None and self.cpuset is None and self.memory_bytes is None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


#: The commands an ssh host's lifeline understands, one per line on the node's stdin.
LIFELINE_SIGNALS: dict[int, str] = {
    signals.SIGTERM: "TERM",
    signals.SIGKILL: "KILL",
    signals.SIGSTOP: "STOP",
    signals.SIGCONT: "CONT",
}


class Host(ABC):
    """One host of a run. The runner calls setup() before the first point and teardown()
    on every way out (end, failure, Ctrl-C)."""

    kind: str = ""
    #: A node on it is a process of another machine: it reads no file of this one (its
    #: config goes inline), and its CPU and memory come from its own `usage` lines.
    remote: bool = False
    #: This host's CLOCK_MONOTONIC minus the runner's, in ns (None: the same clock). A
    #: remote recorder's sample times are put on the run's time axis with it.
    clock_offset_ns: int | None = None

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits  # for all the nodes on this host together

    @property
    @abstractmethod
    def address(self) -> str:
        """The IP address nodes on this host listen on and are reached at."""

    def setup(self) -> None:  # noqa: B027 - most hosts need nothing
        """Makes the host ready (namespaces, links, a copy of knee-node); idempotent."""

    def teardown(self) -> None:  # noqa: B027
        """Removes everything setup() made. Never raises for what is already gone."""

    def binary(self, local_binary: str) -> str:
        """The path of knee-node as a process on this host sees it."""
        return local_binary

    @abstractmethod
    def command(self, argv: list[str]) -> list[str]:
        """The local command that runs ``argv`` (knee-node and its arguments) on this host,
        keeping its stdout and stderr on the returned process's pipes."""

    def node_path(self, local: Path) -> str:
        """Where a node on this host writes a file the runner wants at ``local`` (its
        samples, its histogram)."""
        return str(local)

    def scratch_path(self, local: Path) -> str:
        """The point's scratch folder (a system's files, ``{scratch}``) as a node on this
        host sees it."""
        return str(local)

    def fetch(self, node_path: str, local: Path) -> None:  # noqa: B027
        """Brings a file a node wrote at ``node_path`` to ``local`` (after the node ended)."""

    def signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        """Sends ``sig`` to the node run by ``proc``."""
        proc.send_signal(sig)

    def usage(self, proc: subprocess.Popen[bytes]) -> dict[str, Any] | None:
        """A remote node's ``cpu_s`` and ``rss_bytes`` as this host reads them (a docker
        host: from the container's cgroup), or None: its own `usage` lines say."""
        return None

    def interface_bytes(self) -> dict[str, int] | None:
        """rx_bytes and tx_bytes of the host's own network interface, or None where the
        host has none of its own (local: loopback is shared by every process)."""
        return None

    def describe(self) -> dict[str, Any]:
        """What env.json records of this host."""
        return {
            "name": self.name,
            "kind": self.kind,
            "address": self.address,
            "limits": self.limits.as_dict(),
        }
