"""The reference systems knee can run. Each module declares one System; this registry is
the only place that lists them."""

from __future__ import annotations

from knee.systems.base import (
    NodePlan,
    System,
    default_topology,
    expected_requests,
    load_config,
    server_config,
    target_rate_per_s,
)
from knee.systems.chat import CHAT
from knee.systems.echo import ECHO
from knee.systems.matrix import MATRIX
from knee.systems.share import SHARE
from knee.systems.stream import STREAM

SYSTEMS: dict[str, System] = {s.name: s for s in (CHAT, ECHO, MATRIX, SHARE, STREAM)}

__all__ = [
    "SYSTEMS",
    "NodePlan",
    "System",
    "default_topology",
    "expected_requests",
    "load_config",
    "server_config",
    "target_rate_per_s",
]
