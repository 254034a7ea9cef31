"""The one path by which a point's correctness is checked, for every system that has a
checker: `check(system, PointRun)` runs the system's checker (CHECKERS) as the point ends,
its nodes stopped and their files fetched, its scratch folder still there; the runner keeps
the verdict, PASS or FAIL with the counts behind it, as the point's `check` in summary.json
(`points[].check`), and the reports show it (`point_verdict`).

- chat (`chat_exactly_once`): `knee.analysis.chat_checker.check_point`, the acknowledged
  writes against the database's own tables (its SQLite file is in the scratch folder).
- share (`share_obtains`): every obtain completed with a verified checksum or failed with
  its status; no corrupt file accepted: each obtain a peer served corrupted
  (`server.corrupt_every`, its `corrupted` counter) is refused by the client's checksum, and
  the client's own mismatch count agrees with its samples.
- stream (`stream_counters`): the client's `done` counters (per status, retransmissions,
  frames, complete frames, blocks missing) equal what its samples say.
- slices (`slices_exactly_once`): `knee.analysis.slices.check_exactly_once`.

Every count comes from the run directory (samples, the nodes' stdout lines, the timeline as
applied), with arrays, never a per-sample loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from knee.analysis.chat_checker import check_point as chat_check_point
from knee.contract import (
    SHARE_FLAG_CHECKSUM_MISMATCH,
    SHARE_FLAG_FOR_OBTAIN,
    SHARE_FLAG_REPLICA,
    SHARE_OPS,
    STATUSES,
    STREAM_FLAG_HEDGED,
    STREAM_FLAG_REDUNDANT,
    STREAM_FLAG_RETRANSMISSION,
)
from knee.contract import STREAM_BLOCK_SIDE_PX as BLOCK_SIDE_PX
from knee.results import Run, RunEvent, node_lines, open_run
from knee.run_params import point_params, setting
from knee.stats.summary import SystemCheck

Verdict = SystemCheck

#: The op codes of share's obtain and search (docs/share.md).
SHARE_OBTAIN = next(op for op, name in SHARE_OPS.items() if name == "obtain")
SHARE_SEARCH = next(op for op, name in SHARE_OPS.items() if name == "search")


def verdict(name: str, passed: bool, counts: dict[str, int], detail: str = "") -> Verdict:
    return {
        "name": name,
        "verdict": "PASS" if passed else "FAIL",
        "counts": {k: int(v) for k, v in counts.items()},
        "detail": detail,
    }


def _statuses(status: pd.Series) -> dict[str, int]:
    counts = status.astype(str).value_counts()
    return {s: int(counts.get(s, 0)) for s in STATUSES}


# ------------------------------------------------------------------ share


def share_obtains(run: Run, point: int) -> Verdict:
    s = run.point_samples(point, ["node", "op", "status", "flags", "service"])
    flags = s["flags"].to_numpy().astype(np.int64)
    obtain = (s["op"] == SHARE_OBTAIN).to_numpy()
    o = s.loc[obtain]
    oflags = flags[obtain]
    mismatch = (oflags & SHARE_FLAG_CHECKSUM_MISMATCH) != 0
    status = o["status"].astype(str).to_numpy()
    ok = status == "ok"
    by_status = _statuses(o["status"])
    # Per peer: obtains served corrupted (every life of the peer) against those refused
    # (mismatch) or broken off (any other failure): none may have been accepted.
    clients = sorted({str(n) for n in s["node"].unique()})
    corrupted = {
        k: sum(1 for e in node_lines(run.path, f"peer-{k}", point) if e.get("event") == "corrupted")
        for k in range(_peers(run, point))
    }
    failed_from = o.loc[~ok].groupby("service").size()
    unrefused = sum(max(0, n - int(failed_from.get(k, 0))) for k, n in corrupted.items())
    client_mismatches = sum(
        int(e.get("checksum_mismatches", 0))
        for node in clients
        for e in node_lines(run.path, node, point)
        if e.get("event") == "done"
    )
    obtain_search = (s["op"] == SHARE_SEARCH).to_numpy() & ((flags & SHARE_FLAG_FOR_OBTAIN) != 0)
    counts = {
        "obtain_searches": int(obtain_search.sum()),
        "obtain_searches_failed": int(
            (obtain_search & (s["status"].astype(str) != "ok").to_numpy()).sum()
        ),
        "obtains": len(o),
        "verified": int(ok.sum()),
        "refused_corrupt": int(mismatch.sum()),
        **{f"failed_{k}": v for k, v in by_status.items() if k != "ok"},
        "corrupt_served": sum(corrupted.values()),
        "corrupt_not_refused": unrefused,
        "accepted_with_mismatch": int((ok & mismatch).sum()),
        "client_mismatches": client_mismatches,
        "replica_searches": int((obtain_search & ((flags & SHARE_FLAG_REPLICA) != 0)).sum()),
        "peer_kills": _kills(run, point, "peer-"),
    }
    problems = []
    if not counts["obtains"]:
        problems.append("no obtain was made: nothing to check")
    if counts["accepted_with_mismatch"]:
        problems.append(f"{counts['accepted_with_mismatch']} obtains ok despite a mismatch")
    if unrefused:
        problems.append(f"{unrefused} corrupted obtains not refused")
    if client_mismatches != counts["refused_corrupt"]:
        problems.append(
            f"the clients count {client_mismatches} mismatches, their samples "
            f"{counts['refused_corrupt']}"
        )
    if by_status["late"]:
        problems.append(f"{by_status['late']} obtains with status late")
    return verdict("obtains verified", not problems, counts, "; ".join(problems))


def _peers(run: Run, point: int) -> int:
    peers = setting(point_params(run).get(point), "server.peers")
    return int(peers) if peers is not None else 0


def _kills(run: Run, point: int, prefix: str) -> int:
    params = point_params(run).get(point)
    return sum(
        1
        for e in (params.events if params else [])
        if e.get("action") == "kill"
        and e.get("outcome") == "applied"
        and str(e.get("node", "")).startswith(prefix)
    )


# ------------------------------------------------------------------ stream


def stream_counters(run: Run, point: int) -> Verdict:
    s = run.point_samples(point, ["client", "arg", "status", "flags"])
    done = [e for e in node_lines(run.path, "client", point) if e.get("event") == "done"]
    flags = s["flags"].to_numpy().astype(np.int64)
    ok = (s["status"].astype(str) == "ok").to_numpy()
    samples = {
        "sent": len(s),
        **_statuses(s["status"]),
        "retransmissions": int(((flags & STREAM_FLAG_RETRANSMISSION) != 0).sum()),
        "hedged": int(((flags & STREAM_FLAG_HEDGED) != 0).sum()),
        "redundant": int(((flags & STREAM_FLAG_REDUNDANT) != 0).sum()),
    }
    params = point_params(run).get(point)
    streams, stream = setting(params, "server.streams"), setting(params, "driver.stream")
    counts: dict[str, int] = {"service_kills": _kills(run, point, "service-")}
    if not done:
        return verdict("counters agree", False, counts, "the client wrote no done line")
    d = done[-1]
    frames = int(d.get("frames", 0))
    if streams is not None and stream is not None:
        width_px, height_px = streams[int(stream)]
        per_frame = (width_px // BLOCK_SIDE_PX) * (height_px // BLOCK_SIDE_PX)
        # Frames the client resolved are 0 .. frames-1 (in order); a block is in its frame
        # when one of its samples is ok and not redundant (a redundant reply fills nothing:
        # its block was filled, or its frame resolved, before it came).
        fills = ok & ((flags & STREAM_FLAG_REDUNDANT) == 0)
        got = pd.DataFrame({"frame": s["client"].to_numpy(), "block": s["arg"].to_numpy()})[fills]
        got = got[got["frame"] < frames].drop_duplicates()
        have = got.groupby("frame").size().reindex(range(frames), fill_value=0).to_numpy()
        samples["frames"] = frames
        samples["complete_frames"] = int((have == per_frame).sum())
        samples["blocks_missing"] = int((per_frame - have).sum())
    keys = {"sent": "sent", **{k: k for k in samples if k != "sent"}}
    keys["late"] = "late_replies"
    keys["timeout"] = "timeouts"
    keys["drop"] = "drops"
    keys["error"] = "errors"
    problems = []
    for key, done_key in keys.items():
        counts[f"samples_{key}"] = samples[key]
        counts[f"client_{key}"] = int(d.get(done_key, -1))
        if samples[key] != counts[f"client_{key}"]:
            problems.append(f"{key}: samples {samples[key]}, client {counts[f'client_{key}']}")
    return verdict("counters agree", not problems, counts, "; ".join(problems))


# ------------------------------------------------------------------ slices


def slices_exactly_once(run: Run, point: int) -> Verdict:
    from knee.analysis.slices import exactly_once

    v = exactly_once(run, point)
    counts = {
        k: getattr(v, k)
        for k in (
            "items",
            "replied",
            "lost",
            "repeated",
            "killed_repeats",
            "late",
            "held",
            "unfinished",
            "unknown",
            "unlogged_replies",
            "wrong",
            "bad_checksums",
        )
    }
    counts["pn_kills"] = _kills(run, point, "pn-")
    counts["kills_within_give_delay"] = _kills_after_start(run, point)
    moves = [
        e.get("reason") for e in node_lines(run.path, "lb", point) if e.get("event") == "handoff"
    ]
    counts["join_moves"] = moves.count("join")
    counts["crash_moves"] = moves.count("crash")
    return verdict("exactly once", v.passed, counts)


def _kills_after_start(run: Run, point: int) -> int:
    """PN kills applied within `server.give_delay_ms` of the PN start before them: a join's
    handoffs were then still held back, so the kill could land mid-handoff."""
    params = point_params(run).get(point)
    delay_s = float(setting(params, "server.give_delay_ms") or 0) / 1e3
    last_start, n = None, 0
    for e in params.events if params else []:
        if e.get("outcome") != "applied" or not str(e.get("node", "")).startswith("pn-"):
            continue
        if e.get("action") == "start":
            last_start = float(e["t_s"])
        elif e.get("action") == "kill" and last_start is not None:
            n += int(float(e["t_s"]) - last_start <= delay_s)
    return n


# ------------------------------------------------------------------ chat


def chat_exactly_once(p: PointRun) -> Verdict:
    return chat_check_point(p.samples, p.configs, p.events)


# ------------------------------------------------------------------ the one path


@dataclass
class PointRun:
    """What a checker reads of one point: the point's samples (as `knee.results.point_frame`
    gives them), the configs its nodes ran with, its events (`t_s`, `kind`, `node`, as in
    events.parquet) and, read when asked, the run directory (its nodes' lines, raw files
    and point records)."""

    run_dir: Path
    point: int
    samples: pd.DataFrame
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[RunEvent] = field(default_factory=list)

    @functools.cached_property
    def run(self) -> Run:
        return open_run(self.run_dir)


Checker = Callable[[PointRun], Verdict | None]


def _of_run(checker: Callable[[Run, int], Verdict]) -> Checker:
    """A checker of a run directory's point; a point without samples has nothing to check."""

    def check(p: PointRun) -> Verdict | None:
        return None if p.samples.empty else checker(p.run, p.point)

    return check


#: The checker of each system that has one.
CHECKERS: dict[str, Checker] = {
    "chat": chat_exactly_once,
    "share": _of_run(share_obtains),
    "stream": _of_run(stream_counters),
    "slices": _of_run(slices_exactly_once),
}


def check(system: str, p: PointRun) -> Verdict | None:
    """The verdict on one point of `system`; None when the system has no checker. A checker
    that fails to run is a FAIL saying why, never a lost run."""
    checker = CHECKERS.get(system)
    if checker is None:
        return None
    try:
        return checker(p)
    except Exception as e:  # a broken input is a failed check, reported as such
        return verdict("checker", False, {}, f"{type(e).__name__}: {e}")


def point_verdict(run: Run, point: int) -> Verdict | None:
    """A point's verdict as the runner kept it (summary.json); for a point that has none (a
    run stopped before the point's end), `check` on the run directory as it is. The
    directory has no scratch folder any more: chat's checker then says UNCHECKED."""
    kept = next((p.get("check") for p in run.points if p.get("point") == point), None)
    if kept is not None:
        return kept
    system = str(run.summary.get("system") or run.spec.get("experiment", {}).get("system"))
    if system not in CHECKERS:
        return None
    params = point_params(run).get(point)
    configs = {n["name"]: n["config"] for n in (params.topology if params else [])}
    ev = run.events
    events = ev[ev["point"] == point].to_dict("records") if "point" in ev else []
    return check(system, PointRun(run.path, point, run.point_samples(point), configs, events))
