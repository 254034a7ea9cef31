"""This machine, on 127.0.0.1: nodes are plain child processes (knee's behaviour without
hosts)."""

from __future__ import annotations

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
