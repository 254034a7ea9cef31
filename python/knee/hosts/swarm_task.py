"""The agent of one task of a swarm host (knee.hosts.swarm): the local process the runner
starts for a node placed on a swarm host, as `ssh` is for an ssh host.

    python3 swarm_task.py --docker D --node NODE --service S --slot N --replicas R
                          --folder SLOT_DIR --network NET --manager SOCK --image IMAGE
                          --run RUN --control-port C [--gate --clock-port P]

The node protocol runs over the run's overlay network, not through a folder: the task has
no bind mount.
1. waits for the task of slot N of service S to have its container and its overlay address
   (through NODE: the daemon of the task's node, knee.hosts.node_daemon's, over the ssh
   master of its host for another node);
2. dials the node's control port C at that address through `knee-node relay --dial` in a
   container of this machine's node (SOCK of --manager) on that network, whose stdin and
   stdout are this agent's pipes; sends the slot's config (SLOT_DIR/config.json, `listen`
   on 0.0.0.0 given the task's address) as the first line. The rest of that stdin is the
   node's lifeline: it ends when this agent's own stdin (the runner's pipe) ends;
3. with --gate (a generator, whose sample times need its clock; a server's are durations on
   its own clock): checks the task's clock as the ssh hosts do (`knee-node clock` round
   trips), over the overlay network too: the node answers on its address, port P
   (`KNEE_NODE_CLOCK_LISTEN`), and `knee-node clock --dial` in another container of this
   machine's node relays the round trips. Prints `{"event": "clock", ...}` (the node's
   events log keeps it), marks the slot ready, waits until the R replicas are, and writes
   one start time for all (`start UNIX_NS`, agreed through a file made once) on the
   lifeline; prints `{"event": "start_at", ...}`;
4. passes the node's stdout lines on, except its files' frames (`{"event": "file", "name",
   "offset", "bytes"}` and that many bytes: what a sample file, histogram or output gained,
   pushed before each progress line and at the node's end), appended to their files in
   SLOT_DIR; relays its stderr (`docker logs -f`) and exits with its exit code (a node
   killed mid-point keeps the files as far as they came).
Errors are one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the knee package's folder

from knee.hosts.base import HostError  # noqa: E402
from knee.hosts.node_daemon import NodeDaemon  # noqa: E402
from knee.hosts.ssh import measure_clock  # noqa: E402

#: Seconds for the task to start, its node to open its config, the replicas to be ready.
WAIT_S = 60.0
POLL_S = 0.05
#: The replicas start this long after the last is ready: the start lines are read within
#: milliseconds; the margin covers a loaded machine's scheduling.
START_MARGIN_S = 0.5
#: Round trips of the clock check (the ssh hosts make 50 over a network; a task is local).
CLOCK_ROUNDS = 20
#: A pushed file's name (a node's files are named by the runner: NAME.pNNN.kind) and size:
#: a point's samples file is at most a few hundred MB; beyond, the push is refused.
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
MAX_FILE_BYTES = 1 << 34
#: A stdout line longer than this is not the node's (its events are a few kB at most).
MAX_LINE_BYTES = 1 << 20
#: Bytes copied at once from a pushed frame to its file's local copy.
CHUNK_BYTES = 1 << 20
#: Seconds the node's files may take to arrive after its task ended.
FILES_WAIT_S = 60.0

_print_lock = threading.Lock()


def fail(message: str) -> None:
    print(f"swarm task: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def emit(event: dict[str, object]) -> None:
    with _print_lock:
        print(json.dumps(event), flush=True)


def pass_on(stdout: IO[bytes], folder: Path, problems: list[str]) -> None:
    """The node's stdout, read from the relay: lines go on to this agent's stdout, file
    frames (``{"event": "file", "name", "offset", "bytes"}`` and that many bytes: what the
    file gained, pushed before each progress line and at the node's end) are appended to
    the file of that name in ``folder``. A frame whose offset is not the file's size there
    is refused, in one line on stderr (the node's log), and its bytes skipped."""
    out = sys.stdout.buffer
    refused: set[str] = set()  # files refused once: their later frames cannot fit either
    while line := stdout.readline(MAX_LINE_BYTES):
        if line.startswith(b'{"event":"file",'):
            try:
                head = json.loads(line)
                name, offset, size = str(head["name"]), int(head["offset"]), int(head["bytes"])
            except (ValueError, KeyError, TypeError):
                problems.append(f"a bad file header: {line[:200]!r}")
                return
            if not FILE_NAME_RE.match(name) or not 0 <= offset <= offset + size <= MAX_FILE_BYTES:
                problems.append(f"a refused file: {name[:200]!r}, {size} bytes at {offset}")
                return
            path = folder / name
            have = path.stat().st_size if path.exists() else 0
            keep = offset == have and name not in refused
            if not keep and name not in refused:
                refused.add(name)
                print(
                    f"swarm task: {name}: a frame at offset {offset}, the copy has {have} "
                    "bytes: refused, with the file's later frames",
                    file=sys.stderr,
                    flush=True,
                )
            with open(path if keep else os.devnull, "ab") as f:
                left = size
                while left > 0 and (chunk := stdout.read(min(left, CHUNK_BYTES))):
                    f.write(chunk)
                    left -= len(chunk)
            if left:  # the connection ended inside a frame: its start is kept
                problems.append(f"{name}: {left} of a frame's {size} bytes missing")
                return
            continue
        with _print_lock:
            out.write(line)
            out.flush()


def pass_stderr(stderr: IO[bytes]) -> None:
    """The relay's stderr on this agent's, but the client's warning that the daemon does
    not forward (knee's daemon turns forwarding off on purpose)."""
    for line in stderr:
        if not line.startswith(b"WARNING: IPv4 forwarding is disabled"):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--docker", "--node", "--service", "--folder", "--network", "--manager",
                 "--image", "--run"):  # fmt: skip
        ap.add_argument(name, required=True)
    ap.add_argument("--control-port", type=int, required=True)
    ap.add_argument("--clock-port", type=int)
    ap.add_argument("--slot", type=int, required=True)
    ap.add_argument("--replicas", type=int, required=True)
    ap.add_argument("--gate", action="store_true")
    a = ap.parse_args()
    folder = Path(a.folder)
    node = NodeDaemon.from_arg(a.node)

    def docker(*args: str) -> str:
        res = subprocess.run(
            node.docker(*args), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=WAIT_S,
        )  # fmt: skip
        if res.returncode != 0:
            lines = res.stderr.strip().splitlines() or [f"exit {res.returncode}"]
            raise HostError(lines[-1])
        return res.stdout

    def relay_command(*args: str) -> list[str]:
        """`knee-node ARGS` in a container of this machine's node, on the run's network."""
        return [
            a.docker, "-H", a.manager, "run", "-i", "--rm", "--network", a.network,
            "--label", f"knee.run={a.run}", "--log-driver", "none", a.image, *args,
        ]  # fmt: skip

    deadline = time.monotonic() + WAIT_S
    container, address = "", ""
    fmt = f'{{{{.State.Pid}}}} {{{{(index .NetworkSettings.Networks "{a.network}").IPAddress}}}}'
    while time.monotonic() < deadline:
        with contextlib.suppress(HostError):
            names = docker(
                "ps", "-a", "--filter", f"name=^{a.service}\\.{a.slot}\\.", "--format", "{{.Names}}"
            ).split()
            if names:
                pid, _, address = (
                    docker("inspect", "--format", fmt, names[0]).strip().partition(" ")
                )
                if pid not in ("", "0") and address:
                    container = names[0]
                    break
        time.sleep(POLL_S)
    if not container:
        fail(f"task {a.slot} of {a.service} did not start within {WAIT_S:g} s")

    config = json.loads((folder / "config.json").read_text())
    listen = str(config.get("listen", ""))
    if listen.startswith("0.0.0.0:"):
        config["listen"] = f"{address}:{listen.split(':', 1)[1]}"
    control = subprocess.Popen(
        relay_command("relay", "--dial", f"{address}:{a.control_port}"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert control.stdin is not None and control.stdout is not None
    assert control.stderr is not None
    threading.Thread(target=pass_stderr, args=(control.stderr,), daemon=True).start()
    lifeline = threading.Lock()  # the relay's stdin: the config, the start line, its end
    control.stdin.write(json.dumps(config).encode() + b"\n")
    control.stdin.flush()
    problems: list[str] = []
    # A daemon thread: an agent that fails exits at once (its pipe's end stops the node).
    reader = threading.Thread(target=pass_on, args=(control.stdout, folder, problems), daemon=True)
    reader.start()

    def end_lifeline() -> None:
        """The runner's pipe ended (it closed it, or died): so does the node's lifeline."""
        # Raw reads: a buffered reader's lock would stall the interpreter's exit.
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        with lifeline, contextlib.suppress(OSError):
            control.stdin.close()  # type: ignore[union-attr]

    threading.Thread(target=end_lifeline, daemon=True).start()

    if a.gate:
        if not a.clock_port:
            fail("--gate needs --clock-port")
        dialed = f"{address}:{a.clock_port}"
        try:
            offset_ns, uncertainty_ns = measure_clock(
                relay_command("clock", "--dial", dialed), CLOCK_ROUNDS
            )
        except HostError as e:
            fail(f"clock check of {container} at {dialed}: {e}")
        emit({"event": "clock", "task": container, "dialed": dialed, "offset_ns": offset_ns,
              "uncertainty_ns": uncertainty_ns})  # fmt: skip
        group = folder.parent
        (group / f"ready-{a.slot}").touch()
        while len(list(group.glob("ready-*"))) < a.replicas:
            if time.monotonic() > deadline:
                fail(f"the {a.replicas} replicas of {a.service} were not ready within {WAIT_S:g} s")
            time.sleep(POLL_S / 5)
        # The first agent to get here sets the start for all: a file made whole, then linked.
        mine = group / f".start-{a.slot}"
        mine.write_text(str(time.time_ns() + int(START_MARGIN_S * 1e9)))
        with contextlib.suppress(FileExistsError):
            os.link(mine, group / "start_at")
        start_at = int((group / "start_at").read_text())
        with lifeline, contextlib.suppress(OSError, ValueError):
            control.stdin.write(f"start {start_at}\n".encode())
            control.stdin.flush()
        emit({"event": "start_at", "unix_ns": start_at, "replicas": a.replicas})

    # The container's stdout is the control connection: what its log has is its stderr.
    logs = subprocess.run(
        node.docker("logs", "-f", container),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    try:
        code = int(docker("wait", container).strip() or 2)
    except (HostError, ValueError) as e:
        fail(f"waiting for {container}: {e} (docker logs: exit {logs.returncode})")
    reader.join(timeout=FILES_WAIT_S)  # the node's last lines and files, then the relay ends
    with lifeline, contextlib.suppress(OSError):
        control.stdin.close()
    try:
        control.wait(timeout=FILES_WAIT_S)
    except subprocess.TimeoutExpired:
        control.kill()
    if problems or reader.is_alive():
        message = f"{container}'s files: {'; '.join(problems) or 'still coming'}"
        if code == 0:
            fail(message)
        # A node that failed (killed mid-frame, say) is named by its own exit code.
        print(f"swarm task: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
