"""The real HTTP/2 servers the h2 benches and tests use (tests/real_http_servers.py's
go-h2c and go-h2-tls: Go net/http, tests/http_apps/go_h2) speak HTTP/2 to peers we did not
write (curl, h2load), and the peers scripts/h2-peers installs are there and run."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from real_http_servers import real_server

#: Seconds a peer run may take (each is bounded far below by its own arguments).
PEER_TIMEOUT_S = 60.0


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=PEER_TIMEOUT_S, check=False
    )


@pytest.mark.parametrize("name", ["go-h2c", "go-h2-tls"])
def test_go_h2_speaks_http2(name: str, tmp_path: Path, knee_node: str) -> None:
    with real_server(name, tmp_path, knee_node) as server:
        h2 = ["--http2"] if server.tls else ["--http2-prior-knowledge"]
        ca = ["--cacert", str(server.ca_file)] if server.ca_file else []
        curl = _run(
            "curl", "-sS", "--max-time", "10", *h2, *ca, "-w", "\n%{http_version}", server.url
        )
        load = _run("h2load", "-n", "500", "-c", "2", "-m", "10", f"{server.url}/")
    assert curl.returncode == 0, curl.stderr
    assert curl.stdout == "hello from go\n\n2"
    assert "500 succeeded, 0 failed" in load.stdout, load.stdout
    if server.tls:
        assert "Application protocol: h2" in load.stdout


def test_ghz_is_installed_in_the_tools_folder() -> None:
    repo = Path(__file__).resolve().parents[1]
    tools = _run(str(repo / "scripts" / "h2-peers"), "dir").stdout.strip()
    ghz = Path(tools) / "ghz"
    if not ghz.exists():
        pytest.fail(f"{ghz} is missing: scripts/h2-peers install builds it")
    version = _run(str(ghz), "--version")
    said = version.stdout + version.stderr  # ghz prints its version on stderr
    assert re.fullmatch(r"v\d+\.\d+\.\d+\n?", said), said
    assert shutil.which("h2load") and shutil.which("nghttp")
