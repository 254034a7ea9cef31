"""The process serving a port, found from /proc (knee.hosts.listener), and a process tree
sampled as one node (knee.monitor.Monitor.add_tree): against real servers started by
tests/real_http_servers.py, a server inside a knee emulated host, and a process that starts
a busy child.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
from conftest import READY_TIMEOUT_S, JsonLines, Processes, unavailable
from real_http_servers import SLEEP_WORKERS, RealServer, free_port, real_server

from knee.hosts import cleanup, netns
from knee.hosts.base import Limits, Unsupported
from knee.hosts.listener import Listener, find_listener, tree_pids
from knee.monitor import Monitor

#: Seconds a helper process may take to answer.
HELPER_TIMEOUT_S = 30.0

#: A parent that starts a child spinning for argv[1] seconds; the child prints "spun" and
#: then waits for its stdin, a pipe from the parent, to close: it ends with the parent.
PARENT = """
import subprocess, sys
CHILD = '''
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
print("spun", flush=True)
sys.stdin.read()
'''
child = subprocess.Popen([sys.executable, "-c", CHILD, sys.argv[1]], stdin=subprocess.PIPE)
child.wait()
"""


def _address(server: RealServer) -> tuple[str, int]:
    url = urlsplit(server.url)
    assert url.hostname is not None and url.port is not None
    return url.hostname, url.port


def _found(server: RealServer) -> Listener:
    listener = find_listener(*_address(server))
    assert isinstance(listener, Listener), listener
    return listener


def _get(server: RealServer) -> int:
    host, port = _address(server)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", server.path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory: pytest.TempPathFactory, knee_node: str) -> Iterator[RealServer]:
    """gunicorn with SLEEP_WORKERS sync workers serving tests/http_apps/sleep_app.py."""
    with real_server("gunicorn-sleep", tmp_path_factory.mktemp("gunicorn"), knee_node) as s:
        # The master listens before it forks its workers: on a loaded machine the port can
        # answer while a worker is not forked yet. Wait (at most 10 s) until both are.
        deadline = time.monotonic() + 10.0
        while len(_found(s).pids) < SLEEP_WORKERS + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield s


def test_gunicorn_master_is_the_root_and_its_sync_workers_are_counted(
    gunicorn: RealServer,
) -> None:
    listener = _found(gunicorn)
    assert listener.port == _address(gunicorn)[1]
    assert listener.root_pid == gunicorn.pid  # the master, started by real_server
    assert listener.workers == SLEEP_WORKERS
    assert len(listener.pids) == SLEEP_WORKERS + 1
    assert list(listener.pids) == sorted(listener.pids)
    assert listener.name == "gunicorn"  # `python -m gunicorn`: named by its module
    for pid in listener.pids:
        p = psutil.Process(pid)
        assert "gunicorn" in " ".join(p.cmdline())
        assert pid == gunicorn.pid or p.ppid() == gunicorn.pid
    assert set(listener.pids) <= set(tree_pids(listener.root_pid))


def test_a_tree_is_sampled_as_one_node(gunicorn: RealServer) -> None:
    listener = _found(gunicorn)
    monitor = Monitor()
    monitor.add_tree("target", listener.root_pid)
    assert all(_get(gunicorn) == 200 for _ in range(5))
    row = monitor.sample()["target"]
    assert row["processes"] == SLEEP_WORKERS + 1
    assert row["rss_bytes"] > 0
    assert row["cpu_percent"] >= 0


def test_the_owner_of_a_socket_of_another_user_is_not_visible(gunicorn: RealServer) -> None:
    """Run as nobody (a forked child of this root process), the gunicorn of root is hidden."""
    if os.geteuid() != 0:
        unavailable("needs root, to become another user")
    host, port = _address(gunicorn)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, then the search, its answer on the pipe
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            found = find_listener(host, port)
            os.write(write_end, json.dumps(str(found)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        got = json.loads(answer.read() or b'""')
    os.waitpid(pid, 0)
    assert got.startswith("the listening socket's owner is not visible: run as root"), got


def test_nginx_master_is_the_root_of_its_worker(tmp_path: Path, knee_node: str) -> None:
    """`knee-node serve http` finds a free port and starts nginx on it: nginx's master and
    its one worker (server.nginx_workers' default) hold the socket, not knee-node."""
    with real_server("nginx-keepalive", tmp_path / "server", knee_node) as server:
        listener = _found(server)
        assert listener.name == "nginx"
        assert listener.workers == 1
        assert len(listener.pids) == 2
        assert server.pid not in listener.pids
        root = psutil.Process(listener.root_pid)
        assert root.ppid() == server.pid  # knee-node's child
        assert "master" in " ".join(root.cmdline())
        assert all(psutil.Process(p).ppid() == root.pid for p in listener.pids if p != root.pid)


def test_a_server_alone_on_its_socket_has_no_worker_count(tmp_path: Path, knee_node: str) -> None:
    with real_server("python-http.server", tmp_path / "server", knee_node) as server:
        listener = _found(server)
        assert listener.pids == (server.pid,)
        assert listener.root_pid == server.pid
        assert listener.workers is None
        assert listener.name == "http.server"
        assert tree_pids(server.pid) == [server.pid]


def test_a_port_nobody_listens_on_gives_the_reason() -> None:
    port = free_port()
    got = find_listener("127.0.0.1", port)
    assert isinstance(got, str)
    assert got.startswith(f"no process on this machine listens on 127.0.0.1:{port}")
    assert "\n" not in got
    assert tree_pids(2**22 + 1) == []  # above the kernel's pid_max: no such process


def test_ipv6_loopback_and_ipv4_mapped_sockets_are_found() -> None:
    """Sockets of this process in /proc/net/tcp6, on loopback only: `::1` is found as
    `::1` and `[::1]`, `::ffff:127.0.0.1` is 127.0.0.1's (a wildcard `::`, which would
    listen on the machine's real interface too, is tested inside an emulated host, below)."""
    if not socket.has_ipv6:
        unavailable("no IPv6 here")
    for bind, targets in (
        ("::1", ("::1", "[::1]")),
        ("::ffff:127.0.0.1", ("127.0.0.1",)),
    ):
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            try:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                s.bind((bind, 0))
            except OSError as e:
                unavailable(f"cannot bind {bind}: {e}")
            s.listen()
            port = s.getsockname()[1]
            for target in targets:
                listener = find_listener(target, port)
                assert isinstance(listener, Listener), (bind, target, listener)
                assert listener.pids == (os.getpid(),)
                assert listener.workers is None
            if bind != "::1":
                assert isinstance(find_listener("::1", port), str)


#: Listens on `::` (dual-stack) and prints its port; run inside an emulated host only.
WILDCARD = """
import socket, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(30)  # bounded: the test stops it long before
"""


def test_a_server_on_an_emulated_host_is_found_through_a_process_inside_it(
    processes: Processes, knee_node: str
) -> None:
    """Its socket is in the host's namespace only: found through a pid inside it."""
    try:
        netns.check_features(False, False, False)
    except Unsupported as e:
        unavailable(str(e))
    network = netns.Network(cleanup.new_run_id())
    host = netns.NetnsHost("h1", Limits(), network)
    proc = None
    try:
        host.setup()
        config = json.dumps({"listen": f"{host.address}:0"})
        argv = host.command([knee_node, "serve", "echo", "--name", "srv", "--config", config])
        proc = processes.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ready = JsonLines(proc.stdout).wait_for(
            lambda e: e.get("event") == "ready", READY_TIMEOUT_S
        )
        port = int(ready["addr"].rsplit(":", 1)[1])
        listener = find_listener(host.address, port, netns_pid=proc.pid)
        assert isinstance(listener, Listener), listener
        assert listener.pids == (proc.pid,)
        assert listener.workers is None
        assert listener.name == "knee-node"
        outside = find_listener(host.address, port)
        assert isinstance(outside, str) and outside.startswith("no process on this machine")
        # A dual-stack wildcard `::` inside the namespace (its only interfaces: its own)
        # takes the host's IPv4 address.
        argv = host.command([sys.executable, "-c", WILDCARD])
        wild = processes.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert wild.stdout is not None
        ready_w, _, _ = select.select([wild.stdout], [], [], HELPER_TIMEOUT_S)
        assert ready_w, f"no port from the wildcard listener within {HELPER_TIMEOUT_S:g} s"
        wild_port = int(wild.stdout.readline())
        found = find_listener(host.address, wild_port, netns_pid=wild.pid)
        assert isinstance(found, Listener) and found.pids == (wild.pid,), found
        Processes.stop(wild)
    finally:
        if proc is not None:
            Processes.stop(proc)
        host.teardown()
        network.teardown()


def test_a_child_started_after_the_last_sample_counts_from_its_start(
    processes: Processes,
) -> None:
    monitor = Monitor()
    parent = processes.spawn([sys.executable, "-c", PARENT, "0.5"], stdout=subprocess.PIPE)
    monitor.add_tree("tree", parent.pid)  # before its child exists
    assert parent.stdout is not None
    ready, _, _ = select.select([parent.stdout], [], [], HELPER_TIMEOUT_S)
    assert ready, f"no word from the child within {HELPER_TIMEOUT_S:g} s"
    assert parent.stdout.readline() == b"spun\n"  # the child is done spinning, still alive
    rows = monitor.sample()
    assert rows["tree"]["processes"] == 2
    assert rows["tree"]["cpu_percent"] > 0
    host = monitor.host
    if host is not None:  # the tree counts as the nodes', not as foreign
        assert host["nodes_cpu_percent"] > 0
