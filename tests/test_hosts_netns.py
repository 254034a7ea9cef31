"""Emulated hosts (knee.hosts.netns) on this machine, for real: namespaces, a bridge, tbf,
nftables, and Python sockets and a real knee-node inside them. Skipped, with the reason,
where the machine cannot (not root, a kernel feature missing)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from conftest import READY_TIMEOUT_S, JsonLines, Processes, unavailable
from scipy.stats import binom

from knee.hosts import cgroups, cleanup, netns
from knee.hosts.base import Limits, Unsupported

#: Seconds each direction of the throughput test sends for.
SEND_S = 2.0
#: Seconds a helper process inside a namespace may take (they take 0.1 to 3 s).
HELPER_TIMEOUT_S = 30.0


def _need(rate: bool = False, loss: bool = False, delay: bool = False) -> None:
    try:
        netns.check_features(rate, loss, delay)
    except Unsupported as e:
        unavailable(str(e))


MakeHost = Callable[..., netns.NetnsHost]


@pytest.fixture
def make_host() -> Iterator[MakeHost]:
    """`make_host(name, **settings)`: an emulated host of one network, set up; every host
    and the network are torn down after the test, and checked gone."""
    _need()
    network = netns.Network(cleanup.new_run_id())
    hosts: list[netns.NetnsHost] = []

    def make(name: str, **settings: Any) -> netns.NetnsHost:
        host = netns.NetnsHost(name, Limits(), network, **settings)
        hosts.append(host)
        host.setup()
        return host

    yield make
    for host in hosts:
        host.teardown()
    network.teardown()
    left = [n for n in _namespaces() if n.startswith(f"knee-{network.run_id}-")]
    assert left == []
    assert cleanup.read_record(network.run_id) is None


def _namespaces() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def _run_in(host: netns.NetnsHost, code: str, *args: str) -> str:
    """Runs Python ``code`` inside ``host``; its stdout."""
    res = subprocess.run(
        host.command([sys.executable, "-c", code, *args]),
        capture_output=True,
        text=True,
        timeout=HELPER_TIMEOUT_S,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def _start_in(
    processes: Processes, host: netns.NetnsHost, code: str, *args: str
) -> tuple[subprocess.Popen[bytes], Any]:
    """Starts Python ``code`` inside ``host``; waits for its first line (it is ready)."""
    proc = processes.spawn(
        host.command([sys.executable, "-c", code, *args]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.strip() == b"ready", (first, proc.stderr.read() if proc.stderr else b"")
    return proc, proc.stdout


TCP_LISTENER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(4); s.settimeout(20)
print("ready", flush=True)
c, _ = s.accept(); c.sendall(b"hi"); c.close()
"""

REACH = r"""
import json, socket, sys
out = {}
def attempt(kind, addr, port):
    try:
        if kind == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(b"x", (addr, port))
        else:
            s = socket.create_connection((addr, port), timeout=3)
            if kind == "tcp" and s.recv(2) != b"hi":  # "connect": connecting is enough
                return "no greeting"
        return "ok"
    except OSError as e:
        return e.__class__.__name__ + ": " + (e.strerror or str(e))
for kind, addr, port in json.loads(sys.argv[1]):
    out[f"{kind} {addr}:{port}"] = attempt(kind, addr, port)
print(json.dumps(out))
"""


def test_nothing_outside_the_network_is_reachable(
    make_host: MakeHost, processes: Processes
) -> None:
    h1, h2 = make_host("h1"), make_host("h2")
    _start_in(processes, h2, TCP_LISTENER, h2.address)
    # A listener of this machine's own namespace, on loopback: h1's 127.0.0.1 is its own.
    outside = socket.create_server(("127.0.0.1", 0))
    port = outside.getsockname()[1]
    real = sorted(
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    )
    targets = [("tcp", h2.address, 5001), ("udp", "192.0.2.1", 9), ("tcp", "192.0.2.1", 80)]
    targets += [("tcp", "127.0.0.1", port)]
    targets += [(kind, a, 9) for a in real for kind in ("udp", "tcp")]
    try:
        got = json.loads(_run_in(h1, REACH, json.dumps(targets)))
    finally:
        outside.close()
    assert got.pop(f"tcp {h2.address}:5001") == "ok"
    assert "refused" in got.pop(f"tcp 127.0.0.1:{port}")  # h1's own loopback
    assert got and all("unreachable" in why for why in got.values()), got


THROUGHPUT_RECEIVER = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(1); s.settimeout(20)
print("ready", flush=True)
c, _ = s.accept(); c.settimeout(20)
total, t0, marks = 0, None, []
while True:
    chunk = c.recv(1 << 20)
    if not chunk:
        break
    now = time.monotonic()
    t0 = now if t0 is None else t0
    total += len(chunk)
    marks.append((now - t0, total))
# The rate once TCP's slow start is over: from 0.25 s to the last byte.
a = next(m for m in marks if m[0] >= 0.25)
print((total - a[1]) * 8 / (marks[-1][0] - a[0]) / 1e6, flush=True)
"""

THROUGHPUT_SENDER = r"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5001), timeout=10)
chunk, end = b"x" * 65536, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    c.sendall(chunk)
c.close()
"""


def _throughput_mbit(processes: Processes, src: netns.NetnsHost, dst: netns.NetnsHost) -> float:
    receiver, out = _start_in(processes, dst, THROUGHPUT_RECEIVER, dst.address)
    _run_in(src, THROUGHPUT_SENDER, dst.address, str(SEND_S))
    line = out.readline()
    assert receiver.wait(timeout=HELPER_TIMEOUT_S) == 0
    return float(line)


#: TCP payload over 1500-byte Ethernet frames: 1448 of the 1514 bytes tbf counts.
TCP_PAYLOAD_SHARE = 0.956


def test_rate_is_enforced_both_ways(make_host: MakeHost, processes: Processes) -> None:
    """h1's rate alone limits h1 -> h2 (its upload) and h2 -> h1 (its download). The rate
    counts Ethernet frames: TCP's payload gets 95.6% of it with 1500-byte frames."""
    _need(rate=True)
    rate_mbit = 50.0
    h1, h2 = make_host("h1", rate_mbit=rate_mbit), make_host("h2")
    upload = _throughput_mbit(processes, h1, h2)
    download = _throughput_mbit(processes, h2, h1)
    payload_mbit = rate_mbit * TCP_PAYLOAD_SHARE
    assert upload == pytest.approx(payload_mbit, rel=0.10)
    assert download == pytest.approx(payload_mbit, rel=0.10)
    counters = h1.interface_bytes()
    assert counters is not None
    assert counters["tx_bytes"] > upload * 1e6 / 8 * SEND_S * 0.5
    assert counters["rx_bytes"] > download * 1e6 / 8 * SEND_S * 0.5


UDP_RECEIVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 1 << 23)  # SO_RCVBUFFORCE: room for all
s.bind((sys.argv[1], 5002)); s.settimeout(20)
print("ready", flush=True)
got = 0
while True:
    try:
        s.recv(2048)
    except TimeoutError:
        break
    got += 1
    s.settimeout(1.0)  # the sender has been done for a second
print(got, flush=True)
"""

UDP_SENDER = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b"x" * 100, (sys.argv[1], 5002))
    if i % 200 == 199:
        time.sleep(0.002)  # leaves the receiver time to read: no loss but knee's
"""


def test_loss_drops_that_share_of_what_a_host_receives(
    make_host: MakeHost, processes: Processes
) -> None:
    _need(loss=True)
    sent, loss_percent = 4000, 10.0
    h1, h2 = make_host("h1"), make_host("h2", loss_percent=loss_percent)
    receiver, out = _start_in(processes, h2, UDP_RECEIVER, h2.address)
    _run_in(h1, UDP_SENDER, h2.address, str(sent))
    received = int(out.readline())
    assert receiver.wait(timeout=HELPER_TIMEOUT_S) == 0
    low, high = binom.interval(0.999, sent, 1 - loss_percent / 100)
    assert low <= received <= high, (received, low, high)
    # What did not arrive was dropped by knee's rule, not lost elsewhere.
    table = subprocess.run(
        h2.command(["nft", "-j", "list", "table", "inet", h2.nft_table]),
        capture_output=True,
        text=True,
        check=True,
        timeout=HELPER_TIMEOUT_S,
    )
    counters = [
        item["rule"]["expr"][-2]["counter"]["packets"]
        for item in json.loads(table.stdout)["nftables"]
        if "rule" in item
    ]
    assert counters == [sent - received]


def test_a_node_runs_inside_with_its_own_pid(
    make_host: MakeHost, processes: Processes, knee_node: str
) -> None:
    """Started as the runner starts a node on an emulated host with limits: the cgroups
    joined first, then `ip netns exec`, then knee-node, all in one pid."""
    h1, h2 = make_host("h1"), make_host("h2")
    config = {"listen": f"{h1.address}:0"}
    argv = h1.command([knee_node, "serve", "echo", "--name", "srv", "--config", json.dumps(config)])
    run_cgroups, node_cgroup = None, None
    try:
        cgroups.check_limits([Limits(cpu_cores=0.5)])
        run_cgroups = cgroups.RunCgroups(h1.network.run_id)
        node_cgroup = run_cgroups.make(("h1", "srv"), Limits(cpu_cores=0.5))
        argv = cgroups.wrap(argv, [node_cgroup])
    except Unsupported:
        pass  # no cgroups here: the namespace alone
    proc = processes.spawn(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    ready = JsonLines(proc.stdout).wait_for(lambda e: e.get("event") == "ready", READY_TIMEOUT_S)
    host, port = ready["addr"].rsplit(":", 1)
    assert host == h1.address
    assert ready["pid"] == proc.pid  # `ip netns exec` execs: the pid is the node's
    got = json.loads(_run_in(h2, REACH, json.dumps([["connect", h1.address, int(port)]])))
    assert got == {f"connect {h1.address}:{port}": "ok"}
    assert (h1.interface_bytes() or {}).get("rx_bytes", 0) > 0
    if node_cgroup is not None and run_cgroups is not None:
        assert node_cgroup.pids() == [proc.pid]
        Processes.stop(proc)
        assert run_cgroups.remove() == []


def test_describe_and_teardown(make_host: MakeHost) -> None:
    host = make_host("h1", rate_mbit=10.0, loss_percent=1.5)
    record = cleanup.read_record(host.network.run_id)
    assert record is not None
    assert sorted(record["namespaces"]) == sorted([host.namespace, host.network.namespace])
    described = host.describe()
    assert described["kind"] == "netns"
    assert described["address"] == "198.18.0.1"
    assert described["namespace"] == host.namespace
    assert described["rate_mbit"] == 10.0 and described["loss_percent"] == 1.5
    assert described["tbf"]["rate_bit"] == 10_000_000
    host.teardown()
    assert host.namespace not in _namespaces()
    host.teardown()  # nothing left: no error


def test_probing_leaves_nothing() -> None:
    _need(rate=True)
    assert not [n for n in _namespaces() if n == f"knee-probe-{os.getpid()}"]


def test_delay_needs_netem(make_host: MakeHost) -> None:
    """Where the kernel has netem, a host's delay is a netem qdisc with the rate's tbf under
    it; where it has not, the spec is refused in one line naming it."""
    try:
        netns.check_features(True, False, True)
    except Unsupported as e:
        assert str(e) == "tc qdisc netem is not in this kernel: delay_ms cannot be set"
        return
    host = make_host("h1", rate_mbit=10.0, delay_ms=5.0)
    shown = subprocess.run(
        ["tc", "-n", host.namespace, "-j", "qdisc", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        check=True,
        timeout=HELPER_TIMEOUT_S,
    )
    assert {q["kind"] for q in json.loads(shown.stdout)} >= {"netem", "tbf"}
