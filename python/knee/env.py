"""What machine and software a run used (env.json)."""

from __future__ import annotations

import os
import platform
import subprocess
import tomllib
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict

from knee import __version__


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


#: The libraries the statistics and figures use: their versions go into env.json.
PACKAGES = ("numpy", "pandas", "pyarrow", "psutil", "rich", "plotly", "matplotlib", "scipy")
#: The source tree this module lives in (when run from a checkout).
REPO = Path(__file__).resolve().parents[2]
SYS_CPU = Path("/sys/devices/system/cpu")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _khz_to_mhz(values: list[str | None]) -> list[float | None]:
    return [None if v is None or not v.isdigit() else int(v) / 1000 for v in values]


def _cpuinfo_mhz() -> list[float]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
    return [float(ln.split(":", 1)[1]) for ln in lines if ln.startswith("cpu MHz")]


class CpuFrequency(TypedDict):
    """`_cpu_frequency`: the governor and per-core MHz, or why they are unknown."""

    governor: str | None
    current_mhz: Sequence[float | None] | None
    min_mhz: list[float | None] | None
    max_mhz: list[float | None] | None
    source: str
    reason: str | None


class Smt(TypedDict):
    active: bool | None
    control: str | None
    threads_per_core: int | None


class RustCrates(TypedDict):
    """`_rust_crates`: knee-node's direct dependencies as locked, or why not known."""

    crates: dict[str, str | None] | None
    source: str | None
    reason: str | None


class Env(TypedDict):
    """env.json: the machine and the software a run ran on."""

    started_utc: str
    host: str
    cores: int | None
    cpu_model: str
    memory_bytes: int | None
    os: str
    kernel: str
    python: str
    knee_version: str
    knee_node_version: str
    knee_node_path: str
    git_revision: str | None
    packages: dict[str, str | None]
    knee_node_crates: RustCrates
    cpu_frequency: CpuFrequency
    smt: Smt


def _cpu_frequency() -> CpuFrequency:
    """Governor and current/min/max frequency (MHz) per core from sysfs cpufreq. Without
    cpufreq (most VMs) they are null with the reason, and the current frequency is the one
    /proc/cpuinfo states (on a VM, often the host's nominal clock)."""
    dirs = sorted(SYS_CPU.glob("cpu[0-9]*/cpufreq"), key=lambda d: int(d.parent.name[3:]))
    if not dirs:
        return {
            "governor": None,
            "current_mhz": _cpuinfo_mhz() or None,
            "min_mhz": None,
            "max_mhz": None,
            "source": "/proc/cpuinfo",
            "reason": "no cpufreq in /sys/devices/system/cpu (a VM, or no frequency driver):"
            " governor and limits unknown",
        }
    governors = sorted({g for d in dirs if (g := _read(d / "scaling_governor"))})
    return {
        "governor": ",".join(governors) or None,
        "current_mhz": _khz_to_mhz([_read(d / "scaling_cur_freq") for d in dirs]),
        "min_mhz": _khz_to_mhz([_read(d / "scaling_min_freq") for d in dirs]),
        "max_mhz": _khz_to_mhz([_read(d / "scaling_max_freq") for d in dirs]),
        "source": "/sys/devices/system/cpu/cpu*/cpufreq",
        "reason": None,
    }


def _smt() -> Smt:
    """Simultaneous multithreading: whether it is on (sysfs) and hardware threads per
    core (/proc/cpuinfo's siblings over cpu cores, as lscpu counts them)."""
    active = _read(SYS_CPU / "smt" / "active")
    siblings = cores = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "siblings":
                siblings = int(value)
            elif key.strip() == "cpu cores":
                cores = int(value)
    except (OSError, ValueError):
        pass
    return {
        "active": None if active is None else active == "1",
        "control": _read(SYS_CPU / "smt" / "control"),
        "threads_per_core": siblings // cores if siblings and cores else None,
    }


def _rust_crates(binary: str) -> RustCrates:
    """knee-node's direct dependencies as locked in this source tree's Cargo.lock, when the
    binary is this tree's build; an installed knee-node does not say which it was built
    with."""
    lock = REPO / "Cargo.lock"
    if not Path(binary).resolve().is_relative_to(REPO) or not lock.is_file():
        why = "knee-node is not a build of this source tree"
        return {"crates": None, "source": None, "reason": why}
    try:
        packages = tomllib.loads(lock.read_text()).get("package", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        return {"crates": None, "source": None, "reason": f"Cargo.lock unreadable: {e}"}
    versions = {p["name"]: p["version"] for p in packages}
    node: dict[str, Any] = next((p for p in packages if p["name"] == "knee-node"), {})
    # A dependency locked at two versions is written "name version".
    deps = [d.split(" ") for d in node.get("dependencies", [])]
    crates = {d[0]: d[1] if len(d) > 1 else versions.get(d[0]) for d in deps}
    return {"crates": crates, "source": str(lock), "reason": None}


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def node_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip().removeprefix("knee-node ") or "unknown"
    except OSError:
        return "unknown"


def collect(node_binary: str) -> Env:
    versions: dict[str, str | None] = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_bytes": _memory_bytes(),
        "os": platform.system(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "knee_version": __version__,
        "knee_node_version": node_version(node_binary),
        "knee_node_path": node_binary,
        "git_revision": _git_revision(),
        "packages": versions,
        "knee_node_crates": _rust_crates(node_binary),
        "cpu_frequency": _cpu_frequency(),
        "smt": _smt(),
    }
