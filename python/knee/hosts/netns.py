"""Emulated hosts: one network namespace per host, wired to a bridge with a veth, with
its upload and download rate (tc tbf), the loss of what it receives (nftables) and a
delay (tc netem, where the kernel has it) set per host.

Layout of run ``R`` (docs/hosts.md)::

    knee-R-net     the bridge namespace: bridge br0 and one veth end per host (kRbN),
                   no address, no route
    knee-R-h1      host h1: lo, eth0 (the other veth end) with 198.18.0.1/16, no route
                   but that subnet's; nftables table knee_R (loss) when asked

Nothing is ever connected to the machine's own namespace: an emulated host reaches the
other emulated hosts of its run, and nothing else.
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from knee.hosts import cleanup
from knee.hosts.base import Host, HostError, Limits, Unsupported

#: Addresses of emulated hosts: 198.18.0.0/15 is reserved for benchmarking (RFC 2544),
#: so it is never a real destination; knee hands them out from its first /16.
SUBNET = ipaddress.ip_network("198.18.0.0/16")
PREFIX_LEN = SUBNET.prefixlen
#: Hosts one network can have (addresses .0.1 up to .255.254, kRb<N> fits 15 chars).
MAX_HOSTS = SUBNET.num_addresses - 2
BRIDGE = "br0"
HOST_IF = "eth0"
HOST_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
#: Seconds one ip/tc/nft command may take; they are instant unless the machine is stuck.
COMMAND_TIMEOUT_S = 30.0
#: tbf's queue, as the time it takes to drain at the host's rate: what a full queue adds
#: to the latency a run measures. Long enough for TCP to keep the link busy (the bursts
#: TCP hands the device at once must fit; shorter queues cost throughput, docs/hosts.md),
#: short enough not to be a bufferbloat of its own.
TBF_LATENCY_MS = 20.0
#: tbf's bucket: two full frames at any rate (tbf drops a frame bigger than its bucket).
#: A real link serializes every frame at its rate; a bigger bucket lets a message of up to
#: its size leave at the veth's own speed, and a run would see almost no network time.
#: With the kernel's high-resolution timers the small bucket costs no throughput (the
#: rate counts whole Ethernet frames, as a real link's does; the measured payload rates
#: are in docs/hosts.md).
TBF_BURST_MS = 0.0
FULL_FRAME_BYTES = 1514
TBF_MIN_BURST_BYTES = 2 * FULL_FRAME_BYTES
#: netem's queue holds every packet during its delay: 10 000 full frames are 100 ms at
#: 1.2 Gbit/s, more than a veth between Python-driven nodes carries.
NETEM_LIMIT_PACKETS = 10_000
#: nftables draws a random number below this per packet; loss granularity 0.0001%.
LOSS_SCALE = 1_000_000

_CLONE_NEWNET = 0x40000000


def _run(argv: list[str], what: str, stdin: str | None = None) -> None:
    """Runs an ip/tc/nft command; a HostError naming ``what`` and its message if it fails."""
    try:
        res = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HostError(f"{what}: {argv[0]}: {e}") from None
    if res.returncode != 0:
        lines = [line for line in (res.stderr + res.stdout).splitlines() if line.strip()]
        raise HostError(f"{what}: {' '.join(lines[-2:]) or f'exit {res.returncode}'}")


def _batch(netns: str, commands: list[str], what: str, tool: str = "ip") -> None:
    """Runs several ``ip``/``tc`` commands inside ``netns`` in one process."""
    _run([tool, "-n", netns, "-batch", "-"], what, "\n".join(commands) + "\n")


class Network:
    """The emulated network of one run: a bridge in a namespace of its own, and the
    addresses of its hosts (198.18.0.1, .2, ... in the order hosts are made)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = cleanup.check_run_id(run_id)
        self.namespace = f"knee-{run_id}-net"
        self.hosts: list[str] = []
        self._made = False

    def assign(self, host: str) -> tuple[int, str]:
        """The index (from 1) and address of a new host named ``host``."""
        if host in self.hosts:
            raise HostError(f"host {host}: two emulated hosts with one name")
        if len(self.hosts) >= MAX_HOSTS:
            raise HostError(f"host {host}: an emulated network has {MAX_HOSTS} hosts at most")
        self.hosts.append(host)
        index = len(self.hosts)
        return index, str(SUBNET.network_address + index)

    def setup(self) -> None:
        """Makes the bridge namespace; idempotent."""
        if self._made:
            return
        cleanup.note(self.run_id, namespaces=[self.namespace])
        _run(["ip", "netns", "add", self.namespace], f"network {self.namespace}")
        self._made = True
        _batch(
            self.namespace,
            [
                f"link add {BRIDGE} type bridge",
                # No IPv6 link-local address: nothing but the hosts' own traffic on the wire.
                f"link set {BRIDGE} addrgenmode none",
                f"link set {BRIDGE} up",
            ],
            f"network {self.namespace}: bridge",
        )

    def teardown(self) -> None:
        """Deletes the bridge namespace (the hosts' veths go with it)."""
        try:
            cleanup.delete_namespace(self.namespace)
        except OSError as e:
            raise HostError(f"network {self.namespace}: {e}") from None
        cleanup.forget(self.run_id, namespaces=[self.namespace])
        self._made = False

    def describe(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "bridge": BRIDGE,
            "subnet": str(SUBNET),
            "hosts": list(self.hosts),
        }


def tbf_params(rate_mbit: float) -> dict[str, Any]:
    """The tbf settings of a rate: bits per second, bucket and queue in bytes."""
    rate_bit = round(rate_mbit * 1e6)
    burst = max(TBF_MIN_BURST_BYTES, round(rate_bit / 8 * TBF_BURST_MS / 1000))
    # The queue holds at least two frames, however low the rate.
    limit = burst + max(2 * FULL_FRAME_BYTES, round(rate_bit / 8 * TBF_LATENCY_MS / 1000))
    return {"rate_bit": rate_bit, "burst_bytes": burst, "limit_bytes": limit}


def _qdiscs(dev: str, rate_mbit: float | None, delay_ms: float | None) -> list[str]:
    """tc commands (one ``tc -batch``) giving ``dev`` its rate and/or delay on egress."""
    out = []
    tbf = ""
    if rate_mbit is not None:
        p = tbf_params(rate_mbit)
        tbf = f"tbf rate {p['rate_bit']}bit burst {p['burst_bytes']} limit {p['limit_bytes']}"
    if delay_ms is not None:
        # netem delays, then its child tbf paces what leaves it.
        netem = f"netem delay {delay_ms}ms limit {NETEM_LIMIT_PACKETS}"
        out.append(f"qdisc replace dev {dev} root handle 1: {netem}")
        if tbf:
            out.append(f"qdisc add dev {dev} parent 1:1 handle 10: {tbf}")
    elif tbf:
        out.append(f"qdisc replace dev {dev} root handle 1: {tbf}")
    return out


def _open_counters(namespace: str) -> int | None:
    """An fd on the namespace's /proc/net/dev, or None. The file stays bound to the
    namespace it was opened in: reading it again costs microseconds, where `ip -s link`
    costs a process every time."""
    out: list[int] = []

    def enter_and_open() -> None:
        # setns moves only this short-lived thread into the namespace.
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(Path("/run/netns", namespace), os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    return
            finally:
                os.close(fd)
            out.append(os.open("/proc/thread-self/net/dev", os.O_RDONLY))
        except (OSError, AttributeError):
            return  # the caller falls back to `ip -s link`

    thread = threading.Thread(target=enter_and_open, name=f"open {namespace}")
    thread.start()
    thread.join()
    return out[0] if out else None


def _parse_net_dev(text: str, dev: str) -> dict[str, int] | None:
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name.strip() == dev:
            fields = rest.split()
            return {"rx_bytes": int(fields[0]), "tx_bytes": int(fields[8])}
    return None


def _loss_rules(table: str, loss_percent: float) -> str:
    threshold = round(loss_percent * LOSS_SCALE / 100)
    return (
        f"table inet {table} {{\n"
        "  chain input {\n"
        "    type filter hook input priority 0; policy accept;\n"
        f'    iifname "{HOST_IF}" numgen random mod {LOSS_SCALE} < {threshold} counter drop\n'
        "  }\n"
        "}\n"
    )


class NetnsHost(Host):
    """An emulated host: a network namespace of its own behind a veth into the run's
    bridge, with its rate (both directions), the loss of what it receives and a delay."""

    kind = "netns"

    def __init__(
        self,
        name: str,
        limits: Limits,
        network: Network,
        rate_mbit: float | None = None,
        loss_percent: float | None = None,
        delay_ms: float | None = None,
    ) -> None:
        super().__init__(name, limits)
        if not HOST_NAME_RE.match(name) or name == "net":
            raise HostError(
                f"host {name!r}: an emulated host's name is letters, digits, _.- "
                "(and not 'net', the bridge's namespace)"
            )
        if rate_mbit is not None and not rate_mbit > 0:
            raise HostError(f"host {name}: rate_mbit must be above 0, not {rate_mbit}")
        if loss_percent is not None and not 0 <= loss_percent <= 100:
            raise HostError(f"host {name}: loss_percent must be 0 to 100, not {loss_percent}")
        if delay_ms is not None and not delay_ms >= 0:
            raise HostError(f"host {name}: delay_ms must be 0 or more, not {delay_ms}")
        self.network = network
        self.rate_mbit = rate_mbit
        self.loss_percent = loss_percent
        self.delay_ms = delay_ms
        self.index, self._address = network.assign(name)
        run_id = network.run_id
        self.namespace = f"knee-{run_id}-{name}"
        self.peer = f"k{run_id}b{self.index}"  # the bridge's end of the veth
        self.nft_table = f"knee_{run_id}"
        self._made = False
        self._counters_fd: int | None = None
        self._counters_tried = False

    @property
    def address(self) -> str:
        return self._address

    def setup(self) -> None:
        if self._made:
            return
        check_features(
            self.rate_mbit is not None, bool(self.loss_percent), self.delay_ms is not None
        )
        self.network.setup()
        what = f"host {self.name} ({self.namespace})"
        cleanup.note(self.network.run_id, namespaces=[self.namespace])
        _run(["ip", "netns", "add", self.namespace], what)
        self._made = True
        bridge_ns = self.network.namespace
        _batch(
            self.namespace,
            [
                "link set lo up",
                f"link add {HOST_IF} type veth peer name {self.peer} netns {bridge_ns}",
                f"link set {HOST_IF} addrgenmode none",
                f"addr add {self._address}/{PREFIX_LEN} dev {HOST_IF}",
                f"link set {HOST_IF} up",
            ],
            f"{what}: interface",
        )
        _batch(
            bridge_ns,
            [
                f"link set {self.peer} addrgenmode none",
                f"link set {self.peer} master {BRIDGE}",
                f"link set {self.peer} up",
            ],
            f"{what}: bridge port {self.peer}",
        )
        # Upload: what leaves the host's eth0; download: what the bridge sends it.
        if upload := _qdiscs(HOST_IF, self.rate_mbit, self.delay_ms):
            _batch(self.namespace, upload, f"{what}: upload qdisc", tool="tc")
        if download := _qdiscs(self.peer, self.rate_mbit, None):
            _batch(bridge_ns, download, f"{what}: download qdisc", tool="tc")
        if self.loss_percent:
            _run(
                ["ip", "netns", "exec", self.namespace, "nft", "-f", "-"],
                f"{what}: loss (nftables)",
                self.nft_rules(),
            )

    def nft_rules(self) -> str:
        """The nftables table dropping ``loss_percent`` of what the host receives. On
        input, not output: a drop on output returns EPERM to the sender, which is an
        error, not a loss."""
        return _loss_rules(self.nft_table, self.loss_percent or 0.0)

    def teardown(self) -> None:
        """Deletes the namespace; its eth0, the bridge's end and the nft table go with it."""
        if self._counters_fd is not None:
            os.close(self._counters_fd)  # it holds the namespace alive
        self._counters_fd = None
        self._counters_tried = False
        try:
            cleanup.delete_namespace(self.namespace)
        except OSError as e:
            raise HostError(f"host {self.name}: {e}") from None
        cleanup.forget(self.network.run_id, namespaces=[self.namespace])
        self._made = False

    def command(self, argv: list[str]) -> list[str]:
        # `ip netns exec` enters the namespace and execs argv: the pid stays the node's.
        return ["ip", "netns", "exec", self.namespace, *argv]

    def interface_bytes(self) -> dict[str, int] | None:
        """eth0's rx_bytes and tx_bytes, as the host sees them."""
        if not self._made:
            return None
        if not self._counters_tried:
            self._counters_tried = True
            self._counters_fd = _open_counters(self.namespace)
        if self._counters_fd is not None:
            text = os.pread(self._counters_fd, 1 << 16, 0).decode(errors="replace")
            return _parse_net_dev(text, HOST_IF)
        res = subprocess.run(
            ["ip", "-n", self.namespace, "-s", "-j", "link", "show", HOST_IF],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if res.returncode != 0:
            return None
        stats = json.loads(res.stdout)[0]["stats64"]
        return {"rx_bytes": int(stats["rx"]["bytes"]), "tx_bytes": int(stats["tx"]["bytes"])}

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            namespace=self.namespace,
            network_namespace=self.network.namespace,
            bridge_port=self.peer,
            rate_mbit=self.rate_mbit,
            loss_percent=self.loss_percent,
            delay_ms=self.delay_ms,
        )
        if self.rate_mbit is not None:
            out["tbf"] = tbf_params(self.rate_mbit)
        return out


# What this process found the machine can do: probed once, the answer never changes.
_features: dict[str, str | None] = {}
_features_lock = threading.Lock()


def _cap_net_admin() -> bool:
    # CAP_NET_ADMIN (12) for links and qdiscs, CAP_SYS_ADMIN (21) for `ip netns add`.
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            caps = int(line.split()[1], 16)
            return bool(caps & (1 << 12)) and bool(caps & (1 << 21))
    return False


def _probe(wanted: list[str]) -> None:
    """Fills ``_features`` for ``wanted``: None where it works, else why not (one line).
    In a throwaway namespace, deleted before returning."""
    if "root" not in _features:
        _features["root"] = None if _cap_net_admin() else "emulated hosts need root (CAP_NET_ADMIN)"
    if "ip" not in _features:
        have = shutil.which("ip") and shutil.which("tc")
        _features["ip"] = None if have else "ip not found: install iproute2 (scripts/host-tools)"
    if "nft" in wanted and "nft" not in _features:
        found = shutil.which("nft")
        _features["nft"] = None if found else "nft not found: install nftables (scripts/host-tools)"
    if _features["root"] or _features["ip"]:
        return
    todo: list[str] = [f for f in ("netns", "veth", "tbf", "netem", "numgen") if f in wanted]
    todo = [f for f in todo if f not in _features]
    if not todo:
        return
    ns = f"knee-probe-{os.getpid()}"
    try:
        _run(["ip", "netns", "add", ns], "probe")
    except HostError as e:
        _features["netns"] = f"network namespaces are not supported ({e})"
        return
    _features["netns"] = None
    try:
        _probe_in(ns, todo)
    finally:
        try:
            cleanup.delete_namespace(ns)
        except OSError:
            pass


def _probe_in(ns: str, todo: list[str]) -> None:
    try:
        _batch(ns, ["link add kp0 type veth peer name kp1", f"link add {BRIDGE} type bridge"], "")
        _features["veth"] = None
    except HostError as e:
        _features["veth"] = f"veth or bridge links are not in this kernel ({e})"
        return
    checks = {
        "tbf": (
            [
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                "kp0",
                "root",
                "tbf",
                "rate",
                "1mbit",
                "burst",
                "10000",
                "limit",
                "20000",
            ],
            "tc qdisc tbf is not in this kernel: rate_mbit cannot be set",
        ),
        "netem": (
            ["tc", "-n", ns, "qdisc", "add", "dev", "kp1", "root", "netem", "delay", "1ms"],
            "tc qdisc netem is not in this kernel: delay_ms cannot be set",
        ),
    }
    for feature, (argv, why) in checks.items():
        if feature in todo:
            try:
                _run(argv, "")
                _features[feature] = None
            except HostError:
                _features[feature] = why
    if "numgen" in todo and not _features.get("nft"):
        rules = _loss_rules("knee_probe", 0.0001)
        try:
            _run(["ip", "netns", "exec", ns, "nft", "-f", "-"], "", rules)
            _features["numgen"] = None
        except HostError:
            _features["numgen"] = (
                "nftables input hook with numgen is not in this kernel: loss_percent cannot be set"
            )


def check_features(need_rate: bool, need_loss: bool, need_delay: bool) -> None:
    """Raises Unsupported, in one line naming the missing piece, if emulated hosts with
    these settings cannot be made on this machine. Probes for real once per process."""
    wanted = ["root", "ip", "netns", "veth"]
    wanted += ["tbf"] if need_rate else []
    wanted += ["netem"] if need_delay else []
    wanted += ["nft", "numgen"] if need_loss else []
    with _features_lock:
        _probe(wanted)
        for feature in wanted:
            why = _features.get(feature)
            if why:
                raise Unsupported(why)
