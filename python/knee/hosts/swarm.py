"""Docker Swarm services as hosts (docs/hosts.md, "Swarm hosts").

A host of kind ``swarm`` names a node of the swarm of knee's daemon (scripts/docker swarm),
by constraint (``node.hostname==...``; default: this machine's node). knee reaches another
node's daemon over ssh, at the destination its label ``knee.ssh`` names
(``knee.hosts.node_daemon``; scripts/docker worker makes such a node, knee-sw1, in a network
namespace of its own, with an sshd): knee loads its image there (`docker save` here, `docker
load` there), and reads its tasks' containers, cgroups and interfaces through that one
connection. Each node placed on it
is a Swarm service of its own, on an overlay network knee makes for the run (``knee-R-swarm``,
internal, in 198.19.128.0/18), except the generators of one point (NAME-0 .. NAME-{n-1},
`load.generators` = n): they are ONE service with n replicas, and each replica reads its
share from its task slot.

A service has no stdin nor attached stdout, so the node protocol runs over the run's overlay
network (src/control.rs of knee-node): each task's node takes ONE connection on its control
port (``KNEE_NODE_CONTROL_LISTEN``), whose first line is its config, the rest its lifeline
(and a generator's start line, ``KNEE_NODE_START_GATE=1``), and on which it prints its
stdout lines and pushes what its files (samples, histogram, outputs) gained, before each
progress line and at its end. The task's agent (``swarm_task.py``, the local process the
runner reads) dials it through ``knee-node relay`` in a container of this machine's node on
that network, appends the files' bytes to their copies in the slot's folder here
(``slot-N``), and passes the lines on; the node's stderr comes back through ``docker logs
-f`` of its container, its exit code through ``docker wait`` (both through the daemon of the
task's node, over ssh for another node). A task has no bind mount: its files and the host's
scratch folder are tmpfs of its own; each reads ``KNEE_SLOT={{.Task.Slot}}``.

Services use ``--restart-condition none`` (a failed node fails the point, as Kubernetes'
``backoffLimit: 0``). Everything is labelled ``knee.run=R``: the run removes its services and
network at its end, `knee cleanup` after a crash (`remove_run`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knee.hosts import cleanup, engine
from knee.hosts.base import HostError, Limits, Unsupported
from knee.hosts.engine import ContainerHost, cpu_s, eth0_bytes, rss_bytes
from knee.hosts.local import node_binary
from knee.hosts.node_daemon import SSH_FORMAT, SSH_LABEL, NodeDaemon

#: The swarm's address pool (scripts/docker swarm): ingress and the runs' overlays.
SWARM_POOL = "198.19.128.0/18"
#: Inside a task (tmpfs): the node's files, pushed as they grow, and its scratch ({scratch}).
FILES_DIR = engine.FILES_DIR
SCRATCH_DIR = "/knee/scratch"
#: The agent that is a task's local process (its stdout, its exit code).
AGENT = Path(__file__).with_name("swarm_task.py")
#: The ports a task's node takes its control connection on, and a generator's answers the
#: clock check on (in the task's own network namespace).
CONTROL_PORT = 7991
CLOCK_PORT = 7990
#: A generator group is NAME-<index>.
MEMBER_RE = re.compile(r"^(.+)-(\d+)$")
#: At most this many services per host in one run (a point makes one per node or generator
#: group; they stay, ended, until the run's end): a bound on what a long sweep accumulates.
MAX_SERVICES_PER_HOST = 10_000
#: Seconds the engine may take to remove a removed service's task containers (~1 s).
TASKS_GONE_S = 30.0
_image_lock = threading.Lock()


def swarm_state() -> tuple[str, bool]:
    """The daemon's swarm state ("active", "inactive", ...) and whether it is a manager."""
    out = engine.run(
        ["info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}"],
        "reading the swarm state",
    ).split()
    return (out[0] if out else "", len(out) > 1 and out[1] == "true")


def check_swarm() -> None:
    """Refuses, in one line, a daemon that is not a swarm manager, or whose networks
    (ingress, overlays, docker_gwbridge) lie outside 198.18.0.0/15."""
    engine.check_daemon()  # every network of the daemon, the swarm's included
    try:
        state, manager = swarm_state()
    except HostError as e:
        raise Unsupported(f"swarm hosts: {e}") from None
    if state != "active" or not manager:
        raise Unsupported(
            f"swarm hosts: the daemon at {engine.socket()} is not a swarm manager "
            f"(swarm {state or 'unknown'}); run scripts/docker swarm"
        )


def this_node() -> str:
    """The hostname of this machine's swarm node."""
    return engine.run(
        ["node", "inspect", "self", "--format", "{{.Description.Hostname}}"], "inspecting the node"
    ).strip()


def node_destination(node: str) -> str | None:
    """Swarm node ``node``'s ssh destination, its label ``knee.ssh`` (None without one); a
    HostError if the swarm has no such node."""
    out = engine.run(["node", "inspect", node, "--format", SSH_FORMAT], "inspecting " + node)
    return out.strip() or None


def node_daemon(
    node: str, identity_file: str | None = None, control_prefix: str = "knee-ssh-"
) -> NodeDaemon:
    """How knee reaches swarm node ``node``'s daemon: knee's socket for this machine's node,
    else over ssh at its label's destination (the master's folder named ``control_prefix``...).
    Unsupported, in one line, for a node the swarm does not have or one without the label."""
    here = this_node()
    if node == here:
        return NodeDaemon(socket=engine.socket())
    try:
        destination = node_destination(node)
    except HostError as e:
        raise Unsupported(f"swarm node {node}: {e}") from None
    if destination is None:
        raise Unsupported(
            f"swarm node {node} is not this machine's ({here}) and has no label "
            f"{SSH_LABEL}=[USER@]HOST[:PORT]: knee reaches another node's daemon over ssh; "
            f"set it (docker node update --label-add {SSH_LABEL}=root@ADDRESS {node})"
        )
    try:
        return NodeDaemon(
            destination=destination, identity_file=identity_file, control_prefix=control_prefix
        )
    except HostError as e:
        raise Unsupported(f"swarm node {node}: {e}") from None


def copy_image(image: str, host: engine.DaemonRef) -> None:
    """Loads knee's ``image`` into the daemon ``host`` (another node's: `docker save` here,
    `docker load` there, over ssh) unless it has it; older knee-node images there not used
    by a container are removed, as on knee's."""
    with _image_lock:
        try:
            engine.run(["image", "inspect", "--format", "{{.Id}}", image], "", host=host)
            return
        except HostError:
            pass
        save = subprocess.Popen(
            engine.docker("save", image), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert save.stdout is not None
        try:
            load = subprocess.run(
                engine.docker("load", "--quiet", host=host),
                stdin=save.stdout,
                capture_output=True,
                timeout=engine.COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            save.kill()
            raise HostError(f"docker: loading {image} into {host}: timed out") from None
        finally:
            save.stdout.close()
            save.wait(timeout=engine.COMMAND_TIMEOUT_S)
        if save.returncode != 0 or load.returncode != 0:
            lines = load.stderr.decode(errors="replace").strip().splitlines()
            raise HostError(f"docker: loading {image} into {host}: {(lines or ['failed'])[-1]}")
        out = engine.run(
            ["image", "ls", "--filter", f"label={engine.IMAGE_LABEL}",
             "--format", "{{.Repository}}:{{.Tag}}"],
            "listing images", host=host,
        )  # fmt: skip
        for other in out.split():
            if other != image:
                with contextlib.suppress(HostError):  # in use by a container
                    engine.run(["image", "rm", other], f"removing {other}", host=host)


def services(run_id: str, host: str | None = None) -> list[str]:
    """Names of the services labelled with run ``run_id`` (and host ``host``)."""
    args = ["service", "ls", "--filter", f"label={engine.RUN_LABEL}={run_id}"]
    if host is not None:
        args += ["--filter", f"label=knee.host={host}"]
    return engine.run([*args, "--format", "{{.Name}}"], "listing services").split()


def tasks(run_id: str, running: bool = False) -> list[str]:
    """The task containers of run ``run_id``'s services (only those ``running``, or all) on
    this machine's node (knee's daemon)."""
    return engine.run(
        ["ps", *([] if running else ["-a"]),
         "--filter", f"label={engine.RUN_LABEL}={run_id}",
         "--filter", "label=knee.service", "--format", "{{.Names}}"],
        "listing tasks",
    ).split()  # fmt: skip


def remove_run(run_id: str, problems: list[str]) -> list[str]:
    """Removes run ``run_id``'s services and the hosts' folders; what it removed. Its
    network and any container left go with `docker.remove_run`, after."""
    cleanup.check_run_id(run_id)
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"knee-swarm-{run_id}-*"):
        shutil.rmtree(folder, ignore_errors=True)
    try:
        state, manager = swarm_state()
        if state == "active" and manager and (names := services(run_id)):
            engine.run(["service", "rm", *names], "removing services")
            removed += [f"service {s}" for s in names]
        # The engine removes their tasks' containers a moment later; the network after (on
        # another node, its copy goes once its tasks' containers have: a run's end waits for
        # them in each host's teardown, over ssh; `knee cleanup` needs no ssh).
        deadline = time.monotonic() + TASKS_GONE_S
        while tasks(run_id) and time.monotonic() < deadline:
            time.sleep(0.1)
    except HostError as e:
        problems.append(str(e))
    return removed


class Network:
    """The run's overlay network, internal: its tasks reach each other and nothing else."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.name = f"knee-{run_id}-swarm"
        self.subnet: str | None = None
        self._lock = threading.Lock()

    def setup(self) -> None:
        with self._lock:
            if self.subnet is not None:
                return
            check_swarm()
            cleanup.note(self.run_id, docker=[self.name])
            engine.run(
                ["network", "create", "--driver", "overlay", "--internal", "--attachable",
                 "--label", f"{engine.RUN_LABEL}={self.run_id}", self.name],
                f"making network {self.name}",
            )  # fmt: skip
            subnets = engine.network_subnets([self.name]).get(self.name, [])
            self.subnet = subnets[0] if subnets else ""
        if not subnets or engine.outside_range(subnets):
            self.teardown()
            raise Unsupported(
                f"swarm hosts: network {self.name} got {self.subnet or 'no subnet'}, outside "
                f"{engine.KNEE_RANGE}: use knee's own swarm (scripts/docker swarm)"
            )

    def teardown(self) -> None:
        problems: list[str] = []
        remove_run(self.run_id, problems)
        # The services' tasks go a moment after `service rm`; the network then.
        from knee.hosts import docker

        docker.remove_run(self.run_id, problems)
        if problems:
            raise HostError("; ".join(problems))
        cleanup.forget(self.run_id, docker=[self.name])


class _Service:
    """One service of a host: a node, or a generator group (one replica per member)."""

    def __init__(self, name: str, folder: Path, members: list[str]) -> None:
        self.name = name
        self.folder = folder
        self.members = members
        self.registered: dict[str, list[str]] = {}  # member -> the service's args
        self.created = False

    def slot_dir(self, slot: int) -> Path:
        return self.folder / f"slot-{slot}"


class SwarmHost(ContainerHost):
    """A Swarm node; each node placed on it a service (a generator group: one service)."""

    kind = "swarm"

    def __init__(
        self,
        name: str,
        limits: Limits,
        network: Network,
        node: str | None = None,
        identity_file: str | None = None,
        point_nodes: Callable[[], dict[str, str]] | None = None,
        node_limits: Callable[[str], dict[str, Any]] | None = None,
        local_binary: str | None = None,
    ) -> None:
        super().__init__(name, limits)
        if limits.cpuset is not None:
            raise Unsupported(f"swarm host {name}: Swarm has no cpuset; use cpu_cores")
        self.network = network
        self.run_id = network.run_id
        self.node = node
        self.identity_file = identity_file  # for another node's ssh (None: ssh's own keys)
        self.point_nodes = point_nodes  # the point's node -> host (hosts.spec.check_nodes)
        self.node_limits = node_limits
        self.local_binary = local_binary
        self.image: str | None = None
        self.daemon: NodeDaemon | None = None  # the node's daemon: a socket here, or ssh
        self.folder: Path | None = None
        self._services: dict[str, _Service] = {}  # by service name
        self._pending: dict[str, _Service] = {}  # group base -> its service being filled
        self._count = 0
        self._containers: dict[tuple[str, str], str] = {}  # (service, slot) -> its task's
        self._pids: dict[str, int] = {}  # container -> its pid (on its node)
        self._cpu_files: dict[str, list[str]] = {}  # container -> its cgroup's CPU files
        self._bytes: dict[str, tuple[int, int]] = {}  # container -> last rx, tx

    @property
    def address(self) -> str:
        # Each task has its own overlay address; a node's `listen` on 0.0.0.0 is given its
        # task's address by the agent before the node reads its config.
        return "0.0.0.0"

    def setup(self) -> None:
        if self.folder is not None:
            return
        self.network.setup()
        if self.node is None:
            self.node = this_node()
        try:
            # The master's folder goes with the run's (remove_run) if the runner dies.
            prefix = f"knee-swarm-{self.run_id}-{self.name}-ssh-"
            daemon = node_daemon(self.node, self.identity_file, prefix)
        except Unsupported as e:
            raise Unsupported(f"swarm host {self.name}: {e}") from None
        try:
            if daemon.remote:
                # It answers over ssh (one line if not: ssh's reason), and its networks are
                # in 198.18.0.0/15.
                try:
                    engine.run(["info", "--format", "{{.ID}}"], "connecting", host=daemon)
                except HostError as e:
                    raise Unsupported(
                        f"swarm host {self.name}: node {self.node}'s daemon does not answer "
                        f"over ssh ({SSH_LABEL}={daemon.destination}): {e}"
                    ) from None
                engine.check_daemon(daemon)
            if self.local_binary is None:
                self.local_binary = node_binary()
            self.image = engine.ensure_image(self.local_binary, self.run_id)
            if daemon.remote:
                copy_image(self.image, daemon)
        except BaseException:
            daemon.close()
            raise
        self.daemon = daemon
        self.folder = Path(tempfile.mkdtemp(prefix=f"knee-swarm-{self.run_id}-{self.name}-"))

    def binary(self, local_binary: str) -> str:
        return engine.NODE_PATH

    def _group(self, node: str, role: str) -> list[str]:
        """The members of ``node``'s generator group on this host (itself alone if none)."""
        m = MEMBER_RE.match(node)
        if role != "load" or m is None or self.point_nodes is None:
            return [node]
        base = m.group(1)
        members = [
            n
            for n, h in self.point_nodes().items()
            if h == self.name and (k := MEMBER_RE.match(n)) is not None and k.group(1) == base
        ]
        members.sort(key=lambda n: int(n.rsplit("-", 1)[1]))
        return members if node in members else [node]

    def command(self, argv: list[str]) -> list[str]:
        if self.folder is None or self.image is None:
            raise HostError(f"swarm host {self.name}: setup() has not run")
        _, role, system, *rest = argv
        options = dict(zip(rest[::2], rest[1::2], strict=False))
        node, config = options.get("--name", role), json.loads(options["--config"])
        members = self._group(node, role)
        base = MEMBER_RE.match(node).group(1) if len(members) > 1 else node  # type: ignore[union-attr]
        service = self._pending.get(base) if len(members) > 1 else None
        if service is None or node in service.registered:
            if len(self._services) >= MAX_SERVICES_PER_HOST:
                raise HostError(f"swarm host {self.name}: {MAX_SERVICES_PER_HOST} services made")
            self._count += 1
            name = f"knee-{self.run_id}-{self.name}-{base}-{self._count}"
            service = _Service(name, self.folder / name, members)
            self._services[name] = service
            if len(members) > 1:
                self._pending[base] = service
        slot = members.index(node) + 1
        slot_dir = service.slot_dir(slot)
        slot_dir.mkdir(parents=True)
        (slot_dir / "config.json").write_text(json.dumps(config))
        service.registered[node] = [role, system, "--name", base]
        if len(service.registered) == len(members):
            self._pending.pop(base, None)
            self._create(service, role, system, node)
        return [
            sys.executable, str(AGENT),
            "--docker", engine.client(), "--node", self._daemon().to_arg(),
            "--service", service.name, "--slot", str(slot), "--replicas", str(len(members)),
            "--folder", str(slot_dir), "--network", self.network.name,
            "--manager", engine.socket(), "--image", self.image, "--run", self.run_id,
            "--control-port", str(CONTROL_PORT),
            *(["--gate", "--clock-port", str(CLOCK_PORT)] if role == "load" else []),
        ]  # fmt: skip

    def _create(self, service: _Service, role: str, system: str, node: str) -> None:
        limits = self.node_limits(node) if self.node_limits else self.limits.as_dict()
        opts = []
        if limits.get("cpu_cores"):
            opts += [
                "--limit-cpu",
                f"{limits['cpu_cores']:g}",
                "--reserve-cpu",
                f"{limits['cpu_cores']:g}",
            ]
        if limits.get("memory_bytes"):
            opts += ["--limit-memory", f"{int(limits['memory_bytes'])}b"]
        env = [
            "KNEE_SLOT={{.Task.Slot}}",
            f"KNEE_NODE_CONTROL_LISTEN=0.0.0.0:{CONTROL_PORT}",
            "KNEE_NODE_STDIN_LIFELINE=1",  # the control connection, once taken
            f"KNEE_NODE_PUSH_DIR={FILES_DIR}",
        ]
        if role == "load":
            env += ["KNEE_NODE_START_GATE=1", f"KNEE_NODE_CLOCK_LISTEN=0.0.0.0:{CLOCK_PORT}"]
        assert self.folder is not None and self.image is not None
        label = f"{engine.RUN_LABEL}={self.run_id}"
        engine.run(
            [
                "service", "create", "--detach", "--no-resolve-image", "--quiet",
                "--name", service.name, "--replicas", str(len(service.members)),
                "--restart-condition", "none", "--endpoint-mode", "dnsrr",
                "--network", self.network.name,
                "--constraint", f"node.hostname=={self.node}",
                "--label", label, "--label", f"knee.host={self.name}",
                "--container-label", label, "--container-label", f"knee.host={self.name}",
                "--container-label", f"knee.service={service.name}",
                *[x for e in env for x in ("--env", e)],
                "--mount", f"type=tmpfs,dst={FILES_DIR}",
                "--mount", f"type=tmpfs,dst={SCRATCH_DIR}",
                *opts, self.image,
                role, system, "--name", service.registered[service.members[0]][3],
            ],
            f"making service {service.name}",
        )  # fmt: skip
        service.created = True

    @staticmethod
    def _agent_args(proc: subprocess.Popen[bytes]) -> tuple[str, str]:
        args = [str(a) for a in proc.args]  # type: ignore[union-attr]
        return args[args.index("--service") + 1], args[args.index("--slot") + 1]

    def _daemon(self) -> NodeDaemon:
        if self.daemon is None:
            raise HostError(f"swarm host {self.name}: setup() has not run")
        return self.daemon

    def container_of(self, proc: subprocess.Popen[bytes]) -> str | None:
        """The task container of the agent ``proc`` (None before it exists); kept once
        known (a task is not restarted)."""
        key = self._agent_args(proc)
        if key in self._containers:
            return self._containers[key]
        service, slot = key
        out = engine.run(
            ["ps", "-a", "--filter", f"name=^{service}\\.{slot}\\.", "--format", "{{.Names}}"],
            "listing tasks",
            host=self._daemon(),
        ).split()
        if out:
            self._containers[key] = out[0]
        return out[0] if out else None

    def kill_container(self, container: str, word: str) -> None:
        engine.run(["kill", "--signal", word, container], f"sending {word}", host=self.daemon)

    def scratch_path(self, local: Path) -> str:
        return f"{SCRATCH_DIR}/scratch-{local.name}"

    def copy_of(self, name: str) -> Path | None:
        if self.folder is None:
            raise HostError(f"swarm host {self.name}: setup() has not run")
        found = sorted(self.folder.glob(f"*/slot-*/{name}"))
        return found[-1] if found else None

    def _pid(self, container: str) -> int | None:
        return engine.container_pid(container, self._pids, host=self.daemon)

    def usage(self, proc: subprocess.Popen[bytes]) -> dict[str, Any] | None:
        """The task's CPU seconds from its container's cgroup, its node's resident memory:
        read on its node (over ssh for another), in one command once the cgroup is known."""
        try:
            container = self.container_of(proc)
            pid = None if container is None else self._pid(container)
            if container is None or pid is None:
                return None
            daemon = self._daemon()
            files = self._cpu_files.get(container)
            if files is None:
                cpuacct = daemon.cgroup_dirs(pid).get("cpuacct")
                if cpuacct is None:
                    return None
                files = [str(cpuacct / "cpuacct.usage"), str(cpuacct / "cpu.stat")]
                self._cpu_files[container] = files
            got = daemon.read([*files, f"/proc/{pid}/status"])
        except HostError:
            return None
        cpu = cpu_s(got[files[0]], got[files[1]])
        if cpu is None:
            return None
        return {"cpu_s": cpu, "rss_bytes": rss_bytes(got[f"/proc/{pid}/status"])}

    def interface_bytes(self) -> dict[str, int] | None:
        """The host's link: the sum of its tasks' overlay interfaces (eth0), a task that
        ended counted with its last reading, so the sum never goes back."""
        with contextlib.suppress(HostError):  # one command on the node (ssh for another)
            read = self._daemon().interfaces(
                [f"label={engine.RUN_LABEL}={self.run_id}", f"label=knee.host={self.name}"]
            )
            for container, net_dev in read.items():
                if (counts := eth0_bytes(net_dev)) is not None:
                    self._bytes[container] = counts
        if not self._bytes:
            return None
        return {
            "rx_bytes": sum(b[0] for b in self._bytes.values()),
            "tx_bytes": sum(b[1] for b in self._bytes.values()),
        }

    def teardown(self) -> None:
        """Removes the host's services (their tasks stop), closes the lifelines, removes the
        folder."""
        if self.folder is None:
            return
        with contextlib.suppress(HostError):
            if names := services(self.run_id, self.name):
                engine.run(["service", "rm", *names], "removing services")
            # The engine removes their tasks' containers a moment later. The manager lets the
            # run's network go before another node's are gone (and that node keeps its copy
            # of the network until they are): waited for here, on the node (over ssh).
            deadline = time.monotonic() + TASKS_GONE_S
            while self._tasks_left() and time.monotonic() < deadline:
                time.sleep(0.1)
        self._services.clear()
        self._pending.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
        if self.daemon is not None:
            self.daemon.close()  # the ssh master, for another node

    def _tasks_left(self) -> list[str]:
        """The host's task containers still on its node."""
        if self.daemon is None:
            return []
        return engine.run(
            ["ps", "-a", "--filter", f"label={engine.RUN_LABEL}={self.run_id}",
             "--filter", f"label=knee.host={self.name}", "--format", "{{.Names}}"],
            "listing tasks", host=self.daemon,
        ).split()  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "address": None,  # each task's own, in the subnet
            "network": self.network.name,
            "subnet": self.network.subnet,
            "swarm_node": self.node,
            "image": self.image,
            "daemon": str(self.daemon) if self.daemon else engine.socket(),
        }
