"""Starting and stopping a point's nodes on their hosts, and bringing back the files
that remote ones wrote."""

from __future__ import annotations

import re
from typing import Any

from knee import results, run_params
from knee.hosts.base import HostError
from knee.hosts.spec import LOCAL
from knee.params import Point
from knee.runner.node import Node
from knee.runner.state import PointNodes, RunState

#: A server that does not report its address within this is reported as failed.
READY_TIMEOUT_S = 15.0


def fetch_files(
    state: RunState, nodes: PointNodes, raws: dict[str, results.RawFile], strict: bool = True
) -> list[str]:
    """Brings the files that nodes on remote hosts wrote (recorders' samples and
    histograms, nodes' outputs) into raw/; a local host's node wrote them there already.
    Not `strict` (a failed point's files, up to each node's last flush): a file that cannot
    be brought is a problem returned, and the others are still brought."""
    problems: list[str] = []
    files = {name: list(paths) for name, paths in nodes.outputs.items()}
    for name, raw in raws.items():
        files.setdefault(name, []).extend(
            [state.run_dir / raw.samples, state.run_dir / raw.histogram]
        )
    for name, paths in files.items():
        if name not in nodes.started:
            continue
        host = state.hosts.host_of(nodes.where[name])
        for local in paths:
            if host.node_path(local) == str(local):
                continue
            try:
                host.fetch(host.node_path(local), local)
            except (HostError, OSError) as e:
                if strict:
                    raise
                problems.append(str(e))
    return problems


_ADDR = re.compile(r"\{addr:([A-Za-z0-9_-]+)\}|\{(scratch)\}")


def substitute(value: Any, addrs: dict[str, str]) -> Any:
    """A copy of a node config with every "{addr:NAME}" replaced by NAME's address and
    "{scratch}" by the point's scratch folder (run_dir/scratch/pNNN: files a system makes,
    removed after the point unless `knee run --keep-scratch`)."""
    if isinstance(value, dict):
        return {k: substitute(v, addrs) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, addrs) for v in value]
    if isinstance(value, str):

        def address(m: re.Match[str]) -> str:
            key = m.group(1) or m.group(2)
            if key not in addrs:
                raise ValueError(f"node config refers to {m.group(0)} before that node is ready")
            return addrs[key]

        return _ADDR.sub(address, value)
    return value


def start_node(state: RunState, point: Point, nodes: PointNodes, name: str, system: str) -> Node:
    """Starts one node of the point; a node that does not record is waited for until ready."""
    tag = f"p{point.index:03d}"
    node_config = nodes.configs[name]
    host_name = nodes.where[name]
    node = Node(
        name,
        nodes.plans[name].role,
        system,
        node_config,
        config_path=state.run_dir / "nodes" / f"{name}.{tag}.json",
        log_path=state.run_dir / "nodes" / f"{name}.stderr.log",
        events_path=state.run_dir / "nodes" / f"{name}.{tag}.events.jsonl",
        host=state.hosts.host_of(host_name),
        wrap=state.hosts.wrap_for(name, host_name),
    )
    state.nodes[name] = node
    nodes.started.add(name)
    state.monitor.add(name, node.pid)
    state.remote_usage.pop(name, None)
    on = "" if host_name == LOCAL else f" on {host_name}"
    state.event("node_start", point.index, name, f"pid {node.pid}{on}")
    if all(n["name"] != name for n in nodes.record.topology):  # as first started
        plan = nodes.plans[name]
        nodes.record.topology.append(
            {
                "name": name,
                "role": plan.role,
                "records": plan.records,
                "host": host_name,
                "limits": state.hosts.limits_of(name, host_name),
                "config": node_config,
            }
        )
        run_params.write_point(state.run_dir, nodes.record)
    if not nodes.plans[name].records:
        ready = node.wait_ready(READY_TIMEOUT_S)
        nodes.addrs[name] = ready.get("addr", "")
        state.event("node_ready", point.index, name, nodes.addrs[name])
    return node


def stop_node(state: RunState, point: int | None, name: str) -> None:
    node = state.nodes.pop(name, None)
    if node is not None:
        code = node.stop()
        state.event("node_stop", point, name, f"exit code {code}")


def stop_all(state: RunState) -> None:
    for name in list(state.nodes):
        stop_node(state, None, name)
