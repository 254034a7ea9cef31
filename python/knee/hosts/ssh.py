"""A real machine reached with OpenSSH's own client (docs/hosts.md, "SSH hosts").

setup() connects once (a ControlMaster every later command shares), checks that the remote
machine runs the local knee-node's architecture, copies knee-node and the lifeline
(`lifeline.sh`) into a fresh remote temp folder, and measures the remote clock's offset.
A node is then a local `ssh` process running `sh lifeline.sh knee-node ARGS` remotely: its
stdout and stderr are the node's; its stdin is the lifeline, which carries signals and stops
the node when it ends (the runner closed it, or the connection was lost).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import select
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from knee.hosts.base import LIFELINE_SIGNALS, Host, HostError, Limits, Unsupported
from knee.hosts.local import node_binary

#: Seconds to connect and authenticate before a host counts as unreachable.
CONNECT_TIMEOUT_S = 10
#: Keepalives on the master connection: a silent peer is noticed after about
#: INTERVAL * COUNT seconds, and every session (node) on it then ends.
SERVER_ALIVE_INTERVAL_S = 1
SERVER_ALIVE_COUNT = 3
#: An idle master outlives its last session this long (between points), then exits by itself,
#: so a runner that died without teardown leaves no connection behind for long.
CONTROL_PERSIST_S = 60
#: Seconds a short remote command (uname, mktemp, rm) may take.
COMMAND_TIMEOUT_S = 30
#: Seconds a copy (knee-node out, a sample file back) may take; a dead link fails sooner
#: through the keepalives.
TRANSFER_TIMEOUT_S = 600
#: Clock offset: round trips made, the share of them with the shortest RTT kept, and the
#: longest wait for one reply.
CLOCK_ROUNDS = 50
CLOCK_KEEP_FRACTION = 0.2
CLOCK_REPLY_TIMEOUT_S = 5
#: A unix socket's path (the ControlPath) must fit in sun_path (108 bytes), with the suffix
#: ssh adds while creating it; a longer temp dir falls back to /tmp.
CONTROL_DIR_MAX_CHARS = 60

#: ELF e_machine -> the `uname -m` names of the machines that run such a binary.
ELF_MACHINES: dict[int, tuple[str, ...]] = {
    3: ("i386", "i486", "i586", "i686"),
    21: ("ppc64", "ppc64le"),
    22: ("s390x",),
    40: ("armv6l", "armv7l", "armv8l"),
    62: ("x86_64",),
    183: ("aarch64", "arm64"),
    243: ("riscv64",),
    258: ("loongarch64",),
}

LIFELINE = "lifeline.sh"
NODE_BINARY = "knee-node"


def elf_machine(path: str | Path) -> int:
    """The e_machine field of an ELF file's header (what CPU it is built for)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError as e:
        raise HostError(f"reading {path}: {e.strerror}") from None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] not in (1, 2):
        raise HostError(f"{path} is not an ELF executable")
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")


def clock_offset(
    sent_ns: np.ndarray, remote_ns: np.ndarray, received_ns: np.ndarray
) -> tuple[int, int]:
    """(offset_ns, uncertainty_ns) of a remote clock from round trips: remote time minus
    local time. Each round trip's estimate is remote - (sent + received) / 2, off by at
    most half its RTT; the median of the shortest RTTs' estimates is the offset. The bound
    is half the shortest RTT (the best estimate's own bound) plus how far the kept
    estimates spread."""
    rtt = received_ns - sent_ns
    estimates = remote_ns - sent_ns - rtt / 2
    kept = estimates[np.argsort(rtt)[: max(1, int(len(rtt) * CLOCK_KEEP_FRACTION))]]
    offset = float(np.median(kept))
    uncertainty = float(rtt.min()) / 2 + float(kept.max() - kept.min())
    return round(offset), int(np.ceil(uncertainty))


def last_line(text: bytes) -> str:
    """The line of a failed command's stderr that says why: knee-node's `error:` line (a
    usage text may follow it), else the last (ssh's own message)."""
    lines = [line.strip() for line in text.decode(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return (errors or lines or ["no message"])[-1]


def measure_clock(command: list[str], rounds: int = CLOCK_ROUNDS) -> tuple[int, int]:
    """(offset_ns, uncertainty_ns) of the clock of `knee-node clock` run by ``command`` (over
    ssh, or `knee-node clock --dial` to a swarm task over its overlay), from ``rounds``
    round trips on its stdin and stdout (`clock_offset`). A failure is a HostError naming
    why."""
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    times = np.zeros((3, rounds), dtype=np.int64)  # sent, remote, received
    failure = None
    try:
        for i in range(rounds):
            sent = time.monotonic_ns()
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            if not select.select([proc.stdout], [], [], CLOCK_REPLY_TIMEOUT_S)[0]:
                failure = f"no reply within {CLOCK_REPLY_TIMEOUT_S} s"
                break
            line = proc.stdout.readline()
            received = time.monotonic_ns()
            if not line.strip().isdigit():
                failure = "knee-node clock did not answer"
                break
            times[:, i] = (sent, int(line), received)
    except BrokenPipeError:
        failure = "knee-node clock ended early"
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stderr = proc.stderr.read() if failure else b""
        proc.stdout.close()
        proc.stderr.close()
    if failure:
        raise HostError(f"{failure} ({last_line(stderr)})")
    return clock_offset(*times)


def ssh_options(
    control_dir: Path, user: str | None, port: int | None, identity_file: str | None
) -> list[str]:
    """The ssh command and its options for one destination, but the destination: one master
    connection (its socket ``control_dir``/master) every command shares, the host's key
    remembered in ``control_dir``/known_hosts. An ssh host's and a swarm node's (its daemon
    reached over ssh, knee.hosts.node_daemon)."""
    cmd = [
        "ssh",
        "-T",  # no terminal: the node's stdout stays a clean stream of JSON lines
        "-a",
        "-x",
        "-o", "BatchMode=yes",  # never a password prompt: a key or a one-line failure
        "-o", "LogLevel=ERROR",
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={control_dir}/master",
        "-o", f"ControlPersist={CONTROL_PERSIST_S}",
        # A host seen for the first time is accepted and remembered for this run only, in
        # the run's own file: every later connection of the run must show the same key,
        # and the user's ~/.ssh/known_hosts is neither written nor consulted (throwaway
        # servers reuse an address with a new key).
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", f"UserKnownHostsFile={control_dir}/known_hosts",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", f"ServerAliveInterval={SERVER_ALIVE_INTERVAL_S}",
        "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}",
    ]  # fmt: skip
    if port is not None:
        cmd += ["-p", str(port)]
    if user:
        cmd += ["-l", user]
    if identity_file:
        cmd += ["-i", identity_file, "-o", "IdentitiesOnly=yes"]
    return cmd


def control_dir(prefix: str = "knee-ssh-") -> Path:
    """A fresh folder (named ``prefix``...) for a master connection's socket and known_hosts:
    in the temp dir, or /tmp where that path is too long for a unix socket
    (CONTROL_DIR_MAX_CHARS)."""
    made = tempfile.mkdtemp(prefix=prefix)
    if len(made) > CONTROL_DIR_MAX_CHARS:
        shutil.rmtree(made, ignore_errors=True)
        made = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    return Path(made)


class SshHost(Host):
    """A machine reached over SSH; nodes run there as the ssh user, without limits."""

    kind = "ssh"
    remote = True

    def __init__(
        self,
        name: str,
        limits: Limits,
        address: str,
        user: str | None = None,
        port: int | None = None,
        identity_file: str | None = None,
        run_id: str = "run",
        local_binary: str | None = None,
    ) -> None:
        super().__init__(name, limits)
        if not limits.empty():
            raise Unsupported(
                f"host {name}: no limits on an ssh host (remote cgroups are not managed)"
            )
        if shutil.which("ssh") is None:
            raise Unsupported(f"host {name}: no ssh client here (install openssh-client)")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise HostError(f"host {name}: address {address!r} is not an IP address") from None
        self._address = address
        self.user = user
        self.port = port
        self.identity_file = identity_file
        self.run_id = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:40] or "run"
        self.local_binary = local_binary  # None: this machine's (node_binary())
        self.remote_dir: str | None = None
        self.uname: dict[str, str] = {}  # arch, kernel, hostname
        self.clock_offset_ns: int | None = None  # remote CLOCK_MONOTONIC - local
        self.clock_uncertainty_ns: int | None = None
        self.setup_s: float | None = None
        self._copied_binary: Path | None = None
        self._control_dir: Path | None = None

    @property
    def address(self) -> str:
        return self._address

    @property
    def control_path(self) -> str | None:
        """The master connection's socket while set up (`ssh -o ControlPath=... -O check`)."""
        return None if self._control_dir is None else f"{self._control_dir}/master"

    # -- the ssh client --------------------------------------------------------------------

    def _ssh(self, *args: str) -> list[str]:
        """The ssh command with this host's options, then ``args`` (before the destination)."""
        assert self._control_dir is not None
        options = ssh_options(self._control_dir, self.user, self.port, self.identity_file)
        return [*options, *args, self._address]

    def _remote(self, command: str) -> list[str]:
        """The local command that runs the shell ``command`` on the host."""
        return [*self._ssh(), "--", command]

    def _target(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{user}{self._address}{port}"

    def _error(self, what: str, detail: str) -> HostError:
        return HostError(f"ssh host {self.name} ({self._target()}): {what}: {detail}")

    def _run(
        self,
        command: str,
        what: str,
        stdin: bytes | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> str:
        """Runs ``command`` on the host; its stdout. A failure is a one-line HostError."""
        try:
            res = subprocess.run(
                self._remote(command),
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise self._error(what, f"no answer within {timeout_s:g} s") from None
        if res.returncode != 0:
            raise self._error(what, last_line(res.stderr))
        return res.stdout.decode(errors="replace")

    def _need_setup(self) -> str:
        if self.remote_dir is None:
            raise HostError(f"ssh host {self.name}: setup() has not run")
        return self.remote_dir

    # -- Host ------------------------------------------------------------------------------

    def setup(self) -> None:
        if self.remote_dir is not None:
            return
        started = time.monotonic()
        if self.local_binary is None:
            self.local_binary = node_binary()
        local = Path(self.local_binary)
        machine = elf_machine(local)
        self._control_dir = control_dir()
        try:
            self._connect_and_check(local, machine)
            self._copy(local)
            self._measure_clock()
        except BaseException:
            self.teardown()
            raise
        self.setup_s = time.monotonic() - started

    def _connect_and_check(self, local: Path, machine: int) -> None:
        out = self._run("uname -m; uname -r; uname -n", "connecting").split("\n")
        self.uname = dict(zip(("arch", "kernel", "hostname"), out, strict=False))
        arch = self.uname.get("arch", "")
        if arch not in ELF_MACHINES.get(machine, ()):
            built = "/".join(ELF_MACHINES.get(machine, (f"ELF machine {machine}",)))
            raise self._error("architecture", f"the host is {arch}, {local} is built for {built}")

    def _copy(self, local: Path) -> None:
        """A fresh remote temp folder with knee-node (checked to run there) and the lifeline."""
        made = self._run(f"mktemp -d /tmp/knee-{self.run_id}.XXXXXX", "making a temp folder")
        self.remote_dir = made.strip()
        node = shlex.quote(f"{self.remote_dir}/{NODE_BINARY}")
        self._run(
            f"cat > {node} && chmod 755 {node} && {node} --version",
            f"copying {local}",
            stdin=local.read_bytes(),
            timeout_s=TRANSFER_TIMEOUT_S,
        )
        self._copied_binary = local.resolve()
        script = Path(__file__).with_name(LIFELINE).read_bytes()
        lifeline = shlex.quote(f"{self.remote_dir}/{LIFELINE}")
        self._run(f"cat > {lifeline}", "copying the lifeline", stdin=script)

    def _measure_clock(self) -> None:
        """CLOCK_ROUNDS round trips to `knee-node clock` over the master."""
        remote_dir = self._need_setup()
        command = self._remote(f"exec {shlex.quote(f'{remote_dir}/{NODE_BINARY}')} clock")
        try:
            self.clock_offset_ns, self.clock_uncertainty_ns = measure_clock(command)
        except HostError as e:
            raise self._error("clock", str(e)) from None

    def binary(self, local_binary: str) -> str:
        remote_dir = self._need_setup()
        if Path(local_binary).resolve() != self._copied_binary:
            raise HostError(
                f"ssh host {self.name}: setup() copied {self._copied_binary}, not {local_binary}"
            )
        return f"{remote_dir}/{NODE_BINARY}"

    def command(self, argv: list[str]) -> list[str]:
        lifeline = f"{self._need_setup()}/{LIFELINE}"
        # ssh hands the remote login shell one string: every argument is quoted for it
        # (the config is inline JSON).
        return self._remote(" ".join(["exec", "sh", *map(shlex.quote, [lifeline, *argv])]))

    def signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        word = LIFELINE_SIGNALS.get(sig)
        if word is None:
            raise HostError(f"ssh host {self.name}: signal {sig} has no lifeline command")
        if proc.stdin is None:
            raise HostError(f"ssh host {self.name}: the node was started without a lifeline")
        try:
            proc.stdin.write(f"{word}\n".encode())
            proc.stdin.flush()
        except ValueError:
            pass  # the runner closed the lifeline: the node is stopping
        except BrokenPipeError:
            # The lifeline is gone, so is the node. Closed here, so that the word left in
            # the buffer does not fail the runner's own close() later.
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()

    def node_path(self, local: Path) -> str:
        return f"{self._need_setup()}/{local.name}"

    def fetch(self, node_path: str, local: Path) -> None:
        self._need_setup()
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + ".part")
        try:
            with open(part, "wb") as out:
                res = subprocess.run(
                    self._remote(f"cat {shlex.quote(node_path)}"),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.PIPE,
                    timeout=TRANSFER_TIMEOUT_S,
                )
        except subprocess.TimeoutExpired:
            part.unlink(missing_ok=True)
            raise self._error(f"fetching {node_path}", "timed out") from None
        if res.returncode != 0:
            part.unlink(missing_ok=True)
            raise self._error(f"fetching {node_path}", last_line(res.stderr))
        part.replace(local)
        # Fetched files go: a long sweep must not fill the host's /tmp.
        self._run(f"rm -f {shlex.quote(node_path)}", f"removing {node_path}")

    def teardown(self) -> None:
        """Stops the nodes still running (TERM, KILL after the lifeline's grace), removes the
        remote folder, closes the master. Never raises: a host already gone stopped its
        nodes itself when their channels closed."""
        if self._control_dir is None:
            return
        remote_dir, self.remote_dir = self.remote_dir, None
        if remote_dir is not None and remote_dir.startswith("/tmp/knee-"):
            d = shlex.quote(remote_dir)
            try:
                self._run(
                    f"if [ -f {d}/{LIFELINE} ]; then sh {d}/{LIFELINE} --stop-all; fi; rm -rf {d}",
                    "cleaning up",
                )
            except (HostError, OSError):
                pass
        try:
            subprocess.run(
                self._ssh("-O", "exit"),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self._control_dir = None

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "user": self.user,
            "port": self.port,
            "remote": self.uname,
            "clock_offset_ns": self.clock_offset_ns,
            "clock_uncertainty_ns": self.clock_uncertainty_ns,
            "setup_s": self.setup_s,
        }
