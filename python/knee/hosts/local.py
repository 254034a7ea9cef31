"""This machine, on 127.0.0.1: nodes are plain child processes (knee's behaviour without
hosts), of the knee-node binary `node_binary` finds (also the one an ssh host is sent)."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from knee.hosts.base import Host, Limits

LOOPBACK = "127.0.0.1"


class LocalHost(Host):
    kind = "local"

    def __init__(self, name: str = "local", limits: Limits | None = None) -> None:
        super().__init__(name, limits or Limits())

    @property
    def address(self) -> str:
        return LOOPBACK

    def command(self, argv: list[str]) -> list[str]:
        return list(argv)


def node_binary() -> str:
    """Path of knee-node: $KNEE_NODE, next to this Python's scripts, on PATH, or a build."""
    env = os.environ.get("KNEE_NODE")
    if env:
        return env
    candidates = [
        Path(sysconfig.get_path("scripts")) / "knee-node",
        Path(sys.prefix) / "bin" / "knee-node",
    ]
    found = shutil.which("knee-node")
    if found:
        candidates.append(Path(found))
    repo = Path(__file__).resolve().parents[3]
    candidates.append(repo / "target" / "release" / "knee-node")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise FileNotFoundError(
        "knee-node not found: install knee with `pip install .`, or set KNEE_NODE"
    )
