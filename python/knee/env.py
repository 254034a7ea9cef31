"""What machine and software a run used (env.json)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

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


def _git_revision() -> str | None:
    repo = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
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


def collect(node_binary: str) -> dict[str, Any]:
    versions = {}
    for pkg in ("numpy", "pandas", "pyarrow", "psutil", "rich"):
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
    }
