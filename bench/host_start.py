"""What a host kind costs per point: a node's start (the process or container started until
its `ready` line arrives) on a local host, an emulated host (netns), a docker host, a swarm
host (a service) on this machine's node and, where `scripts/docker worker` made it, one on
the worker node knee-sw1 (`worker`: its daemon reached over ssh, as another machine's), and
each host's setup and teardown. docs/hosts.md quotes
it.

    python3 bench/host_start.py           # 10 rounds, a minute or so
    python3 bench/host_start.py --smoke   # 1 round

Needs root and the swarm manager of scripts/docker (`scripts/docker swarm`). Each round makes a
fresh host of each kind
(netns and docker alternate first), starts one `knee-node serve echo` on it, waits for its
ready line, stops it and removes the host. Medians; the last line is JSON with the ratios
of a docker host's and a swarm host's figures over a netns host's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from benchlib import find_knee_node, median  # noqa: E402

from knee.hosts import cleanup, docker, netns, swarm  # noqa: E402
from knee.hosts.base import Host, HostError, Limits, Unsupported  # noqa: E402
from knee.hosts.local import LocalHost  # noqa: E402
from knee.runner.node import Node  # noqa: E402

#: Seconds a node may take to be ready.
READY_TIMEOUT_S = 30.0
#: The worker node of scripts/docker worker, and the client key of its sshd.
WORKER = "knee-sw1"
WORKER_KEY = "/run/knee-sw1/ssh/client_ed25519"


def node_start_s(host: Host, root: Path, name: str) -> float:
    """Seconds from starting `serve echo` on ``host`` to its ready line."""
    started = time.monotonic()
    node = Node(
        name,
        "serve",
        "echo",
        {"listen": f"{host.address}:0"},
        config_path=root / f"{name}.json",
        log_path=root / f"{name}.log",
        host=host,
    )
    try:
        node.wait_ready(READY_TIMEOUT_S)
        return time.monotonic() - started
    finally:
        node.stop()


def one_round(kind: str, root: Path, i: int) -> dict[str, float]:
    run_id = cleanup.new_run_id()
    t0 = time.monotonic()
    network: docker.Network | netns.Network | swarm.Network | None = None
    host: Host
    if kind == "local":
        host = LocalHost()
    elif kind == "netns":
        network = netns.Network(run_id)
        network.setup()
        host = netns.NetnsHost("h", Limits(), network)
    elif kind == "docker":
        network = docker.Network(run_id)
        host = docker.DockerHost("h", Limits(), network)
    else:
        network = swarm.Network(run_id)
        host = swarm.SwarmHost(
            "h",
            Limits(),
            network,
            node=WORKER if kind == "worker" else None,
            identity_file=WORKER_KEY if kind == "worker" else None,
        )
    try:
        host.setup()
        setup_s = time.monotonic() - t0
        start_s = node_start_s(host, root, f"{kind}-{i}")
    finally:
        t1 = time.monotonic()
        host.teardown()
        if network is not None:
            network.teardown()
        teardown_s = time.monotonic() - t1
    return {"setup_s": setup_s, "node_start_s": start_s, "teardown_s": teardown_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1 round")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    rounds = 1 if args.smoke else args.rounds
    find_knee_node()
    kinds = ["local", "netns", "docker", "swarm"]
    try:
        netns.check_features(False, False, False)
        docker.check_daemon()
        swarm.check_swarm()
        # The image is made once per knee-node build; its first import is not a point's cost.
        image = docker.ensure_image(docker.node_binary(), "bench")
        try:
            worker = swarm.node_daemon(WORKER, WORKER_KEY)
        except Unsupported:
            worker = None
        if worker is not None:
            swarm.copy_image(image, worker)  # once per build too (over ssh)
            worker.close()
            kinds.append("worker")
        else:
            print(f"host_start: no worker node {WORKER} (scripts/docker worker): no worker row")
        figures: dict[str, dict[str, list[float]]] = {k: {} for k in kinds}
        with tempfile.TemporaryDirectory(prefix="knee-bench-hosts-") as tmp:
            for i in range(rounds):
                order = kinds if i % 2 == 0 else ["local", *reversed(kinds[1:])]
                for kind in order:
                    for key, value in one_round(kind, Path(tmp), i).items():
                        figures[kind].setdefault(key, []).append(value)
    except (HostError, Unsupported, OSError) as e:
        print(f"host_start: broken: {e}", file=sys.stderr)
        return 1
    med = {k: {key: median(v) for key, v in f.items()} for k, f in figures.items()}
    print(f"host kinds: medians of {rounds} rounds, seconds")
    print(f"  {'kind':8} {'setup':>8} {'node start':>11} {'teardown':>9}")
    for kind in kinds:
        m = med[kind]
        print(f"  {kind:8} {m['setup_s']:8.3f} {m['node_start_s']:11.3f} {m['teardown_s']:9.3f}")
    summary = {
        **{f"{k}_{key}": round(v, 4) for k, m in med.items() for key, v in m.items()},
        "ratio_docker_over_netns_node_start": round(
            med["docker"]["node_start_s"] / med["netns"]["node_start_s"], 2
        ),
        "ratio_docker_over_netns_setup": round(
            med["docker"]["setup_s"] / med["netns"]["setup_s"], 2
        ),
        "ratio_swarm_over_netns_node_start": round(
            med["swarm"]["node_start_s"] / med["netns"]["node_start_s"], 2
        ),
        "ratio_swarm_over_netns_setup": round(med["swarm"]["setup_s"] / med["netns"]["setup_s"], 2),
        **(
            {
                "ratio_worker_over_swarm_node_start": round(
                    med["worker"]["node_start_s"] / med["swarm"]["node_start_s"], 2
                )
            }
            if "worker" in med
            else {}
        ),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
