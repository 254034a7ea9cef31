"""A service that sheds load (issue 36, item 4): nginx's `limit_req`, a real rate limiter,
answers 429 at once beyond its rate, so its latency stays low while it fails requests. Its
rate is the capacity by construction. The search finds it within 5%, limited by errors,
and the bottleneck says the target shed load, with the share and the status code.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import unavailable
from test_runner import only_run_dir, run_knee

from knee.resources.shedding import shedding

#: The limiter's rate: the capacity by construction.
LIMIT_PER_S = 200
#: Its bucket: a Poisson stream just under the rate is rarely refused for its bursts (with
#: 20 the search found 185-189/s: more than 1% refused just under the rate). A stream over
#: the rate is refused once the bucket is full, after BURST / (rate - 200) seconds: 4 s at
#: 210/s. A probe must run past that, or the limiter passes 2 s at 250/s whole: hence 8 s
#: probes (with 100 and 2 s probes the search found 211.5/s, stable, in one full run here).
BURST = 40

CONFIG = """
master_process off;
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    # One bucket for every client, as an overload guard in front of a service has.
    limit_req_zone $server_name zone=guard:1m rate={rate}r/s;
    limit_req_status 429;
    server {{
        listen 127.0.0.1:{port};
        server_name knee;
        root {dir}/www;
        # limit_req acts in the preaccess phase: a file, not `return` (which answers first).
        location / {{ limit_req zone=guard burst={burst} nodelay; }}
    }}
}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def limited_nginx(tmp_path: Path) -> Iterator[str]:
    """nginx (scripts/nginx installs it) serving one small file behind limit_req."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        unavailable("nginx is not installed (scripts/nginx install)")
    folder = tmp_path / "nginx"
    (folder / "www").mkdir(parents=True)
    (folder / "tmp").mkdir()
    (folder / "www" / "index.html").write_text("hello\n")
    port = _free_port()
    conf = folder / "nginx.conf"
    conf.write_text(CONFIG.format(dir=folder, port=port, rate=LIMIT_PER_S, burst=BURST))
    proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(folder)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, (folder / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx never listened"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()  # by its PID
        proc.wait(timeout=10)


def test_the_search_finds_a_rate_limiters_rate_and_names_the_shedding(
    tmp_path: Path, limited_nginx: str
) -> None:
    proc = run_knee(
        "http",
        limited_nginx,
        "--min-rate", "120", "--probe", "8s", "--budget", "240s",
        "--out", str(tmp_path / "runs"), "--no-progress", "--json",
        timeout_s=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    group = json.loads(out[out.index("\n{\n") + 1 :])["groups"][0]
    capacity = group["capacity"]
    assert capacity["limited_by"] == "errors", capacity
    assert abs(capacity["rate_per_s"] - LIMIT_PER_S) <= 0.05 * LIMIT_PER_S, capacity
    bottleneck = group["bottleneck"]
    assert bottleneck["unseen"] is False
    shed = bottleneck["sheds"]
    assert set(shed["statuses"]) == {"429"}, shed
    assert shed["shed_share_of_failures"] == 1.0
    assert shed["from_rate_per_s"] == capacity["interval_per_s"][1]
    lo, hi = shed["failed_share"]
    assert 0.01 < lo <= hi < 1.0, shed
    assert bottleneck["sentence"].startswith("set by the target shedding load"), bottleneck
    assert "429 Too Many Requests" in bottleneck["sentence"]
    # The points behind it, as summary.json has them: every 429 counted, none in ok.
    summary = json.loads((only_run_dir(tmp_path / "runs") / "summary.json").read_text())
    over = [p for p in summary["points"] if p["point"] in shed["points"]]
    assert over
    for p in over:
        failed = sum(v for k, v in p["statuses"].items() if k != "ok")
        assert p["http_statuses"]["429"] == failed, p["http_statuses"]
    assert shedding(summary["points"]) == shed
