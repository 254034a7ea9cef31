"""A swarm node's daemon as knee reaches it (docs/hosts.md, "Swarm hosts"): this machine's
node through knee's own socket, any other node over OpenSSH, as an ssh host is reached.

Another node names its ssh destination in its label ``knee.ssh=[USER@]HOST[:PORT]``
(`docker node update --label-add knee.ssh=root@198.19.254.2 NODE`; scripts/docker worker
sets it for its worker). knee opens ONE ssh connection to it per swarm host (a ControlMaster
every later command shares; the options are an ssh host's, `knee.hosts.ssh.ssh_options`:
BatchMode, the host's key accepted once and kept for the run, keepalives), with the identity
file of the host's table (else ssh's own keys). Over it runs every read and action on that
node: the remote `docker` CLI (ps, inspect, logs, wait, kill, load: the remote login's own
daemon, DOCKER_HOST if its sshd sets one), and `cat`s of /proc and the cgroup files, one
ssh command per sample whatever the number of files. The node needs sshd, the docker CLI,
and a login allowed to use its daemon.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from knee.hosts import cgroups, engine
from knee.hosts.base import HostError
from knee.hosts.ssh import COMMAND_TIMEOUT_S, control_dir, last_line, ssh_options

#: A swarm node's label naming its ssh destination.
SSH_LABEL = "knee.ssh"
#: That label, as `docker node inspect` formats it.
SSH_FORMAT = f'{{{{index .Spec.Labels "{SSH_LABEL}"}}}}'
#: [USER@]HOST[:PORT]: a login name, a host name or IPv4 address, a port.
DESTINATION_RE = re.compile(
    r"^(?:(?P<user>[A-Za-z_][A-Za-z0-9_.-]{0,31})@)?"
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252})(?::(?P<port>[0-9]{1,5}))?$"
)
#: Seconds a sample's read may take (a sample is taken every second or so).
READ_TIMEOUT_S = 10.0
#: Files one read takes at most (a sample reads three per task): a bound on the command line.
MAX_FILES = 256
#: Between files in a read's output (never in /proc or cgroup files), and what a file that
#: could not be read prints instead of its bytes.
FILE_MARK = "\x1e"
UNREADABLE = "\x1f"
#: Prints each file given as an argument after a mark line with its path.
READ_SCRIPT = 'for f; do printf "\\036%s\\n" "$f"; cat -- "$f" 2>/dev/null || printf "\\037"; done'
#: The running containers that docker ps's filters (after $1, the docker CLI) select, each
#: as a mark line with its name, then its network namespace's /proc/PID/net/dev.
INTERFACES_SCRIPT = (
    'd=$1; shift; "$d" ps -q "$@" | xargs -r "$d" inspect --format "{{.Name}} {{.State.Pid}}"'
    ' | while read -r n p; do printf "\\036%s\\n" "${n#/}"; cat "/proc/$p/net/dev"'
    " 2>/dev/null; done"
)


def parse_destination(text: str) -> tuple[str | None, str, int | None]:
    """(user, host, port) of ``[USER@]HOST[:PORT]``; a HostError naming the form if not."""
    m = DESTINATION_RE.match(text)
    port = int(m["port"]) if m and m["port"] else None
    if m is None or (port is not None and not 1 <= port <= 65_535):
        raise HostError(f"{SSH_LABEL}={text!r} is not [USER@]HOST[:PORT]")
    return m["user"], m["host"], port


class NodeDaemon:
    """A swarm node's daemon: this machine's (``socket``), or another node's over ssh
    (``destination``, [USER@]HOST[:PORT])."""

    def __init__(
        self,
        socket: str | None = None,
        destination: str | None = None,
        identity_file: str | None = None,
        control: str | None = None,
        control_prefix: str = "knee-ssh-",
    ) -> None:
        if (socket is None) == (destination is None):
            raise ValueError("a node's daemon is a socket here or an ssh destination")
        self.socket = socket
        self.destination = destination
        self.identity_file = identity_file
        self.control = Path(control) if control else None  # the master's folder, once open
        self.control_prefix = control_prefix  # its name's start (a run's clean-up finds it)
        self.user, self.host, self.port = (
            parse_destination(destination) if destination else (None, "", None)
        )

    def __str__(self) -> str:
        return self.socket or f"ssh://{self.destination}"

    @property
    def remote(self) -> bool:
        return self.destination is not None

    # -- commands ------------------------------------------------------------------------

    def _ssh(self, command: list[str]) -> list[str]:
        if self.control is None:
            self.control = control_dir(self.control_prefix)
        options = ssh_options(self.control, self.user, self.port, self.identity_file)
        return [*options, self.host, "--", shlex.join(command)]

    def docker(self, *args: str) -> list[str]:
        """The local command that runs `docker ARGS` against this daemon."""
        if self.socket is not None:
            return engine.docker(*args, host=self.socket)
        return self._ssh(["docker", *args])

    def shell(self, script: str, *args: str) -> list[str]:
        """The local command that runs `sh -c SCRIPT sh ARGS` on the node."""
        command = ["sh", "-c", script, "sh", *args]
        return command if self.socket is not None else self._ssh(command)

    def _docker_cli(self) -> str:
        return engine.client() if self.socket is not None else "docker"

    def run_shell(self, script: str, args: list[str], what: str) -> str:
        """Runs ``script`` on the node (one ssh command); its stdout, or a one-line HostError."""
        try:
            res = subprocess.run(
                self.shell(script, *args),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=READ_TIMEOUT_S,
                env=None
                if self.socket is None
                else {"PATH": "/usr/bin:/bin", "DOCKER_HOST": self.socket},
            )
        except subprocess.TimeoutExpired:
            raise HostError(f"{self}: {what}: no answer within {READ_TIMEOUT_S:g} s") from None
        except OSError as e:
            raise HostError(f"{self}: {what}: {e}") from None
        if res.returncode != 0:
            raise HostError(f"{self}: {what}: {last_line(res.stderr)}")
        return res.stdout.decode(errors="replace")

    def read(self, paths: list[str]) -> dict[str, str | None]:
        """The text of each of ``paths`` on the node (None: not readable), in one command."""
        if len(paths) > MAX_FILES:
            raise HostError(f"{self}: {len(paths)} files to read, {MAX_FILES} at most")
        out: dict[str, str | None] = dict.fromkeys(paths)
        text = self.run_shell(READ_SCRIPT, paths, "reading " + " ".join(paths[:3]))
        for chunk in text.split(FILE_MARK)[1:]:
            path, _, body = chunk.partition("\n")
            out[path] = None if body == UNREADABLE else body
        return out

    def interfaces(self, filters: list[str]) -> dict[str, str]:
        """/proc/PID/net/dev of each running container ``filters`` (docker ps --filter
        values) select, by container name, in one command."""
        args = [x for f in filters for x in ("--filter", f)]
        text = self.run_shell(INTERFACES_SCRIPT, [self._docker_cli(), *args], "reading interfaces")
        out = {}
        for chunk in text.split(FILE_MARK)[1:]:
            name, _, body = chunk.partition("\n")
            out[name] = body
        return out

    def cgroup_dirs(self, pid: int) -> dict[str, PurePosixPath]:
        """Process ``pid``'s cgroup directory on the node in each hierarchy knee knows, from
        its /proc/PID/cgroup and the node's mounts, read in one command."""
        got = self.read([f"/proc/{pid}/cgroup", "/proc/self/mountinfo"])
        proc_cgroup, mountinfo = got[f"/proc/{pid}/cgroup"], got["/proc/self/mountinfo"]
        if not proc_cgroup or not mountinfo:
            return {}
        hierarchies = cgroups.parse_hierarchies(mountinfo, proc_cgroup)
        dirs = engine.cgroup_dirs_in(proc_cgroup, hierarchies)
        return {k: PurePosixPath(v) for k, v in dirs.items()}

    # -- the connection ------------------------------------------------------------------

    def close(self) -> None:
        """Closes the master connection and removes its folder (nothing for a socket)."""
        if self.control is None:
            return
        if self.remote:
            try:
                subprocess.run(
                    [*ssh_options(self.control, self.user, self.port, self.identity_file),
                     "-O", "exit", self.host],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=COMMAND_TIMEOUT_S,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.control, ignore_errors=True)
        self.control = None

    def to_arg(self) -> str:
        """This daemon as one argument (a swarm task's agent shares the master)."""
        if self.remote and self.control is None:
            self.control = control_dir(self.control_prefix)
        return json.dumps(
            {"socket": self.socket, "destination": self.destination,
             "identity_file": self.identity_file,
             "control": str(self.control) if self.control else None}
        )  # fmt: skip

    @classmethod
    def from_arg(cls, text: str) -> NodeDaemon:
        d = json.loads(text)
        return cls(d["socket"], d["destination"], d["identity_file"], d["control"])
