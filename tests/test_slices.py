"""The slices system on real nodes: the PNs' grayscale against a numpy reference, a smoke run
of each experiment with the exactly-once checker's verdict, and the report in Chromium.

Every test here needs knee-node's `slices` system and skips, saying so, until the binary
has it (`knee-node describe`)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import unavailable
from report_helpers import (
    check_in_browser,
    check_pngs,
    events_toml,
    figure_ids,
    only_dir,
    run_knee,
    smoke_run,
)
from test_hosts_limits import cgroups_usable

import knee
from knee import results
from knee.analysis import slices as analysis

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def slices_node(knee_node: str) -> str:
    out = subprocess.run([knee_node, "describe"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert "slices" in json.loads(out.stdout)["systems"], f"{knee_node} has no slices system"
    return knee_node


# ------------------------------------------------------------------ grayscale


def gray_reference(rgb: np.ndarray) -> np.ndarray:
    """0.3 R + 0.59 G + 0.11 B per pixel, rounded to nearest, in integers as docs/slices.md
    defines it: (30 R + 59 G + 11 B + 50) // 100 (floats disagree on ties)."""
    px = rgb.reshape(-1, 3).astype(np.int64)
    return ((px @ np.array([30, 59, 11]) + 50) // 100).astype(np.uint8)


def fnv1a_64(data: bytes) -> int:
    """FNV-1a over bytes, the reply's gray_checksum, in numpy: one multiply per byte is done
    as a running product with wrap-around (uint64 arithmetic)."""
    h = np.uint64(0xCBF29CE484222325)
    prime = np.uint64(0x100000001B3)
    with np.errstate(over="ignore"):
        for b in np.frombuffer(data, dtype=np.uint8):  # a test's few kB, not samples
            h = (h ^ np.uint64(b)) * prime
    return int(h)


def test_reference_grayscale_rounds_to_nearest() -> None:
    rgb = np.array([[255, 255, 255], [0, 0, 0], [10, 20, 30], [100, 0, 0]], dtype=np.uint8)
    assert gray_reference(rgb).tolist() == [255, 0, 18, 30]
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C


def test_a_pn_computes_the_reference_grayscale(
    slices_node: str, processes: Any, tmp_path: Path
) -> None:
    """A real LB, PN and client; the PN dumps what it computed (its `gray_dump_path`: per
    item, u16 width, u16 height, the RGB bytes, the gray bytes) and the test recomputes
    each image with numpy."""
    prefix = f"knee/slices/test-{tmp_path.name}"
    dump = tmp_path / "gray.bin"
    lb = _serve(slices_node, processes, tmp_path, "lb", {"role": "lb", "slices": 4,
                "prefix": prefix, "heartbeat_ms": 50, "failure_timeout_ms": 500,
                "balance": True, "connect": []})  # fmt: skip
    _serve(slices_node, processes, tmp_path, "pn-0", {"role": "pn", "pn": 0, "slices": 4,
           "threads": 1, "work_repeat": 1, "queue_max": 1000,
           "log_path": str(tmp_path / "pn-0.log"), "heartbeat_ms": 50, "prefix": prefix,
           "connect": [lb], "gray_dump_path": str(dump)})  # fmt: skip
    done = _client(slices_node, tmp_path, prefix, [lb], image_bytes=30 * 20 * 3, requests=20)
    assert done["completed"] == 20
    data, n = dump.read_bytes(), 0
    while data:
        w, h = int.from_bytes(data[0:2], "little"), int.from_bytes(data[2:4], "little")
        rgb = np.frombuffer(data[4 : 4 + w * h * 3], dtype=np.uint8)
        gray = np.frombuffer(data[4 + w * h * 3 : 4 + w * h * 4], dtype=np.uint8)
        assert np.array_equal(gray, gray_reference(rgb))
        data, n = data[4 + w * h * 4 :], n + 1
    assert n == 20


def test_a_wrong_grayscale_fails_the_checker(
    slices_node: str, processes: Any, tmp_path: Path
) -> None:
    """A real LB, PN and client, the PN told (`wrong_reply_every`, a tests-only knob) to
    answer every item whose id is a multiple of 4 with a wrong grayscale checksum. The
    client records those as errors and counts them; the checker, reading the client's real
    samples file and the PN's real log, fails the run for them and for nothing else."""
    prefix = f"knee/slices/test-{tmp_path.name}"
    lb = _serve(slices_node, processes, tmp_path, "lb", {"role": "lb", "slices": 4,
                "prefix": prefix, "heartbeat_ms": 50, "failure_timeout_ms": 500,
                "balance": True, "connect": []})  # fmt: skip
    log_path = tmp_path / "pn-0.log"
    _serve(slices_node, processes, tmp_path, "pn-0", {"role": "pn", "pn": 0, "slices": 4,
           "threads": 1, "work_repeat": 1, "queue_max": 1000, "log_path": str(log_path),
           "heartbeat_ms": 50, "prefix": prefix, "connect": [lb],
           "wrong_reply_every": 4})  # fmt: skip
    requests = 20
    done = _client(slices_node, tmp_path, prefix, [lb], image_bytes=30 * 20 * 3, requests=requests)
    samples = results.samples_frame(
        results.read_sample_records(tmp_path / "client.samples.bin"),
        point=0,
        series="wrong",
        node="client",
        run_start_ns=0,
        warmup_end_ns=0,
        system="slices",
    )
    wrong_ids = set(range(0, requests, 4))
    assert set(samples.loc[samples["status"] == "error", "request_id"]) == wrong_ids
    assert done["bad_checksums"] >= len(wrong_ids), done
    # The PN flushes its log every 100 ms: wait until it holds every item processed.
    log = pd.DataFrame()
    for _ in range(100):
        log = analysis.log_frame(analysis.read_pn_log(log_path))
        if len(log) >= requests:
            break
        time.sleep(0.05)
    verdict = analysis.check_exactly_once(
        samples, log, killed=set(), retries=2, bad_checksums=done["bad_checksums"]
    )
    assert not verdict.passed, verdict
    assert verdict.wrong == len(wrong_ids) and verdict.bad_checksums == done["bad_checksums"]
    assert verdict.replied == requests - len(wrong_ids) and verdict.unfinished == 0, verdict
    # Only the wrong answers fail it: every item was processed once and logged.
    only_wrong = (verdict.lost, verdict.repeated, verdict.unknown, verdict.unlogged_replies)
    assert only_wrong == (0, 0, 0, 0), verdict


def _serve(node: str, processes: Any, tmp_path: Path, name: str, server: dict[str, Any]) -> str:
    config = {"server": server, "listen": "127.0.0.1:0"}
    proc = processes.spawn(
        [node, "serve", "slices", "--name", name, "--config", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / f"{name}.stderr.log", "wb"),  # noqa: SIM115 - the child's
    )
    assert proc.stdout is not None
    for raw in proc.stdout:
        event = json.loads(raw)
        if event.get("event") == "ready":
            return str(event["addr"])
    raise AssertionError(
        f"{name} ended before ready: {(tmp_path / f'{name}.stderr.log').read_text()}"
    )


def _client(
    node: str, tmp_path: Path, prefix: str, connect: list[str], image_bytes: int, requests: int
) -> dict[str, Any]:
    config = {
        "schedule": {"kind": "constant", "rate_per_s": 50.0},
        "requests": requests,
        "timeout_ms": 3000,
        "seed": 1,
        "samples_path": str(tmp_path / "client.samples.bin"),
        "histogram_path": str(tmp_path / "client.histogram.csv"),
        "driver": {"prefix": prefix, "connect": connect, "slices": 4,
                   "image_bytes": image_bytes, "retries": 2, "sender": 1},
    }  # fmt: skip
    out = subprocess.run(
        [node, "load", "slices", "--name", "client", "--config", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return next(e for e in events if e.get("event") == "done")


# ------------------------------------------------------------------ the experiments' smoke runs


@pytest.mark.parametrize("experiment", ["slices-join", "slices-overhead", "slices-balance"])
def test_smoke_run_is_exactly_once_with_a_report(
    slices_node: str, experiment: str, tmp_path: Path
) -> None:
    """Each experiment's smoke preset end to end (`knee run` writes report.html); every
    point passes the checker; the report's charts draw in Chromium."""
    run_dir, _ = smoke_run(experiment, tmp_path / "runs")
    run = knee.open_run(run_dir)
    for point in run.sample_points():
        verdict = analysis.exactly_once(run, point)
        assert verdict.passed, verdict
        assert verdict.replied > 0
        assert verdict.wrong == 0 and verdict.bad_checksums == 0, verdict
    if experiment == "slices-join":
        moves, _ = analysis.handoffs(run, run.sample_points()[0])
        assert len(moves) > 0  # the joins moved slices
    html_path = run_dir / "report.html"
    html = html_path.read_text()
    assert "Exactly once" in html
    assert figure_ids(html)
    check_in_browser(html_path, tmp_path)
    check_pngs(html_path)


# A small run of its own: pn-0 from the start, pn-1 joining at 0.5 s (so it surely owns
# slices when it dies) and pn-2 at 1.5 s, pn-1 killed at
# 4 s (its slices go to the others after failure_timeout_ms), 7 s in all.
KILL_SPEC = """
[experiment]
name = "slices-kill"
system = "slices"

[server]
slices = 10
pns = 3
pns_at_start = 1
work_repeat = 20
heartbeat_ms = 50
failure_timeout_ms = 300
router = {router}

[driver]
image_bytes = 3072
retries = 5

[load]
schedule = "constant"
rate_per_s = 60
duration_s = 7
timeout_ms = 1000
warmup_s = 0
""" + events_toml((0.5, "start", "pn-1"), (1.5, "start", "pn-2"), (4.0, "kill", "pn-1"))


def _run_one_point(tmp_path: Path, spec_text: str) -> tuple[Path, Any, int, Any]:
    """Runs a one-point spec with `knee run`: its run directory, run, point and the
    exactly-once checker's verdict."""
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    out = run_knee(
        "run", str(spec), "--out", str(tmp_path / "runs"), "--no-report", timeout_s=120
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = only_dir(tmp_path / "runs")
    run = knee.open_run(run_dir)
    (point,) = run.sample_points()
    return run_dir, run, point, analysis.exactly_once(run, point)


def _last_event(run_dir: Path, node: str, kind: str) -> dict[str, Any]:
    lines = (run_dir / "nodes" / f"{node}.p000.events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") == kind][-1]


@pytest.mark.parametrize(
    ("router", "rate_per_s"),
    [(False, 60), (True, 60), (False, 8)],
    ids=["peers", "router", "peers-acks-in-messages"],
)
def test_a_killed_pn_loses_nothing(
    slices_node: str, router: bool, rate_per_s: int, tmp_path: Path
) -> None:
    """A PN killed under load (after a join moved slices): no item lost, nothing repeated
    but what the killed PN may have processed unacknowledged (counted); through peers and
    through a Zenoh router. The taker skips what the client was answered for: at 60 items/s
    it learns that from the acks on the items (one every 17 ms, the ack interval is 62 ms);
    at 8 items/s an item comes every 125 ms, so from the client's ack messages."""
    spec = KILL_SPEC.replace("{router}", "true" if router else "false")
    spec = spec.replace("rate_per_s = 60", f"rate_per_s = {rate_per_s}")
    run_dir, _, _, verdict = _run_one_point(tmp_path, spec)
    assert verdict.killed == [1]
    assert verdict.passed, verdict
    assert verdict.lost == 0 and verdict.repeated == 0
    assert verdict.wrong == 0, verdict  # every answer's grayscale was the image's
    served = {row["pn"] for row in verdict.by_pn_epoch}
    assert served == {0, 1, 2}  # the joiner took slices; the killed PN had served some
    done = _last_event(run_dir, "client", "done")
    assert done["bad_checksums"] == verdict.bad_checksums == 0, done  # late answers too
    on_items, in_messages = done["acked_ids_on_items"], done["acked_ids_in_messages"]
    assert on_items + in_messages >= done["ok"] > 0, done  # every answered id is told
    if rate_per_s == 60:
        assert on_items > 10 * in_messages, done
    else:
        assert in_messages > 10 * on_items, done


JUNK_SPEC = """
[experiment]
name = "slices-junk"
system = "slices"

[server]
slices = 4
pns = 2
pns_at_start = 2
work_repeat = 5

[driver]
image_bytes = 3072
junk_every = 4

[load]
schedule = "constant"
rate_per_s = 120
duration_s = 2.5
timeout_ms = 2000
warmup_s = 0
"""


def test_bad_input_on_the_topics_is_counted_and_dropped(slices_node: str, tmp_path: Path) -> None:
    """Every 4th item, a malformed message (random bytes and a truncated item on the items
    topic, an item whose slice is not id mod S, an unknown control message to the LB,
    random bytes to a PN and as a handoff): the PNs and the LB count and drop each, never
    crash, and every real item is still processed exactly once."""
    run_dir, _, _, verdict = _run_one_point(tmp_path, JUNK_SPEC)
    assert verdict.passed and verdict.lost == 0 and verdict.repeated == 0, verdict
    assert verdict.wrong == 0 and verdict.bad_checksums == 0, verdict

    def last(node: str, kind: str) -> dict[str, Any]:
        return _last_event(run_dir, node, kind)

    junk = last("client", "done")["junk_sent"]
    assert junk >= 50
    bad_items = sum(last(f"pn-{i}", "stats")["dropped_bad"] for i in range(2))
    assert bad_items >= junk // 6 * 3 * 2  # three of six kinds are items, seen by both PNs
    assert last("pn-0", "stats")["bad_control"] >= junk // 6 * 2  # garbage and a bad handoff
    assert last("lb", "stats")["bad_control"] >= junk // 6
    events = pd.read_parquet(run_dir / "events.parquet")
    stops = events[events["kind"] == "node_stop"]
    assert (stops["detail"] == "exit code 0").all(), stops  # no node crashed


OVERLOAD_SPEC = """
[experiment]
name = "slices-overload"
system = "slices"

[server]
slices = 4
pns = 1
pns_at_start = 1
# About 85 items/s at a quarter core: in the 3 s of sending and the 2 s a stopping PN
# waits, it serves about half of the 900 items, so many are still queued at its stop.
work_repeat = 800
failure_timeout_ms = 2000  # overload, not crash detection, is tested here

[driver]
image_bytes = 8112
retries = 0

[load]
schedule = "constant"
rate_per_s = 300
duration_s = 3
timeout_ms = 300
warmup_s = 0

[limits."pn-*"]
cpu_cores = 0.25
"""


def test_past_capacity_items_are_late_or_held_not_lost(slices_node: str, tmp_path: Path) -> None:
    """One PN at a quarter core (one worker, sized from its quota), offered about three times
    what it serves, the client giving up after 300 ms: items outwait the client. Those processed
    later are late, those still queued at the stop are logged as held; none is lost."""
    if (why := cgroups_usable()) is not None:
        unavailable(why)
    run_dir, _, _, verdict = _run_one_point(tmp_path, OVERLOAD_SPEC)
    assert verdict.held > 0 and verdict.late + verdict.held > verdict.replied // 4, verdict
    assert verdict.lost == 0 and verdict.repeated == 0 and verdict.passed, verdict
    assert verdict.wrong == 0 and verdict.bad_checksums == 0, verdict
    lines = (run_dir / "nodes" / "pn-0.p000.events.jsonl").read_text().splitlines()
    stats = [e for e in map(json.loads, lines) if e.get("event") == "stats"]
    assert stats[-1]["threads"] == 1  # a quarter core: one worker
    assert 0 < verdict.held <= stats[-1]["queue_len"]  # queued at its stop, and logged


MID_HANDOFF_SPEC = """
[experiment]
name = "slices-kill-mid-handoff"
system = "slices"

[server]
slices = 10
pns = 2
pns_at_start = 1
work_repeat = 20
heartbeat_ms = 50
failure_timeout_ms = 300
# A giver waits 2 s between stopping the slices it gives and sending its handoff.
give_delay_ms = 2000

[driver]
image_bytes = 3072
retries = 5

[load]
schedule = "constant"
rate_per_s = 60
duration_s = 6
timeout_ms = 1000
warmup_s = 0
""" + events_toml((1.0, "start", "pn-1"), (2.0, "kill", "pn-0"))


def test_a_pn_killed_mid_handoff_loses_nothing(slices_node: str, tmp_path: Path) -> None:
    """pn-1 joins at 1 s and pn-0 stops the slices it gives it; pn-0 is killed at 2 s,
    inside its 2 s handoff delay (`give_delay_ms`), before its handoff went out. The LB
    finds it dead and lets pn-1 keep those slices as a crash takeover, with no watermark:
    nothing is lost, nothing repeated but what pn-0 may have processed unacknowledged."""
    run_dir, run, point, verdict = _run_one_point(tmp_path, MID_HANDOFF_SPEC)
    assert verdict.killed == [0]
    assert verdict.passed and verdict.lost == 0 and verdict.repeated == 0, verdict
    assert verdict.wrong == 0 and verdict.bad_checksums == 0, verdict
    moves = analysis.node_events(run, point, "lb", "handoff")
    # The join's moves never completed as joins: each ended as a crash takeover by pn-1.
    assert moves and all((m["from"], m["to"], m["reason"]) == (0, 1, "crash") for m in moves)
    assert {row["pn"] for row in verdict.by_pn_epoch} == {0, 1}  # both served


FROZEN_OWNER_SPEC = """
[experiment]
name = "slices-frozen-owner"
system = "slices"

[server]
slices = 10
pns = 2
pns_at_start = 2
work_repeat = 1
# Longer than the freeze: the LB does not call the frozen PN crashed.
failure_timeout_ms = 30000

[driver]
image_bytes = 8112
retries = 0

[load]
schedule = "constant"
rate_per_s = 1000
duration_s = 10
timeout_ms = 3000
max_outstanding = 100000
warmup_s = 0
""" + events_toml((2.0, "freeze", "pn-1"), (9.0, "resume", "pn-1"))


def test_a_frozen_owner_loses_nothing(slices_node: str, tmp_path: Path) -> None:
    """pn-1 owns half the slices and is frozen (SIGSTOP) for 7 s under 8 MB/s of items, with
    no re-publication: the client's link to it fills and its puts block. With zenoh's
    default `wait_before_close` (5 s) zenoh closed that link and dropped what was queued on
    it (thousands of items lost); knee waits 60 s, so the items arrive late, none lost."""
    _, _, _, verdict = _run_one_point(tmp_path, FROZEN_OWNER_SPEC)
    assert verdict.lost == 0 and verdict.repeated == 0 and verdict.passed, verdict
    assert verdict.wrong == 0 and verdict.bad_checksums == 0, verdict
    assert {row["pn"] for row in verdict.by_pn_epoch} == {0, 1}  # both served
    assert verdict.late > 0  # the freeze held items past their timeout: it did bite


LAGGING_GIVER_SPEC = """
[experiment]
name = "slices-lagging-giver"
system = "slices"

[server]
slices = 10
pns = 2
pns_at_start = 1
work_repeat = 1
# Longer than the freeze, with room: the LB does not call the frozen PN crashed.
failure_timeout_ms = 8000

[driver]
image_bytes = 3072
retries = 0

[load]
schedule = "constant"
rate_per_s = 300
duration_s = 6
# Longer than the freeze: the items it holds are answered in time, none late.
timeout_ms = 5000
warmup_s = 0

# The gap is the items between pn-0's watermark and pn-1's first item. At the resume pn-0
# hears the items of its freeze and the give together, and takes a race-dependent part of
# them (0.1 to 0.45 s of them seen) before it gives: pn-1 starts 1.5 s into the freeze so that its
# first item is later than that, and 1.5 s before the resume so that it joins (0.5 s at
# most seen) while pn-0 is frozen.
""" + events_toml((1.5, "freeze", "pn-0"), (3.0, "start", "pn-1"), (4.5, "resume", "pn-0"))


def test_items_a_taker_missed_come_from_its_lagging_giver(slices_node: str, tmp_path: Path) -> None:
    """pn-0 is frozen from 1.5 s to 4.5 s and pn-1 joins at 3 s: pn-0's watermark (the last
    item it had heard at the give) is older than pn-1's first item, and the items between
    reached neither owner in time (no re-publication here). pn-1 asks pn-0 for them, pn-0
    forwards them as it hears them: none lost (before, about 20 were), none repeated."""
    _, run, point, verdict = _run_one_point(tmp_path, LAGGING_GIVER_SPEC)
    assert verdict.lost == 0 and verdict.repeated == 0 and verdict.passed, verdict
    assert verdict.wrong == 0 and verdict.bad_checksums == 0, verdict

    def last_stats(node: str) -> dict[str, Any]:
        return analysis.node_events(run, point, node, "stats")[-1]

    taker, giver = last_stats("pn-1"), last_stats("pn-0")
    assert taker["missing_asked"] > 0, taker  # the freeze made the gap it is meant to
    assert giver["forwarded"] == taker["missing_asked"], (giver, taker)  # each one found
