"""The process that serves a target: whoever holds the socket listening on its port, found
from outside (no agent inside the service), so that the runner can sample its CPU like a
node's (knee.monitor.Monitor.add_tree; docs/http.md, "The target's CPU").

The path, all in /proc (proc(5)):

1. the listening sockets of the target's network namespace: /proc/net/tcp and tcp6 (or
   /proc/PID/net/tcp* for a process inside another namespace, e.g. a node on an emulated
   host), state 0A (LISTEN), local address and port, owner uid, inode;
2. the one for the target: its exact address, else a wildcard (0.0.0.0, ::) provided the
   target's address is one of that namespace's own (else the target is another machine,
   and a local server on the same port is not it);
3. the processes holding that inode open: a readlink of every /proc/*/fd/* that reads
   `socket:[INODE]`. A prefork server's master and its workers all hold it; the topmost
   holder is the root of the tree to sample.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: /proc/net/tcp's `st` of a listening socket (TCP_LISTEN in the kernel's tcp_states.h).
LISTEN = "0A"
#: Open files read at most in the search for a socket's holders: a readlink each, so a
#: machine with millions of connections (a busy database, a proxy) would otherwise hold
#: the start of a run for seconds; 100 000 readlinks take well under a second, and a
#: machine where knee measures a service has far fewer open files. Past it the search
#: gives up rather than name an incomplete set of processes.
MAX_FDS = 100_000
#: Holders that are not the service: systemd holds the sockets it activates services with
#: (pid 1, and a user's `systemd --user`); sampling its tree would sample the whole machine.
NOT_THE_SERVICE = frozenset({"systemd"})
#: An interpreter's command name: its process is named by the module it runs (`-m MOD`).
INTERPRETER_RE = re.compile(r"^(python|pypy)[0-9.]*$")


@dataclass(frozen=True)
class Listener:
    """The processes serving a port."""

    port: int
    #: Every process holding the listening socket open (its inode), sorted.
    pids: tuple[int, ...]
    #: The topmost of them: gunicorn's or nginx's master, the server itself when alone.
    root_pid: int
    #: How many of `pids` are children of another of them (prefork workers: gunicorn with
    #: two sync workers 2, nginx's master and N workers N); None when one process holds the
    #: socket alone (a threaded or event-loop server: its pool is not visible from outside).
    workers: int | None
    #: The root's command name ("gunicorn", "nginx"); for an interpreter running a module
    #: (`python3 -m gunicorn`), the module's.
    name: str


@dataclass(frozen=True)
class _Socket:
    address: IPAddress
    port: int
    uid: int
    inode: int


def _address(hex_address: str) -> IPAddress:
    """An address of /proc/net/tcp*: 32-bit words in hex, each as the kernel's native-order
    integer of four network-order bytes. An IPv4-mapped IPv6 address is its IPv4 address."""
    raw = b"".join(
        int(hex_address[i : i + 8], 16).to_bytes(4, sys.byteorder)
        for i in range(0, len(hex_address), 8)
    )
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_tcp_table(text: str) -> list[_Socket]:
    """The listening sockets of a /proc/net/tcp or tcp6 table (proc(5)): after a header
    line, `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid
    timeout inode ...`, the local address as ADDRESS:PORT in hex."""
    found = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != LISTEN:
            continue
        hex_address, _, hex_port = parts[1].partition(":")
        inode = int(parts[9])
        if inode:
            found.append(_Socket(_address(hex_address), int(hex_port, 16), int(parts[7]), inode))
    return found


def parse_fib_trie(text: str) -> list[ipaddress.IPv4Network]:
    """The IPv4 networks a namespace's /proc/net/fib_trie marks `host LOCAL`: its own
    addresses (each a /32) and the loopback /8. An address line `|-- A.B.C.D` is followed
    by one line per route to it, `/LEN SCOPE TYPE`."""
    local: set[ipaddress.IPv4Network] = set()
    address = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "|--":
            address = words[1]
        elif address is not None and len(words) == 3 and words[0].startswith("/"):
            if words[2] == "LOCAL":
                local.add(ipaddress.IPv4Network(f"{address}{words[0]}", strict=False))
        else:
            address = None
    return sorted(local)


def parse_if_inet6(text: str) -> list[ipaddress.IPv6Address]:
    """The IPv6 addresses of a namespace's interfaces, /proc/net/if_inet6: one a line, the
    address first as 32 hex digits."""
    return [
        ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))
        for line in text.splitlines()
        if line.strip()
    ]


def _is_local(address: IPAddress, net: Path) -> bool:
    """Whether `address` is one of the namespace's own (the one of the `net` folder)."""
    if address.is_loopback:
        return True
    try:
        if isinstance(address, ipaddress.IPv4Address):
            return any(address in n for n in parse_fib_trie((net / "fib_trie").read_text()))
        return address in parse_if_inet6((net / "if_inet6").read_text())
    except (OSError, ValueError):
        return False  # no such table: no IPv6, or no /proc


def _match(target: IPAddress, sock: _Socket, local: bool) -> int:
    """How well a listening socket takes connections to `target`: 3 bound to it, 2 to its
    family's wildcard, 1 to IPv6's wildcard for an IPv4 target (dual-stack, Linux's default:
    /proc does not tell a v6only socket), 0 not at all. A wildcard takes only connections
    to the namespace's own addresses (`local`)."""
    if sock.address == target:
        return 3
    if not local or not sock.address.is_unspecified:
        return 0
    if sock.address.version == target.version:
        return 2
    return 1 if sock.address.version == 6 else 0


def _resolve(address: str, port: int) -> IPAddress:
    """An IP literal (brackets and a zone dropped), or a name's first address, as knee-node
    resolves a target (docs/http.md, Limits)."""
    literal = address.strip("[]").partition("%")[0]
    try:
        parsed = ipaddress.ip_address(literal)
    except ValueError:
        info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
        parsed = ipaddress.ip_address(str(info[0][4][0]).partition("%")[0])
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


def _pids(proc: Path) -> Iterator[int]:
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            yield int(entry.name)


@dataclass
class _Scan:
    holders: list[int]
    hidden: set[int]  # processes whose open files could not be read (another user's)
    complete: bool  # False: MAX_FDS reached first


def _scan_fds(inodes: set[int], proc: Path, max_fds: int = MAX_FDS) -> _Scan:
    """The processes holding any of the socket `inodes` open. A process that exits during
    the scan is skipped."""
    links = {f"socket:[{inode}]" for inode in inodes}
    scan = _Scan([], set(), True)
    read = 0
    for pid in _pids(proc):
        fd_dir = proc / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            scan.hidden.add(pid)
            continue
        except OSError:
            continue  # gone
        for fd in fds:
            if read >= max_fds:
                scan.complete = False
                return scan
            read += 1
            try:
                link = os.readlink(fd_dir / fd)
            except PermissionError:
                scan.hidden.add(pid)
                break
            except OSError:
                continue  # closed meanwhile, or the process is gone
            if link in links:
                scan.holders.append(pid)
                break
    return scan


def _command_name(p: psutil.Process) -> str:
    name = p.name()
    if INTERPRETER_RE.match(name):
        try:
            argv = p.cmdline()
        except psutil.AccessDenied:
            return name
        for i, arg in enumerate(argv[1:-1], start=1):
            if arg == "-m":
                return argv[i + 1]
    return name


def _ancestors(pid: int) -> list[int]:
    """The pids above `pid`, its parent first ([] once it is gone)."""
    try:
        return [p.pid for p in psutil.Process(pid).parents()]
    except psutil.Error:
        return []


def _where(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def find_listener(
    address: str, port: int, proc: Path = Path("/proc"), netns_pid: int | None = None
) -> Listener | str:
    """The processes serving `address`:`port` on this machine, or a one-line reason why
    they cannot be found. `netns_pid`: a process inside the target's network namespace
    (e.g. a node on a knee emulated host), whose view of the sockets is read instead of
    this process's; processes are searched machine-wide either way."""
    where = _where(address, port)
    try:
        target = _resolve(address, port)
    except (OSError, ValueError) as e:
        return f"{address} does not resolve ({e}): the target's process is not searched for"
    net = proc / "net" if netns_pid is None else proc / str(netns_pid) / "net"
    sockets: list[_Socket] = []
    for table in ("tcp", "tcp6"):
        try:
            sockets += parse_tcp_table((net / table).read_text())
        except FileNotFoundError:
            if netns_pid is not None and not (proc / str(netns_pid)).exists():
                return f"pid {netns_pid}, inside the target's network namespace, is gone"
            continue  # a kernel without IPv6 has no tcp6
        except OSError as e:
            return f"cannot read {net / table} ({e.strerror}): the target's process is unknown"
        except ValueError as e:
            return f"{net / table} does not parse ({e}): the target's process is unknown"
    local = _is_local(target, net)
    scores = [(_match(target, s, local), s) for s in sockets if s.port == port]
    best = max((score for score, _ in scores), default=0)
    if best == 0:
        if netns_pid is not None:
            return f"nothing listens on {where} in the network namespace of pid {netns_pid}"
        return (
            f"no process on this machine listens on {where} (a remote service, or one in "
            "another network namespace: its CPU is not sampled)"
        )
    # Several sockets bound alike are SO_REUSEPORT's, one per process or group of them.
    chosen = [s for score, s in scores if score == best]
    scan = _scan_fds({s.inode for s in chosen}, proc)
    uids = ", ".join(sorted({str(s.uid) for s in chosen}))
    if not scan.complete:
        return (
            f"more than {MAX_FDS} open files on this machine: the search for the process "
            f"listening on {where} stopped (its CPU is not sampled)"
        )
    holders = set()
    for pid in scan.holders:
        try:
            if pid != 1 and psutil.Process(pid).name() not in NOT_THE_SERVICE:
                holders.add(pid)
        except psutil.Error:
            pass  # gone
    if not holders:
        if scan.hidden:
            return (
                "the listening socket's owner is not visible: run as root or as the "
                f"service's user (the socket's uid: {uids})"
            )
        return f"no process holds the socket listening on {where} (it may have just exited)"
    ancestors = {pid: _ancestors(pid) for pid in holders}
    tops = [pid for pid in holders if not holders.intersection(ancestors[pid])]
    # Unrelated holders (separate SO_REUSEPORT servers, a socket handed over): the tree
    # with the most of them.
    root = max(tops, key=lambda t: (sum(t in ancestors[p] for p in holders), -t))
    try:
        root_proc = psutil.Process(root)
        name = _command_name(root_proc)
        parent = root_proc.ppid()
        # A master whose open files are hidden (nginx's, run by root) above workers that
        # are visible (run by this user): the workers alone would pass for the service.
        if parent in scan.hidden and psutil.Process(parent).name() == root_proc.name():
            return (
                f"the process listening on {where} is only partly visible (its parent "
                f"{parent} is hidden): run as root or as the service's user"
            )
    except psutil.Error:
        return f"the process listening on {where} exited during the search"
    pids = tuple(sorted(holders))
    workers = None
    if len(pids) > 1:
        workers = sum(1 for pid in pids if ancestors[pid][:1] and ancestors[pid][0] in holders)
    return Listener(port=port, pids=pids, root_pid=root, workers=workers, name=name)


def tree_pids(root_pid: int) -> list[int]:
    """`root_pid` and all its descendants now, sorted; [] once it is gone."""
    try:
        root = psutil.Process(root_pid)
        return sorted([root_pid, *(p.pid for p in root.children(recursive=True))])
    except psutil.Error:
        return []
