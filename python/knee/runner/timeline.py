"""The spec's event timeline applied to a running point: kill, stop, start, freeze or
resume a node (or the current primary) at its time."""

from __future__ import annotations

import signal

from knee import run_params
from knee.params import Point, TimelineEvent
from knee.runner.lifecycle import start_node, stop_node
from knee.runner.state import PointNodes, RunState
from knee.spec import PRIMARY


def current_primary(state: RunState, nodes: PointNodes) -> str | None:
    """The replica that believes it is primary, by the running, unfrozen replicas' latest
    ``primary`` events (the lowest-numbered if a split brain has two); None when none does
    (e.g. a failover is still under way)."""
    claims = []
    for name in nodes.plans:
        node = state.nodes.get(name)
        view = node.latest.get("primary") if node is not None else None
        if node is None or view is None or name in nodes.frozen or not node.alive():
            continue
        if view.get("primary") == view.get("replica"):
            claims.append((int(view["replica"]), name))
    return min(claims)[1] if claims else None


def apply_event(
    state: RunState, point: Point, nodes: PointNodes, event: TimelineEvent, system: str
) -> None:
    name, action = event["node"], event["action"]
    detail = f"at {event['at_s']:g} s"
    if name == PRIMARY:
        resolved = current_primary(state, nodes)
        if resolved is None:
            state.event(f"{action}_skipped", point.index, name, detail + ": no primary")
            _applied(state, nodes, event, "skipped: no replica is primary")
            return
        event, name = {**event, "resolved": resolved}, resolved
        detail += " (the primary)"
    node = state.nodes.get(name)
    if action == "start":
        if node is not None and node.alive():
            state.event("start_skipped", point.index, name, detail + ": already running")
            _applied(state, nodes, event, "skipped: already running")
            return
        if node is not None:
            stop_node(state, point.index, name)
        if name in nodes.addrs:  # back on the address its clients know
            nodes.configs[name] = {**nodes.configs[name], "listen": nodes.addrs[name]}
        nodes.ended.discard(name)
        state.event("start", point.index, name, detail)
        _applied(state, nodes, event, "applied")
        start_node(state, point, nodes, name, system)
        return
    if node is None or not node.alive():
        state.event(f"{action}_skipped", point.index, name, detail + ": not running")
        _applied(state, nodes, event, "skipped: not running")
        return
    if action in ("freeze", "resume"):
        if (action == "freeze") == (name in nodes.frozen):
            state.event(f"{action}_skipped", point.index, name, detail + ": already so")
            _applied(state, nodes, event, "skipped: already " + action[:6] + "d")
            return
        state.event(action, point.index, name, f"{detail}, pid {node.pid}")
        _applied(state, nodes, event, "applied")
        node.signal(signal.SIGSTOP if action == "freeze" else signal.SIGCONT)
        (nodes.frozen.add if action == "freeze" else nodes.frozen.discard)(name)
        return
    nodes.ended.add(name)
    nodes.frozen.discard(name)
    state.event(action, point.index, name, f"{detail}, pid {node.pid}")
    _applied(state, nodes, event, "applied")
    if action == "kill":
        node.kill()
    else:
        node.stop()


def _applied(state: RunState, nodes: PointNodes, event: TimelineEvent, outcome: str) -> None:
    """Adds a timeline event to the point's record as the runner applied (or skipped) it."""
    nodes.record.events.append({**event, "t_s": state.t_s(), "outcome": outcome})
    run_params.write_point(state.run_dir, nodes.record)
