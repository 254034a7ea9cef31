"""What the resources' analysis needs to know of a point's nodes, and the external
target's process tree (knee.hosts.listener), watched as the node "target"."""

from __future__ import annotations

from urllib.parse import urlsplit

from knee import systems
from knee.analysis.point import TARGET_NODE
from knee.config_values import opt_integer, subtable
from knee.hosts.cgroups import process_cpu_limit
from knee.hosts.listener import find_listener
from knee.params import Point
from knee.resources import usage as resource_usage
from knee.runner.state import RunState
from knee.stats.summary import Target


def nodes_seen(
    state: RunState,
    system: systems.System,
    plans: list[systems.NodePlan],
    where: dict[str, str],
) -> dict[str, resource_usage.NodeInfo]:
    """The point's nodes as knee.resources.usage sees them: each one's role, name in the
    system's words, CPU limit and pool."""
    nodes: dict[str, resource_usage.NodeInfo] = {}
    for plan in plans:
        pool = None
        if system.pool_key and plan.role == "serve":
            pool = opt_integer(subtable(plan.config, "server"), system.pool_key)
        nodes[plan.name] = resource_usage.NodeInfo(
            role=plan.role,
            label=systems.part_label(system, plan.name),
            cpu_cores=state.hosts.limits_of(plan.name, where[plan.name]).get("cpu_cores"),
            pool=pool or None,
            generator=plan.role == "load",
            host=where[plan.name],
        )
    return nodes


def watch_target(
    state: RunState, point: Point, system: systems.System, where: dict[str, str]
) -> Target | None:
    """Finds the process listening on the point's external target (knee.hosts.listener)
    and samples its tree's CPU as the node "target"; the point's `target` record: what was
    found, or why nothing was. None when the point has no external target."""
    url = system.external_target(point) if system.external_target else None
    if not url:
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netns_pid = None
    for name, host_name in where.items():  # the target as the generator's network sees it
        node = state.nodes.get(name)
        if node is not None and state.hosts.host_of(host_name).kind == "netns":
            netns_pid = node.pid
            break
    found = find_listener(parts.hostname or "127.0.0.1", port, netns_pid=netns_pid)
    if isinstance(found, str):
        state.event("target", point.index, TARGET_NODE, found)
        return {"found": False, "reason": found}
    state.monitor.add_tree(TARGET_NODE, found.root_pid)
    # Its cores, as the kernel limits them: its affinity (taskset, a cpuset) and its
    # cgroup's CPU quota (docker --cpus, systemd's CPUQuota), as for knee's own nodes.
    limit = process_cpu_limit(found.root_pid)
    detail = f"{found.name}, pid {found.root_pid}, {len(found.pids)} processes"
    if limit["cpu_cores"] is not None:
        detail += f", {limit['cpu_cores']:g} cores"
    state.event("target", point.index, TARGET_NODE, detail)
    return {
        "found": True,
        "name": found.name,
        "root_pid": found.root_pid,
        "pids": list(found.pids),
        "workers": found.workers,
        "cpus": limit["cpus"],
        "quota_cores": limit["quota_cores"],
        "cpu_cores": limit["cpu_cores"],
    }
