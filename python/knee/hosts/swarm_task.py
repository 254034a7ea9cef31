"""The agent of one task of a swarm host (knee.hosts.swarm): the local process the runner
starts for a node placed on a swarm host, as `ssh` is for an ssh host.

    python3 swarm_task.py --docker D --host SOCK --service S --slot N --replicas R
                          --folder SLOT_DIR --network NET
                          [--gate --manager SOCK --image IMAGE --run RUN --clock-port P]

1. waits for the task of slot N of service S to have its container;
2. writes the slot's config (SLOT_DIR/config.json, `listen` on 0.0.0.0 given the task's own
   overlay address) into the FIFO the node reads its config from;
3. with --gate (a generator, whose sample times need its clock; a server's are durations on
   its own clock): checks the task's clock as the ssh hosts do (`knee-node clock` round
   trips), over the run's overlay network: the node answers on its task's address, port P
   (`KNEE_NODE_CLOCK_LISTEN`), and `knee-node clock --dial` in a container of this machine's
   node (SOCK of --manager) on that network relays the round trips. Prints
   `{"event": "clock", ...}` (the node's events log keeps it), marks the slot ready, waits
   until the R replicas are, and writes one start time for all (`start UNIX_NS`, agreed
   through a file made once) on the node's lifeline; prints `{"event": "start_at", ...}`;
4. relays the node's stdout and stderr (`docker logs -f`) and exits with its exit code.
Errors are one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the knee package's folder

from knee.hosts.base import HostError  # noqa: E402
from knee.hosts.ssh import measure_clock  # noqa: E402

#: Seconds for the task to start, its node to open its config, the replicas to be ready.
WAIT_S = 60.0
POLL_S = 0.05
#: The replicas start this long after the last is ready: the start lines are read within
#: milliseconds; the margin covers a loaded machine's scheduling.
START_MARGIN_S = 0.5
#: Round trips of the clock check (the ssh hosts make 50 over a network; a task is local).
CLOCK_ROUNDS = 20


def fail(message: str) -> None:
    print(f"swarm task: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def emit(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--docker", "--host", "--service", "--folder", "--network"):
        ap.add_argument(name, required=True)
    for name in ("--manager", "--image", "--run"):
        ap.add_argument(name)
    ap.add_argument("--clock-port", type=int)
    ap.add_argument("--slot", type=int, required=True)
    ap.add_argument("--replicas", type=int, required=True)
    ap.add_argument("--gate", action="store_true")
    a = ap.parse_args()
    folder = Path(a.folder)

    def docker(*args: str) -> str:
        res = subprocess.run(
            [a.docker, "-H", a.host, *args], capture_output=True, text=True, timeout=WAIT_S
        )
        if res.returncode != 0:
            lines = res.stderr.strip().splitlines() or [f"exit {res.returncode}"]
            raise HostError(lines[-1])
        return res.stdout

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
    fd = -1
    while fd < 0:
        try:  # a reader (the node) must be there: else ENXIO, and it is tried again
            fd = os.open(folder / "config.fifo", os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > deadline:
                fail(f"{container} did not read its config: {e}")
            time.sleep(POLL_S)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(config).encode())

    if a.gate:
        if not (a.manager and a.image and a.run and a.clock_port):
            fail("--gate needs --manager, --image, --run and --clock-port")
        dialed = f"{address}:{a.clock_port}"
        relay = [
            a.docker, "-H", a.manager, "run", "-i", "--rm", "--network", a.network,
            "--label", f"knee.run={a.run}", "--log-driver", "none",
            a.image, "clock", "--dial", dialed,
        ]  # fmt: skip
        try:
            offset_ns, uncertainty_ns = measure_clock(relay, CLOCK_ROUNDS)
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
        lifeline = os.open(folder / "lifeline", os.O_WRONLY | os.O_NONBLOCK)
        os.write(lifeline, f"start {start_at}\n".encode())
        os.close(lifeline)
        emit({"event": "start_at", "unix_ns": start_at, "replicas": a.replicas})

    sys.stdout.flush()
    logs = subprocess.run([a.docker, "-H", a.host, "logs", "-f", container], check=False)
    try:
        code = int(docker("wait", container).strip() or 2)
    except (HostError, ValueError) as e:
        fail(f"waiting for {container}: {e} (docker logs: exit {logs.returncode})")
    sys.exit(code)


if __name__ == "__main__":
    main()
