"""The Docker Engine knee's container hosts share (docs/hosts.md, "Docker hosts" and "Swarm
hosts"): knee's own daemon (scripts/docker) and the check of its networks, the docker
command, the image made from the installed knee-node, the labels, and a container's cgroups.
`knee.hosts.docker` (a container per node) and `knee.hosts.swarm` (a service per node) both
import it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import ipaddress
import json
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any, Protocol

from knee.hosts import cgroups
from knee.hosts.base import LIFELINE_SIGNALS, Host, HostError, Unsupported

#: The daemon scripts/docker starts; $KNEE_DOCKER_HOST names another.
DEFAULT_SOCKET = "unix:///run/knee-docker/docker.sock"
#: Every address a container gets must be in knee's range (RFC 2544's benchmarking block).
KNEE_RANGE = ipaddress.ip_network("198.18.0.0/15")
#: Labels on what knee makes.
RUN_LABEL = "knee.run"
IMAGE_LABEL = "knee.node_sha256"
IMAGE_REPO = "knee-node"
#: Inside a container: knee-node, and the folder its files go to (a bind mount).
NODE_PATH = "/knee-node"
FILES_DIR = "/knee/files"
LIFELINE_ENV = "KNEE_NODE_STDIN_LIFELINE"
#: Seconds a docker command may take (an image import is the longest: ~20 MB).
COMMAND_TIMEOUT_S = 120.0


def socket() -> str:
    return os.environ.get("KNEE_DOCKER_HOST") or DEFAULT_SOCKET


def client() -> str:
    """Debian's docker client, else the one on PATH."""
    if os.access("/usr/bin/docker", os.X_OK):
        return "/usr/bin/docker"
    found = shutil.which("docker")
    if found is None:
        raise Unsupported("docker hosts: no docker client (run scripts/docker)")
    return found


class Daemon(Protocol):
    """A daemon reached some other way than a socket here: a swarm node's, over ssh
    (knee.hosts.node_daemon)."""

    def docker(self, *args: str) -> list[str]:
        """The local command that runs `docker ARGS` against that daemon."""
        ...


#: A daemon: a socket (unix://...) of this machine, or one reached another way; None: knee's.
DaemonRef = str | Daemon | None


def docker(*args: str, host: DaemonRef = None) -> list[str]:
    """The docker command for knee's daemon (or the daemon ``host``: a swarm node's)."""
    if host is None or isinstance(host, str):
        return [client(), "-H", host or socket(), *args]
    return host.docker(*args)


def run(args: list[str], what: str, stdin: bytes | None = None, host: DaemonRef = None) -> str:
    """Runs a docker command (on the daemon at ``host``, default knee's); its stdout. A
    failure is a one-line HostError."""
    try:
        res = subprocess.run(
            docker(*args, host=host),
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise HostError(f"docker: {what}: no answer within {COMMAND_TIMEOUT_S:g} s") from None
    except OSError as e:
        raise HostError(f"docker: {what}: {e}") from None
    if res.returncode != 0:
        lines = [x for x in res.stderr.decode(errors="replace").splitlines() if x.strip()]
        raise HostError(f"docker: {what}: {lines[-1] if lines else f'exit {res.returncode}'}")
    return res.stdout.decode(errors="replace")


def outside_range(subnets: list[str]) -> list[str]:
    """The subnets (IPv4) that are not inside 198.18.0.0/15."""
    out = []
    for s in subnets:
        net = ipaddress.ip_network(s, strict=False)
        if net.version == 4 and not net.subnet_of(KNEE_RANGE):  # type: ignore[arg-type]
            out.append(s)
    return out


def network_subnets(names: list[str], host: DaemonRef = None) -> dict[str, list[str]]:
    """Each network's IPAM subnets (on the daemon at ``host``, default knee's)."""
    if not names:
        return {}
    text = run(["network", "inspect", *names], "inspecting networks", host=host)
    return {
        n["Name"]: [c["Subnet"] for c in (n.get("IPAM") or {}).get("Config") or [] if "Subnet" in c]
        for n in json.loads(text)
    }


_checked: set[str] = set()


def check_daemon(host: DaemonRef = None) -> None:
    """Refuses (Unsupported, one line) a daemon (knee's, or the one at ``host``: a swarm
    node's) that does not answer, or one with a network outside 198.18.0.0/15 (Docker's
    defaults: 172.17.0.0/16, 10.0.0.0/8)."""
    daemon = host or socket()
    if str(daemon) in _checked:
        return
    try:
        run(["info", "--format", "{{.ID}}"], "connecting", host=daemon)
        names = run(
            ["network", "ls", "--format", "{{.Name}}"], "listing networks", host=daemon
        ).split()
        subnets = network_subnets(names, host=daemon)
    except HostError as e:
        raise Unsupported(
            f"docker hosts: no daemon at {daemon} ({e}); run scripts/docker"
        ) from None
    for name, nets in subnets.items():
        if bad := outside_range(nets):
            raise Unsupported(
                f"docker hosts: the daemon at {daemon} has network {name} on {bad[0]}, "
                f"outside {KNEE_RANGE}: use knee's own (scripts/docker)"
            )
    _checked.add(str(daemon))


# -- the image -----------------------------------------------------------------------------


def binary_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def libraries(binary: str) -> list[str]:
    """The shared libraries `ldd` lists for ``binary`` (and its loader), as absolute paths."""
    try:
        out = subprocess.run(
            ["ldd", binary], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise HostError(f"docker image: ldd {binary}: {e}") from None
    paths = []
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/"):
                paths.append(word)
                break
    return paths


def image_tarball(binary: str) -> bytes:
    """A root file system: knee-node at /knee-node and its libraries at their own paths."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(binary, arcname=NODE_PATH.lstrip("/"))
        for lib in libraries(binary):
            tar.add(os.path.realpath(lib), arcname=lib.lstrip("/"))  # a link's target's bytes
        for d in ("tmp", FILES_DIR.lstrip("/")):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    return buf.getvalue()


def image_name(sha: str) -> str:
    return f"{IMAGE_REPO}:{sha[:16]}"


_image_lock = threading.Lock()


def ensure_image(binary: str, run_id: str) -> str:
    """The image of ``binary``, made once per build (named by its hash) and reused; older
    knee-node images not used by a container are removed (one image per build at most)."""
    sha = binary_sha256(binary)
    name = image_name(sha)
    with _image_lock:
        try:
            run(["image", "inspect", "--format", "{{.Id}}", name], "looking for the image")
            return name
        except HostError:
            pass
        run(
            [
                "import",
                "--change", f'ENTRYPOINT ["{NODE_PATH}"]',
                "--change", f"LABEL {IMAGE_LABEL}={sha} {RUN_LABEL}={run_id}",
                "-", name,
            ],
            f"importing {binary} as {name}",
            stdin=image_tarball(binary),
        )  # fmt: skip
        for other in knee_images():
            if other != name:
                with contextlib.suppress(HostError):  # in use by a running container
                    run(["image", "rm", other], f"removing {other}")
    return name


def knee_images() -> list[str]:
    out = run(
        ["image", "ls", "--filter", f"label={IMAGE_LABEL}", "--format", "{{.Repository}}:{{.Tag}}"],
        "listing images",
    )
    return out.split()


# -- a container's cgroups ------------------------------------------------------------


def cgroup_dirs(pid: int) -> dict[str, Path]:
    """Process ``pid``'s cgroup directory in each hierarchy knee knows."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return {}
    return cgroup_dirs_in(text, cgroups.hierarchies())


def cgroup_dirs_in(proc_cgroup: str, hierarchies: dict[str, cgroups.Hierarchy]) -> dict[str, Path]:
    """The directory, in each of ``hierarchies``, of the cgroups a process's /proc/PID/cgroup
    (``proc_cgroup``) names: on this machine, or on a swarm node (its mounts read there)."""
    lines = proc_cgroup.splitlines()
    out: dict[str, Path] = {}
    for controller, h in hierarchies.items():
        for line in lines:
            _, names, path = line.split(":", 2)
            if (h.version == 1 and controller in names.split(",")) or (
                h.version == 2 and names == ""
            ):
                out[controller] = h.directory(path)
                break
    return out


def cpuacct_dir(pid: int) -> Path | None:
    return cgroup_dirs(pid).get("cpuacct")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cgroup_cpu_s(path: Path) -> float | None:
    return cpu_s(_read(path / "cpuacct.usage"), _read(path / "cpu.stat"))


def cpu_s(usage: str | None, stat: str | None) -> float | None:
    """CPU seconds from a cgroup's cpuacct.usage (v1, ns) or cpu.stat (v2, usage_usec)."""
    try:
        if usage:
            return int(usage) / 1e9
        for line in (stat or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except ValueError:
        return None
    return None


def rss_bytes(status: str | None) -> int | None:
    """The resident memory in a /proc/PID/status (VmRSS, kB)."""
    for line in (status or "").splitlines():
        if line.startswith("VmRSS:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def eth0_bytes(net_dev: str | None) -> tuple[int, int] | None:
    """(rx, tx) bytes of eth0 in a /proc/PID/net/dev."""
    for line in (net_dev or "").splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "eth0":
            f = rest.split()
            try:
                return int(f[0]), int(f[8])
            except (IndexError, ValueError):
                return None
    return None


def container_pid(container: str, pids: dict[str, int], host: DaemonRef = None) -> int | None:
    """The host pid of a container's main process (kept in `pids` once known); None while
    it has none (not started, or ended). ``host``: its daemon, if not knee's."""
    pid = pids.get(container)
    if pid is None:
        try:
            out = run(["inspect", "--format", "{{.State.Pid}}", container], "inspecting", host=host)
        except HostError:
            return None
        if not out.strip().isdigit() or out.strip() == "0":
            return None
        pid = pids[container] = int(out)
    return pid


def container_usage(container: str, pid: int, paths: dict[str, Path]) -> dict[str, Any] | None:
    """A container's CPU seconds from its cgroup (its path kept in `paths`), and the resident
    memory of its main process (the node), as an ssh host's lifeline reports them."""
    path = paths.get(container) or cpuacct_dir(pid)
    if path is None:
        return None
    paths[container] = path
    cpu = cgroup_cpu_s(path)
    if cpu is None:
        return None
    return {"cpu_s": cpu, "rss_bytes": rss_bytes(_read(Path(f"/proc/{pid}/status")))}


# -- a container host's files ------------------------------------------------------------


class ContainerHost(Host):
    """A host whose nodes run in containers (docker, swarm): a node's files are written at
    FILES_DIR in its container and come to a folder here, from which `fetch` moves them."""

    remote = True

    def node_path(self, local: Path) -> str:
        return f"{FILES_DIR}/{local.name}"

    def container_of(self, proc: subprocess.Popen[bytes]) -> str | None:
        """The container of the node ``proc`` started, None while it has none."""
        raise NotImplementedError

    def kill_container(self, container: str, word: str) -> None:
        """`docker kill --signal WORD` on the container's daemon."""
        raise NotImplementedError

    def signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        word = LIFELINE_SIGNALS.get(sig)
        if word is None:
            raise HostError(f"{self.kind} host {self.name}: signal {sig} is not sent to containers")
        if proc.poll() is not None:
            return
        with contextlib.suppress(HostError):  # the container is gone, or not there yet
            container = self.container_of(proc)
            if container is None:  # not started: its starter ends the wait
                proc.kill()
                return
            self.kill_container(container, word)

    def copy_of(self, name: str) -> Path | None:
        """The copy here of the node file ``name``, None if the node wrote none."""
        raise NotImplementedError

    def fetch(self, node_path: str, local: Path) -> None:
        src = self.copy_of(Path(node_path).name)
        if src is None or not src.is_file():
            raise HostError(f"{self.kind} host {self.name}: the node wrote no {node_path}")
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(src, local)
