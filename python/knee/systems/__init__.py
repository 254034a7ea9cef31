"""The reference systems knee can run. Each module declares one System; this registry is
the only place that lists them."""

from __future__ import annotations

from importlib import import_module

from knee.systems.base import (
    NodePlan,
    System,
    default_topology,
    expected_requests,
    load_config,
    part_label,
    plan_nodes,
    server_config,
    target_rate_per_s,
)

#: Every system's module (each defines SYSTEM), one registration line each.
_MODULES = (
    "chat",
    "echo",
    "grpc",
    "http",
    "matrix",
    "share",
    "slices",
    "stream",
)

SYSTEMS: dict[str, System] = {
    s.name: s for s in (import_module(f"knee.systems.{m}").SYSTEM for m in _MODULES)
}

__all__ = [
    "SYSTEMS",
    "NodePlan",
    "System",
    "default_topology",
    "expected_requests",
    "load_config",
    "part_label",
    "plan_nodes",
    "server_config",
    "target_rate_per_s",
]
