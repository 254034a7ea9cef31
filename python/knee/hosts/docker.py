"""Docker containers as hosts (docs/hosts.md, "Docker hosts").

A host of kind ``docker`` is a container that holds a network namespace on a network knee
makes for the run (``knee-R``, an internal bridge network in 198.18.0.0/15), the way a
Kubernetes pod's pause container holds the pod's: each node placed on the host runs in a
container of its own that joins it (``--network container:...``), so every node of the
host has the host's address, and the host's interface counts what its nodes send.

A node is a local ``docker run -i --rm`` client: the container's stdout and stderr are the
node's, attached, exactly as over a pipe or ssh; its stdin is the node's lifeline
(``KNEE_NODE_STDIN_LIFELINE=1``): when the client goes (the runner closed it, or died) the
engine closes the container's stdin and the node stops. The host's limits become each
container's: ``cpu_cores`` -> ``--cpus``, ``cpuset`` -> ``--cpuset-cpus``, ``memory_mb``
-> ``--memory``; its CPU time is read from the container's cgroup.

Every container, network and image knee makes is labelled ``knee.run=R`` (images also
``knee.node_sha256``); the run removes its containers and network at its end, and
`knee cleanup` what a crashed run left (`remove_run`).

The image is made here, from the installed knee-node: a tarball with knee-node and the
libraries ``ldd`` lists, ``docker import``ed as ``knee-node:<sha256 of the binary, 16
hex>``, made once per build and reused (`ensure_image`). No registry, no download.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from knee.hosts import cleanup
from knee.hosts.base import HostError, Limits, Unsupported
from knee.hosts.engine import (  # shared with the swarm hosts; docker.X names kept
    COMMAND_TIMEOUT_S,
    FILES_DIR,
    KNEE_RANGE,
    LIFELINE_ENV,
    NODE_PATH,
    RUN_LABEL,
    ContainerHost,
    cgroup_dirs,
    check_daemon,
    container_pid,
    container_usage,
    docker,
    ensure_image,
    eth0_bytes,
    network_subnets,
    outside_range,
    run,
    socket,
)
from knee.hosts.engine import binary_sha256 as binary_sha256  # re-exported: docker.X
from knee.hosts.engine import knee_images as knee_images
from knee.hosts.local import node_binary
from knee.hosts.spec import parse_cpuset

#: Seconds the holders of a run may take to exit once their input ended (about 0.5 s).
HOLDER_EXIT_S = 10.0
#: A container's name: knee-<run id>-<host>[-<node>-<n>]; Docker allows [a-zA-Z0-9_.-].
NAME_RE = re.compile(r"^knee-[0-9a-z]{1,8}-[A-Za-z0-9_.-]+$")

# -- a run's containers and network ------------------------------------------------------


def labelled(kind: str, run_id: str | None = None) -> list[str]:
    """Names of the containers or networks labelled with run ``run_id`` (any knee run)."""
    label = f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL
    if kind == "container":
        args = ["ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"]
    else:
        args = ["network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"]
    return run(args, f"listing {kind}s").split()


def remove_run(run_id: str, problems: list[str]) -> list[str]:
    """Removes run ``run_id``'s containers (killed first) and network; what it removed."""
    cleanup.check_run_id(run_id)  # it goes into a glob and labels
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"knee-docker-{run_id}-*"):  # hosts' files
        shutil.rmtree(folder, ignore_errors=True)
    try:
        containers = labelled("container", run_id)
        if containers:
            run(["rm", "-f", *containers], "removing containers")
            removed += [f"container {c}" for c in containers]
        for net in labelled("network", run_id):
            run(["network", "rm", net], f"removing network {net}")
            removed.append(f"docker network {net}")
    except HostError as e:
        problems.append(str(e))
    return removed


class Network:
    """The run's bridge network, internal (no gateway out): its containers reach each
    other and nothing else. Its subnet comes from the daemon's pool and is checked to be
    inside 198.18.0.0/15."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.name = f"knee-{run_id}-docker"
        self.bridge = f"knee-{run_id}"  # an interface name: 15 characters at most
        self.subnet: str | None = None
        self.holders: list[subprocess.Popen[bytes]] = []  # the hosts' holders' clients

    def setup(self) -> None:
        if self.subnet is not None:
            return
        check_daemon()
        cleanup.note(self.run_id, docker=[self.name])
        run(
            [
                "network", "create", "--driver", "bridge", "--internal",
                "--label", f"{RUN_LABEL}={self.run_id}",
                "-o", f"com.docker.network.bridge.name={self.bridge}",
                self.name,
            ],
            f"making network {self.name}",
        )  # fmt: skip
        subnets = network_subnets([self.name]).get(self.name, [])
        self.subnet = subnets[0] if subnets else ""
        if not subnets or outside_range(subnets):
            self.teardown()
            raise Unsupported(
                f"docker hosts: network {self.name} got {self.subnet or 'no subnet'}, outside "
                f"{KNEE_RANGE}: use knee's own daemon (scripts/docker)"
            )

    def no_ipv6(self) -> None:
        """Turns IPv6 off on the run's bridge and the veth ends in it (this machine's side),
        so that the kernel gives them no link-local address."""
        try:
            links = json.loads(
                subprocess.run(
                    ["ip", "-j", "link", "show", "master", self.bridge],
                    capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=True,
                ).stdout or "[]"
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            raise HostError(f"docker network {self.name}: listing its links: {e}") from None
        for name in [self.bridge, *(link["ifname"] for link in links)]:
            path = Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6")
            with contextlib.suppress(FileNotFoundError):  # a link that just went
                path.write_text("1")

    def teardown(self) -> None:
        for holder in self.holders:
            if holder.stdin is not None:
                with contextlib.suppress(OSError):
                    holder.stdin.close()
        deadline = time.monotonic() + HOLDER_EXIT_S
        for holder in self.holders:
            try:
                holder.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                holder.kill()  # its container goes with remove_run
                holder.wait()
            if holder.stderr is not None:
                holder.stderr.close()
        self.holders.clear()
        problems: list[str] = []
        remove_run(self.run_id, problems)
        if problems:
            raise HostError("; ".join(problems))
        cleanup.forget(self.run_id, docker=[self.name])


class DockerHost(ContainerHost):
    """A container holding the host's network namespace; each node a container in it."""

    kind = "docker"
    #: A node is a process in another container (`remote`): its config goes inline, its
    #: files come back through `fetch`, its CPU from its container's cgroup (`usage`).

    def __init__(
        self,
        name: str,
        limits: Limits,
        network: Network,
        node_limits: Callable[[str], dict[str, Any]] | None = None,
        local_binary: str | None = None,
    ) -> None:
        super().__init__(name, limits)
        self.network = network
        self.run_id = network.run_id
        self.node_limits = node_limits  # a node's effective limits (RunHosts.limits_of)
        self.local_binary = local_binary
        self.image: str | None = None
        self.container = f"knee-{self.run_id}-{name}"
        self._address: str | None = None
        self._holder: subprocess.Popen[bytes] | None = None
        self._files: Path | None = None  # bind-mounted at FILES_DIR in every node's container
        self._starts = 0
        self._pids: dict[str, int] = {}  # container -> its main process's pid here
        self._cgroup: dict[str, Path] = {}  # container -> its cpuacct directory
        self.setup_s: float | None = None  # from setup() to its holder's address
        self._started = 0.0

    @property
    def address(self) -> str:
        return self._ready()

    def _labels(self, node: str = "") -> list[str]:
        out = ["--label", f"{RUN_LABEL}={self.run_id}", "--label", f"knee.host={self.name}"]
        return out + (["--label", f"knee.node={node}"] if node else [])

    def setup(self) -> None:
        """Starts the holder and returns: the hosts of a run start together, and the first
        use of a host's address waits for its holder (`_ready`)."""
        if self._holder is not None:
            return
        self._started = time.monotonic()
        self.network.setup()
        if self.local_binary is None:
            self.local_binary = node_binary()
        self.image = ensure_image(self.local_binary, self.run_id)
        self._files = Path(tempfile.mkdtemp(prefix=f"knee-docker-{self.run_id}-{self.name}-"))
        # The holder: `knee-node clock` waits on its stdin, attached here, so it lives as long
        # as this runner does (a killed runner's holder sees its stdin end and exits).
        self._holder = subprocess.Popen(
            docker(
                "run", "-i", "--rm", "--name", self.container, *self._labels(),
                "--network", self.network.name, "--memory", "16m",
                # No IPv6 in the host's namespace (no link-local address on its eth0): the
                # wire carries the nodes' IPv4 traffic only, as on an emulated host.
                "--sysctl", "net.ipv6.conf.all.disable_ipv6=1",
                "--sysctl", "net.ipv6.conf.default.disable_ipv6=1",
                self.image, "clock",
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        self.network.holders.append(self._holder)

    def _ready(self) -> str:
        if self._address is None:
            if self._holder is None:
                raise HostError(f"docker host {self.name}: setup() has not run")
            try:
                self._address = self._wait_address()
            except BaseException:
                self.teardown()
                raise
            self.setup_s = time.monotonic() - self._started
        return self._address

    def _wait_address(self) -> str:
        deadline = time.monotonic() + 30
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}} {{.State.Pid}}"
        while time.monotonic() < deadline:
            assert self._holder is not None
            if self._holder.poll() is not None:
                stderr = self._holder.stderr
                err = stderr.read().decode(errors="replace") if stderr is not None else ""
                lines = [x for x in err.splitlines() if x.strip()] or ["no message"]
                raise HostError(f"docker host {self.name}: its container ended: {lines[-1]}")
            try:
                out = run(["inspect", "--format", fmt, self.container], "inspecting").split()
            except HostError:
                out = []
            if len(out) == 2 and out[0] and out[1] != "0":
                if outside_range([f"{out[0]}/32"]):
                    raise HostError(
                        f"docker host {self.name}: address {out[0]} outside {KNEE_RANGE}"
                    )
                self._pids[self.container] = int(out[1])
                self._no_default_route(int(out[1]))
                self.network.no_ipv6()
                return out[0]
            time.sleep(0.05)
        raise HostError(f"docker host {self.name}: its container did not start within 30 s")

    def _no_default_route(self, pid: int) -> None:
        """Removes the default route the engine gives even an internal network's containers
        (through the bridge, i.e. this machine): as on an emulated host, the host reaches
        its run's subnet and nothing else ("Network is unreachable")."""
        try:
            res = subprocess.run(
                ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "route", "del", "default"],
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise HostError(f"docker host {self.name}: removing its default route: {e}") from None
        if res.returncode != 0 and "No such process" not in res.stderr:  # none to remove
            raise HostError(
                f"docker host {self.name}: removing its default route: {res.stderr.strip()}"
            )

    def binary(self, local_binary: str) -> str:
        return NODE_PATH

    def command(self, argv: list[str]) -> list[str]:
        self._ready()  # its network namespace exists
        if self.image is None or self._files is None:
            raise HostError(f"docker host {self.name}: setup() has not run")
        node = argv[argv.index("--name") + 1] if "--name" in argv else "node"
        self._starts += 1
        name = f"{self.container}-{node}-{self._starts}"
        limits = self.node_limits(node) if self.node_limits else self.limits.as_dict()
        opts = []
        if limits.get("cpuset"):
            opts += ["--cpuset-cpus", str(limits["cpuset"])]
        cores = limits.get("cpu_cores")
        cpus = len(parse_cpuset(limits["cpuset"])) if limits.get("cpuset") else None
        if cores is not None and (cpus is None or cores < cpus):  # a quota, not a cpuset's size
            opts += ["--cpus", f"{cores:g}"]
        if limits.get("memory_bytes"):
            opts += ["--memory", f"{int(limits['memory_bytes'])}b"]
        return docker(
            "run", "-i", "--rm", "--name", name, *self._labels(node),
            "--network", f"container:{self.container}",
            "-e", f"{LIFELINE_ENV}=1",
            "-v", f"{self._files}:{FILES_DIR}",
            *opts, self.image, *argv[1:],
        )  # fmt: skip

    def container_of(self, proc: subprocess.Popen[bytes]) -> str:
        args = list(proc.args)  # type: ignore[arg-type]
        return str(args[args.index("--name") + 1])

    def kill_container(self, container: str, word: str) -> None:
        run(["kill", "--signal", word, container], f"sending {word}")

    def scratch_path(self, local: Path) -> str:
        # In the host's folder: the nodes of one host share it, as on one machine; it goes
        # with the host at the run's end.
        return f"{FILES_DIR}/scratch-{local.name}"

    def copy_of(self, name: str) -> Path | None:
        if self._files is None:
            raise HostError(f"docker host {self.name}: setup() has not run")
        return self._files / name

    def _pid(self, container: str) -> int | None:
        return container_pid(container, self._pids)

    def usage(self, proc: subprocess.Popen[bytes]) -> dict[str, Any] | None:
        """The node's container: CPU seconds from its cgroup, resident memory of its main
        process (the node), as an ssh host's lifeline reports them."""
        container = self.container_of(proc)
        pid = self._pid(container)
        return None if pid is None else container_usage(container, pid, self._cgroup)

    def cgroup_of(self, proc: subprocess.Popen[bytes]) -> dict[str, Path]:
        """The node's container's cgroup directories (controller -> path), for the tests
        and for reading its limits back."""
        pid = self._pid(self.container_of(proc))
        return {} if pid is None else cgroup_dirs(pid)

    def interface_bytes(self) -> dict[str, int] | None:
        pid = self._pids.get(self.container)
        if pid is None:
            return None
        try:
            counts = eth0_bytes(Path(f"/proc/{pid}/net/dev").read_text())
        except OSError:
            return None
        return None if counts is None else {"rx_bytes": counts[0], "tx_bytes": counts[1]}

    def teardown(self) -> None:
        """Ends the holder's input (it exits, --rm removes it) without waiting: the network's
        teardown waits for every holder of the run, then removes what is left."""
        holder, self._holder = self._holder, None
        if holder is not None and holder.stdin is not None:
            with contextlib.suppress(OSError):
                holder.stdin.close()
        if self._files is not None:
            shutil.rmtree(self._files, ignore_errors=True)
            self._files = None
        self._address = None

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "container": self.container,
            "network": self.network.name,
            "subnet": self.network.subnet,
            "image": self.image,
            "daemon": socket(),
            "setup_s": self.setup_s,
        }
