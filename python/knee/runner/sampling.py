"""One sampling interval of the time series: each node's CPU, memory and counters, the
host's, and each emulated host's link."""

from __future__ import annotations

import time
from typing import Any

from knee import contract
from knee.analysis.point import TARGET_NODE, TARGET_ROLE
from knee.monitor import HOST_NODE, HOST_ROLE
from knee.resources import usage as resource_usage
from knee.runner.state import RunState

#: How often CPU and node counters go into the time series.
SAMPLE_INTERVAL_S = resource_usage.ROW_S


def sample(state: RunState, point: int) -> list[dict[str, Any]]:
    """Adds one interval's rows to the time series; returns them."""
    start = len(state.timeseries)
    t_s = state.t_s()
    for name, usage in state.monitor.sample().items():
        node = state.nodes.get(name)
        if node is None:
            if name == TARGET_NODE:  # the service knee measures but did not start
                target = {"t_s": t_s, "point": point, "node": name, "role": TARGET_ROLE, **usage}
                state.timeseries.append(target)
            continue
        counters = node.latest.get("stats") or node.latest.get("progress") or {}
        row: dict[str, Any] = {"t_s": t_s, "point": point, "node": name, "role": node.role}
        row.update(usage)
        if node.host.remote:  # the local process is the node's ssh client
            row["ssh_cpu_percent"] = row["cpu_percent"]
            # The ssh client's waits are not the node's; its host reports none: unknown.
            row["cpu_wait_percent"] = None
            remote = node.host.usage(node.proc) or node.latest.get("usage")
            row.update(_remote_usage(state, name, remote))
        limits = state.hosts.limits_of(name, node.host.name)
        if limits.get("cpu_cores"):
            # CPU % relative to what the node may use: 100 = its whole quota.
            row["cpu_quota_cores"] = limits["cpu_cores"]
            row["cpu_percent_of_quota"] = row["cpu_percent"] / limits["cpu_cores"]
        for key in contract.TIMESERIES_FIELDS:
            if key in counters:
                row[key] = counters[key]
        state.timeseries.append(row)
    host = state.monitor.host  # the same interval, host-wide: foreign CPU, steal, iowait
    if host is not None:
        state.timeseries.append(
            {"t_s": t_s, "point": point, "node": HOST_NODE, "role": HOST_ROLE, **host}
        )
    for name, counters in state.hosts.interface_rows().items():  # each host's own link
        state.timeseries.append(
            {
                "t_s": t_s,
                "point": point,
                "node": f"link:{name}",
                "role": resource_usage.LINK_ROLE,
                **counters,
            }
        )
    return state.timeseries[start:]


def _remote_usage(state: RunState, name: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    """A remote node's CPU % and memory from its host's `usage` lines (cumulative CPU s)."""
    if not usage:
        return {}
    now, cpu_s = time.monotonic(), float(usage.get("cpu_s", 0.0))
    before = state.remote_usage.get(name)
    state.remote_usage[name] = (now, cpu_s)
    cpu_percent = resource_usage.cpu_percent_between(before, (now, cpu_s))
    return {"rss_bytes": usage.get("rss_bytes"), "cpu_percent": cpu_percent}
