"""CPU limits on real runs: a matrix server held to a quarter of a core uses no more than a
quarter of a core (its own CPU accounting) and still answers every request, where unlimited
it uses more; the run directory says what the limit was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
from conftest import unavailable
from test_runner import only_run_dir, run_knee, write_spec

QUOTA_SPEC = """
[experiment]
name = "quota"
system = "matrix"

[hosts.quarter]
kind = "local"
cpu_cores = 0.25

[server]
threads = 1

[driver]
p = 1000

[load]
schedule = "closed"
clients = 1
duration_s = 4
warmup_s = 1.0
timeout_ms = 20000

[series.free]
[series.quarter]
placement = { server = "quarter" }
"""


def cgroups_usable(cpu_cores: float = 0.25) -> str | None:
    """Why CPU limits of `cpu_cores` cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "CPU limits need root (cgroups)"
    from knee.hosts import Unsupported, cgroups
    from knee.hosts.base import Limits

    try:
        cgroups.check_limits([Limits(cpu_cores=cpu_cores)])
    except Unsupported as e:
        return str(e)
    return None


def test_a_quarter_core_caps_a_matrix_server_near_a_quarter(tmp_path: Path) -> None:
    reason = cgroups_usable()
    if reason:
        unavailable(reason)
    out = tmp_path / "runs"
    proc = run_knee("run", str(write_spec(tmp_path, QUOTA_SPEC)), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out)
    html = (run_dir / "report.html").read_text()
    assert "ts-cpu-quota" in html and "0.25 cores" in html
    free, quarter = json.loads((run_dir / "summary.json").read_text())["points"]
    # Both delivered every request they sent, correctly: the quota slows, it does not fail.
    for point in (free, quarter):
        ok = point["statuses"].pop("ok")
        assert ok > 0 and not any(point["statuses"].values()), point["statuses"]
    record = json.loads((run_dir / "points" / "p001.json").read_text())
    server = next(n for n in record["topology"] if n["name"] == "server")
    assert server["host"] == "quarter"
    assert server["limits"] == {"cpu_cores": 0.25}
    hosts = json.loads((run_dir / "env.json").read_text())["hosts"]
    assert any(
        h["name"] == "quarter" and h["limits"] == {"cpu_cores": 0.25} for h in hosts["hosts"]
    )
    ts = pd.read_parquet(run_dir / "timeseries.parquet")
    limited = ts[(ts["node"] == "server") & (ts["point"] == 1)]
    assert (limited["cpu_quota_cores"] == 0.25).all()
    # The rule, in the server's own CPU accounting: busy all the time within its quarter
    # (about 100% of its quota), never much more than a quarter of a core in any second.
    busy = limited["cpu_percent_of_quota"].iloc[1:-1]
    assert busy.median() > 70, limited[["cpu_percent", "cpu_percent_of_quota"]]
    assert limited["cpu_percent"].iloc[1:-1].max() < 40
    # Unlimited, the same server on the same load took more than the quota allows: the
    # quota, not the load, held the quarter point.
    unlimited = ts[(ts["node"] == "server") & (ts["point"] == 0)]
    assert unlimited["cpu_percent_of_quota"].isna().all()
    assert unlimited["cpu_percent"].iloc[1:-1].median() > 40, unlimited["cpu_percent"]
