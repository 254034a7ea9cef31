"""Where a run's nodes run (docs/hosts.md): the hosts of a spec made before the first point,
each node started on its host inside its cgroups, and everything removed on every way out."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from knee.hosts.base import Host, HostError, Limits, Unsupported
from knee.hosts.local import LocalHost
from knee.hosts.spec import LOCAL, HostSpec, Placement, parse_cpuset

if TYPE_CHECKING:  # imported where a spec has such hosts or limits: a plain run needs none
    from knee.hosts.cgroups import Cgroup, RunCgroups
    from knee.hosts.docker import Network as DockerNetwork
    from knee.hosts.netns import Network
    from knee.hosts.swarm import Network as SwarmNetwork

__all__ = ["Host", "HostError", "Limits", "RunHosts", "Unsupported"]

#: Host kinds whose limits the container engine sets (not knee's own cgroups).
ENGINE_KINDS = ("docker", "swarm")


class RunHosts:
    """The hosts of one run, their cgroups and the nodes' own cgroups.

    check() refuses what this machine cannot give before anything is made; setup() makes
    every host (recording what it makes first, for `knee cleanup`); teardown() removes it.
    """

    def __init__(self, placement: Placement, run_id: str) -> None:
        self.placement = placement
        self.run_id = run_id
        self.hosts: dict[str, Host] = {LOCAL: LocalHost()}
        self._network: Network | None = None  # made with the first netns host
        self._docker: DockerNetwork | None = None  # made with the first docker host
        self._swarm: SwarmNetwork | None = None  # made with the first swarm host
        self._cgroups: RunCgroups | None = None  # made with the first limit
        self._host_cgroups: dict[str, Cgroup] = {}
        self._node_cgroups: dict[str, Cgroup] = {}

    def _specs(self) -> list[HostSpec]:
        return list(self.placement.hosts.values())

    def _limited(self) -> list[Limits]:
        """Limits knee sets with cgroups of its own (a docker host's are the engine's)."""
        limits = [h.limits for h in self._specs() if h.kind not in ENGINE_KINDS]
        limits += [self.placement.limits(g) for g in self.placement.node_limits]
        return [x for x in limits if not x.empty()]

    def needs_setup(self) -> bool:
        return any(h.kind != "local" for h in self._specs()) or bool(self._limited())

    def check(self) -> None:
        """Raises Unsupported (one line) when this machine cannot give what the hosts ask."""
        netns = [h for h in self._specs() if h.kind == "netns"]
        if netns:
            from knee.hosts import netns as netns_mod

            netns_mod.check_features(
                need_rate=any(h.settings.get("rate_mbit") is not None for h in netns),
                need_loss=any(h.settings.get("loss_percent") for h in netns),
                need_delay=any(h.settings.get("delay_ms") for h in netns),
            )
        if any(h.kind == "docker" for h in self._specs()):
            from knee.hosts import docker

            docker.check_daemon()
        if any(h.kind == "swarm" for h in self._specs()):
            from knee.hosts import swarm

            swarm.check_swarm()
        for h in self._specs():
            if h.kind == "ssh" and not h.limits.empty():
                raise Unsupported(
                    f"host {h.name}: limits on ssh hosts are not set by knee "
                    "(it manages no remote cgroups); remove cpu_cores/cpuset/memory_mb"
                )
        if self._limited():
            from knee.hosts import cgroups

            cgroups.check_limits(self._limited())

    def setup(self) -> None:
        """Makes every host and the hosts' cgroups."""
        for spec in self._specs():
            if spec.kind == "local" and spec.name == LOCAL:
                self.hosts[LOCAL] = LocalHost(LOCAL, spec.limits)
                continue
            host = self._make(spec)
            self.hosts[spec.name] = host
            host.setup()
        for name, host in self.hosts.items():
            if not host.limits.empty() and host.kind not in ENGINE_KINDS:  # the engine's
                self._host_cgroups[name] = self._cgroup_tree().make((f"host-{name}",), host.limits)

    def _make(self, spec: HostSpec) -> Host:
        s = spec.settings
        if spec.kind == "local":
            return LocalHost(spec.name, spec.limits)
        if spec.kind == "netns":
            from knee.hosts import netns

            if self._network is None:
                self._network = netns.Network(self.run_id)
                self._network.setup()
            return netns.NetnsHost(
                spec.name,
                spec.limits,
                self._network,
                rate_mbit=s.get("rate_mbit"),
                loss_percent=s.get("loss_percent"),
                delay_ms=s.get("delay_ms"),
            )
        if spec.kind == "docker":
            from knee.hosts import docker

            if self._docker is None:
                self._docker = docker.Network(self.run_id)
            return docker.DockerHost(
                spec.name,
                spec.limits,
                self._docker,
                node_limits=lambda node: self.limits_of(node, spec.name),
            )
        if spec.kind == "swarm":
            from knee.hosts import swarm

            if self._swarm is None:
                self._swarm = swarm.Network(self.run_id)
            return swarm.SwarmHost(
                spec.name,
                spec.limits,
                self._swarm,
                node=s.get("node"),
                identity_file=s.get("identity_file"),
                point_nodes=lambda: self.placement.current.get("where", {}),
                node_limits=lambda node: self.limits_of(node, spec.name),
            )
        from knee.hosts import ssh

        return ssh.SshHost(
            spec.name,
            spec.limits,
            address=s["address"],
            user=s.get("user"),
            port=s["port"],
            identity_file=s.get("identity_file"),
            run_id=self.run_id,
        )

    def _cgroup_tree(self) -> RunCgroups:
        if self._cgroups is None:
            from knee.hosts import cgroups

            self._cgroups = cgroups.RunCgroups(self.run_id)
        return self._cgroups

    def host_of(self, name: str) -> Host:
        return self.hosts[name]

    def wrap_for(self, node: str, host_name: str) -> Callable[[list[str]], list[str]] | None:
        """How a node's command joins its cgroups: its own (inside its host's) when
        [limits] gives it some, else its host's; None when neither is limited."""
        own = self.placement.limits(node)
        if self.hosts[host_name].kind in ENGINE_KINDS:  # the container's limits (--cpus, ...)
            return None
        if own.empty() and host_name not in self._host_cgroups:
            return None
        from knee.hosts import cgroups

        # Always a cgroup of its own, under its host's: a process joins a leaf (cgroup v2
        # allows none where there are children), and its own CPU time can be read.
        key = f"{host_name}/{node}"
        if key not in self._node_cgroups:
            self._node_cgroups[key] = self._cgroup_tree().make((f"host-{host_name}", node), own)
        group = self._node_cgroups[key]
        return lambda argv: cgroups.wrap(argv, [group])

    def limits_of(self, node: str, host_name: str) -> dict[str, Any]:
        """A node's effective limits: its own inside its host's, the tighter of each; the
        CPU it may use in cores (quota, cpuset size) as ``cpu_cores``."""
        from knee.hosts.cgroups import limit_cores

        own, host = self.placement.limits(node), self.hosts[host_name].limits
        out: dict[str, Any] = {}
        quotas = [c for c in (own.cpu_cores, host.cpu_cores) if c is not None]
        cpuset = own.cpuset or host.cpuset
        if cpuset is not None:
            out["cpuset"] = cpuset
        cores = limit_cores(
            min(quotas) if quotas else None,
            len(parse_cpuset(cpuset)) if cpuset is not None else None,
        )
        if cores is not None:
            out["cpu_cores"] = cores
        memory = [m for m in (own.memory_bytes, host.memory_bytes) if m is not None]
        if memory:
            out["memory_bytes"] = min(memory)
        return out

    def cores_of(self, host_name: str) -> float | None:
        """The CPU a host's nodes may use together, in cores (its quota or cpuset size);
        None without a limit."""
        from knee.hosts.cgroups import limit_cores

        limits = self.hosts[host_name].limits
        cpus = len(parse_cpuset(limits.cpuset)) if limits.cpuset is not None else None
        return limit_cores(limits.cpu_cores, cpus)

    def interface_rows(self) -> dict[str, dict[str, int]]:
        """bytes_rx and bytes_tx of each host that has an interface of its own."""
        out = {}
        for name, host in self.hosts.items():
            counters = host.interface_bytes()
            if counters is not None:
                out[name] = {"bytes_rx": counters["rx_bytes"], "bytes_tx": counters["tx_bytes"]}
        return out

    def describe(self) -> dict[str, Any]:
        """env.json's hosts: each host as made, and the spec's per-node limits."""
        hosts = [h.describe() for h in self.hosts.values()]
        for entry in hosts:
            group = self._host_cgroups.get(entry["name"])
            if group is not None:
                entry["cgroup"] = group.describe()
        return {
            "run_id": self.run_id,
            "hosts": hosts,
            "placement": dict(self.placement.rules),
            "node_limits": {
                g: self.placement.limits(g).as_dict() for g in self.placement.node_limits
            },
        }

    def teardown(self) -> list[str]:
        """Removes every host, network and cgroup the run made; returns what failed (one
        line each), never raises."""
        problems: list[str] = []
        for host in self.hosts.values():
            try:
                host.teardown()
            except Exception as e:  # noqa: BLE001 - clean-up goes on, the problem is named
                problems.append(f"host {host.name}: {e}")
        try:  # the docker and swarm networks after their hosts' containers and services
            if self._swarm is not None:
                self._swarm.teardown()
            if self._docker is not None:
                self._docker.teardown()
        except Exception as e:  # noqa: BLE001
            problems.append(str(e))
        # The bridge's namespace after the hosts' (a host's teardown leaves it).
        try:
            if self._network is not None:
                self._network.teardown()
            if self._cgroups is not None:
                problems += self._cgroups.remove()
        except Exception as e:  # noqa: BLE001
            problems.append(str(e))
        return problems
