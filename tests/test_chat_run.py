"""chat through `knee run`: replicas and client started by the runner, the primary killed
and restarted by the spec's event timeline, and the failover figures' data computed from
the run directory (no operation lost or applied twice, a measurable gap)."""

from __future__ import annotations

from pathlib import Path

from report_helpers import events_toml, run_spec

import knee
from knee.analysis import chat

SPEC = """
[experiment]
name = "chat-failover-test"
system = "chat"

[server]
replicas = 3
heartbeat_ms = 50
failure_timeout_ms = 400

[driver]
mix = "session"
reply_bytes = 256

[load]
schedule = "closed"
clients = 3
think_ms = 5
duration_s = 7
timeout_ms = 300
warmup_s = 0.5
""" + events_toml((2.0, "kill", "replica-0"), (4.5, "start", "replica-0"))


def test_failover_run_through_the_event_timeline(tmp_path: Path) -> None:
    run_dir = run_spec(SPEC, tmp_path, "failover", timeout_s=180)
    run = knee.open_run(run_dir)
    integrity = chat.failover_integrity(run)
    assert integrity["acknowledged_writes"] > 100
    assert integrity["lost"] == 0 and integrity["applied_twice"] == 0, integrity
    gap_ms = chat.failover_gap_ms(run)
    # Detection waits failure_timeout_ms after the last heartbeat, so the gap cannot be much
    # shorter; that it ended at all is shown by the successor serving (below).
    assert gap_ms is not None and gap_ms > 150, gap_ms
    timeline = chat.failover_timeline(run)
    assert list(timeline["events"]["kind"]) == ["kill", "start"]
    samples, events = timeline["samples"], timeline["events"]
    ok = samples[samples["status"] == "ok"]
    kill_s, start_s = events["t_s"]
    # The first primary before the kill, its successor after it, and replica-0 again after
    # its restart (fail-back): each within its own stretch of the timeline.
    assert (ok.loc[ok["t_s"] < kill_s, "replica"] == 0).any()
    assert (ok.loc[(ok["t_s"] > kill_s) & (ok["t_s"] < start_s), "replica"] == 1).any()
    after = ok[ok["t_s"] > start_s]
    assert (after["replica"] == 0).any(), after["replica"].value_counts()
    assert after["replica"].iloc[-1] == 0  # and it is still the one serving at the end
    magic = chat.magic_one_percent(run)
    assert (magic["max_without_ms"] <= magic["max_ms"]).all()
