"""The slices system's numbers (report 003), from a run directory: the exactly-once checker,
throughput / RTD / CPU over time, the balancing tables (the report's Tables 2 and 3) and
the LB's overhead against the baseline.

Inputs (docs/slices.md): the client's samples (one per item: `client` = sender,
`request_id` = item id, `arg` = slice, `service` = the PN that replied, `detail_ns` = the
slice's epoch in the reply, `flags` = publications of the item); each PN's log of processed
items (`SLICES_PN_LOG_RECORD_BYTES`-byte records); the LB's `handoff` lines; the timeline
events as applied and the CPU samples. Times are seconds since the point's client started
(its first intended send). Everything is computed with arrays: no per-sample Python loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from knee.contract import SLICES_PN_LOG_KINDS, SLICES_PN_LOG_LAYOUT
from knee.contract import SLICES_PN_LOG_RECORD_BYTES as LOG_RECORD_BYTES
from knee.results import Run, by_point, node_lines, read_manifest
from knee.run_params import PointParams, point_params, setting
from knee.stats.intervals import mean_ci
from knee.stats.seconds import second_of

#: A PN's log record as knee-node describes it (`pn_log_layout`); `kind` is LOG_PROCESSED
#: or LOG_HELD.
LOG_DTYPE = np.dtype(SLICES_PN_LOG_LAYOUT)
assert LOG_DTYPE.itemsize == LOG_RECORD_BYTES, "must match the PN's log record"
#: A log record's kind: the item was processed (and its reply published) ...
LOG_PROCESSED = SLICES_PN_LOG_KINDS["processed"]
#: ... or it was still in the PN's queue when the PN stopped (`done_ns`: the stop).
LOG_HELD = SLICES_PN_LOG_KINDS["held"]

#: Seconds either side of a balancing that Table 2 calls "before" and "after".
TABLE2_WINDOW_S = 1.0
#: "During" a balancing is its own interval, widened to this around its middle when shorter:
#: a rate over a few milliseconds of replies is noise, not a throughput.
TABLE2_MIN_DURING_S = 0.5

#: Report 003's Table 2 (RTD in s, throughput in items/s), by PNs after the join.
REPORT_TABLE2 = {
    2: {"rtd_before_s": 10.610, "rtd_during_s": 11.115, "rtd_after_s": 6.940,
        "tput_before": 48, "tput_during": 40, "tput_after": 68},
    3: {"rtd_before_s": 11.159, "rtd_during_s": 11.944, "rtd_after_s": 8.856,
        "tput_before": 83, "tput_during": 72, "tput_after": 100},
    4: {"rtd_before_s": 12.335, "rtd_during_s": 12.145, "rtd_after_s": 9.838,
        "tput_before": 142, "tput_during": 143, "tput_after": 195},
    5: {"rtd_before_s": 12.856, "rtd_during_s": 12.652, "rtd_after_s": 10.227,
        "tput_before": 189, "tput_during": 180, "tput_after": 231},
}  # fmt: skip
#: Report 003's Table 3: balancing time in ms by (MB/s, slices).
REPORT_TABLE3_MS = {
    (1.4, 10): 401, (1.4, 100): 422, (1.4, 1000): 432,
    (4.0, 10): 406, (4.0, 100): 433, (4.0, 1000): 450,
    (10.0, 10): 454, (10.0, 100): 479, (10.0, 1000): 491,
}  # fmt: skip
#: Report 003's overhead of its load balancing (section 5.5.1).
REPORT_OVERHEAD = {"throughput_loss": 0.014, "rtd_increase": 0.0158}


# ------------------------------------------------------------------ inputs


def read_pn_log(path: str | Path) -> np.ndarray:
    """One PN's log records; a partial last record (the PN killed mid-write) is ignored."""
    data = np.fromfile(path, dtype=np.uint8)
    whole = len(data) - len(data) % LOG_DTYPE.itemsize
    return data[:whole].view(LOG_DTYPE)


def pn_log_paths(run_dir: Path, point: int) -> list[Path]:
    """A point's PN logs: raw/pNNN-pn-<i>.log (the PNs' outputs, kept by the runner)."""
    return sorted((run_dir / "raw").glob(f"p{point:03d}-pn-*.log"))


def log_frame(records: np.ndarray, run_start_ns: int = 0) -> pd.DataFrame:
    """Log records as a frame; done_ns since the run's start."""
    return pd.DataFrame(
        {
            "pn": records["pn"].astype(np.int64),
            "slice": records["slice"].astype(np.int64),
            "sender": records["sender"].astype(np.int64),
            "kind": records["kind"].astype(np.int64),
            "id": records["id"].astype(np.int64),
            "epoch": records["epoch"].astype(np.int64),
            "done_ns": records["done_ns"].astype(np.int64) - run_start_ns,
        }
    )


def point_log(run: Run, point: int) -> pd.DataFrame:
    """Every PN's log of a point, pooled, on the run's time axis."""
    start_ns = _run_start_ns(run, point)
    parts = [log_frame(read_pn_log(p), start_ns) for p in pn_log_paths(run.path, point)]
    return pd.concat(parts, ignore_index=True) if parts else log_frame(np.empty(0, LOG_DTYPE))


def _run_start_ns(run: Run, point: int) -> int:
    raws = by_point(read_manifest(run.path)).get(point, [])
    return raws[0].run_start_ns if raws else 0


def node_events(run: Run, point: int, node: str, kind: str) -> list[dict[str, Any]]:
    """A node's own stdout events of one kind (e.g. the LB's "handoff")."""
    return [e for e in node_lines(run.path, node, point) if e.get("event") == kind]


def killed_pns(params: PointParams | None) -> set[int]:
    """The PNs a timeline event killed (SIGKILL) in this point."""
    return {
        int(e["node"].removeprefix("pn-"))
        for e in (params.events if params else [])
        if e.get("action") == "kill"
        and e.get("outcome") == "applied"
        and str(e.get("node", "")).startswith("pn-")
    }


# ------------------------------------------------------------------ exactly once


@dataclass
class ExactlyOnce:
    """The checker's verdict on one point (docs/slices.md, "What the checker proves")."""

    items: int  # published (the client's samples, dropped ones aside)
    replied: int
    lost: int  # the client gave up, and no PN processed or held the item
    late: int  # the client gave up, and a PN processed the item after all (too late)
    held: int  # the client gave up, and the item was in a PN's queue when the run ended
    unfinished: int  # unanswered when the run ended, with publications left
    wrong: int  # answered with a grayscale that is not the image's (the sample's "error")
    bad_checksums: int  # the client's count of wrong answers, late and repeated ones too
    not_sent: int  # dropped by the client itself (max_outstanding)
    processed: int  # log records
    repeated: int  # processed more than once, beyond what a killed PN explains
    killed_repeats: int  # processed twice, the other time by a killed PN that never replied
    unknown: int  # log records of ids the client never published
    unlogged_replies: int  # replies from a PN that lived whose log lacks the item
    killed: list[int] = field(default_factory=list)
    by_pn_epoch: list[dict[str, int]] = field(default_factory=list)  # pn, epoch, items

    @property
    def passed(self) -> bool:
        return (
            self.lost == 0
            and self.repeated == 0
            and self.unknown == 0
            and self.unlogged_replies == 0
            and self.wrong == 0
            and self.bad_checksums == 0
        )


def check_exactly_once(
    samples: pd.DataFrame,
    log: pd.DataFrame,
    *,
    killed: set[int],
    retries: int,
    bad_checksums: int = 0,
) -> ExactlyOnce:
    """Judges one point. `samples`: client, request_id, status, flags (publications),
    service (the PN that replied); `log`: pn, sender, kind, id, epoch.

    An item is lost when the client gave up on it (retries + 1 publications, no reply) and
    no PN processed it or held it in its queue when the run ended. Past capacity, the
    queues grow and an item can outwait every publication: processed later it is `late`,
    still queued at the end it is `held`; neither is a loss, and both are counted.
    An item processed n > 1 times repeats unless every processing but one was by a killed
    PN that is not the one whose reply the client got: a PN killed after processing and
    before its reply left (or before its log reached the taker) can cause exactly that,
    and it is counted (`killed_repeats`), not failed.
    A wrong result fails: a sample recorded as "error" (the only error the slices client
    records is a reply whose grayscale checksum is not the image's), or any wrong reply the
    client counted (`bad_checksums`, from its `done` line: late and repeated replies too)."""
    status = samples["status"].astype(str).to_numpy()
    sent = status != "drop"
    items = samples.loc[sent, ["client", "request_id", "service", "attempts"]]
    ok = status[sent] == "ok"
    wrong = status[sent] == "error"
    gave_up = items["attempts"].to_numpy() >= retries + 1
    keys = items.rename(columns={"client": "sender", "request_id": "id"})
    published = pd.MultiIndex.from_frame(keys[["sender", "id"]])
    replier = pd.Series(
        np.where(ok | wrong, keys["service"].to_numpy(), -1), index=published, name="replier"
    )
    replier = replier[~replier.index.duplicated()]

    kind = log["kind"].to_numpy()
    held_log = log.loc[kind == LOG_HELD]
    log = log.loc[kind == LOG_PROCESSED]
    logged = pd.MultiIndex.from_frame(log[["sender", "id"]])
    known = logged.isin(published)
    rec = log.loc[known].copy()
    rec["replier"] = replier.reindex(pd.MultiIndex.from_frame(rec[["sender", "id"]])).to_numpy()
    rec["killed"] = rec["pn"].isin(list(killed))
    # A killed PN's processing is excused unless its reply is the one the client got.
    rec["counted"] = ~rec["killed"] | (rec["pn"] == rec["replier"])
    per_item = rec.groupby(["sender", "id"]).agg(total=("pn", "size"), counted=("counted", "sum"))
    repeated = int((per_item["counted"] > 1).sum())
    killed_repeats = int(((per_item["total"] > 1) & (per_item["counted"] <= 1)).sum())

    replied_by = replier[replier >= 0]
    alive_replies = replied_by[~replied_by.isin(list(killed))]
    have = pd.MultiIndex.from_frame(rec.loc[rec["pn"] == rec["replier"], ["sender", "id"]])
    unlogged = int((~alive_replies.index.isin(have)).sum())

    by_pn_epoch = (
        rec.groupby(["pn", "epoch"]).size().reset_index(name="items").astype(int)
        if len(rec)
        else pd.DataFrame(columns=["pn", "epoch", "items"])
    )
    abandoned = ~ok & ~wrong & gave_up
    was_processed = published.isin(logged)
    was_held = published.isin(pd.MultiIndex.from_frame(held_log[["sender", "id"]]))
    late = abandoned & was_processed
    held = abandoned & ~was_processed & was_held
    return ExactlyOnce(
        items=len(items),
        replied=int(ok.sum()),
        lost=int((abandoned & ~was_processed & ~was_held).sum()),
        late=int(late.sum()),
        held=int(held.sum()),
        unfinished=int((~ok & ~wrong & ~gave_up).sum()),
        wrong=int(wrong.sum()),
        bad_checksums=bad_checksums,
        not_sent=int((~sent).sum()),
        processed=len(log),
        repeated=repeated,
        killed_repeats=killed_repeats,
        unknown=int((~known).sum()),
        unlogged_replies=unlogged,
        killed=sorted(killed),
        by_pn_epoch=by_pn_epoch.to_dict("records"),
    )


def exactly_once(run: Run, point: int) -> ExactlyOnce:
    params = point_params(run).get(point)
    samples = run.point_samples(point, ["client", "request_id", "status", "attempts", "service"])
    retries = setting(params, "driver.retries")
    done = node_events(run, point, "client", "done")
    return check_exactly_once(
        samples,
        point_log(run, point),
        killed=killed_pns(params),
        retries=int(retries if retries is not None else 0),
        bad_checksums=int(done[-1].get("bad_checksums", 0)) if done else 0,
    )


# ------------------------------------------------------------------ over time


def point_zero_ns(run: Run, point: int) -> int:
    """The point's time zero on the run's axis: the client's first intended send."""
    s = run.point_samples(point, ["intended_ns"])
    return int(s["intended_ns"].min()) if len(s) else 0


def per_second(run: Run, point: int) -> pd.DataFrame:
    """Per second of the point: replies received (throughput, items/s, as the report
    counted it at the client) and their mean RTD (from each item's intended send)."""
    s = run.point_samples(point, ["status", "received_ns", "latency_ns", "intended_ns"])
    zero = int(s["intended_ns"].min()) if len(s) else 0
    ok = s[s["status"].astype(str) == "ok"]
    return _per_second(ok["received_ns"].to_numpy() - zero, ok["latency_ns"].to_numpy())


def _per_second(received_ns: np.ndarray, latency_ns: np.ndarray) -> pd.DataFrame:
    if len(received_ns) == 0:
        return pd.DataFrame(columns=["t_s", "throughput_per_s", "rtd_mean_s"])
    second = second_of(received_ns)
    second -= min(0, int(second.min()))
    n = int(second.max()) + 1
    count = np.bincount(second, minlength=n)
    total = np.bincount(second, weights=latency_ns / 1e9, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return pd.DataFrame({"t_s": np.arange(n, dtype=float), "throughput_per_s": count,
                         "rtd_mean_s": mean})  # fmt: skip


def cpu_per_pn(run: Run, point: int) -> pd.DataFrame:
    """Each PN's CPU % over the point (of its quota when it had one: 100 = all of it)."""
    ts = run.timeseries
    if ts.empty or "node" not in ts.columns:
        return pd.DataFrame(columns=["t_s", "node", "cpu_percent"])
    rows = ts[(ts["point"] == point) & ts["node"].astype(str).str.startswith("pn-")].copy()
    column = "cpu_percent"
    if "cpu_percent_of_quota" in rows.columns and rows["cpu_percent_of_quota"].notna().any():
        column = "cpu_percent_of_quota"
    rows["t_s"] = rows["t_s"] - point_zero_ns(run, point) / 1e9
    return rows.assign(cpu_percent=rows[column])[["t_s", "node", "cpu_percent"]]


class Mark(TypedDict):
    """`marks`: a join or a rate change, at its time since the point's zero."""

    t_s: float
    what: str


def marks(run: Run, point: int) -> list[Mark]:
    """The joins (a PN started by the timeline) and the rate changes (steps), each with its
    time in seconds since the point's zero."""
    params = point_params(run).get(point)
    zero_s = point_zero_ns(run, point) / 1e9
    out: list[Mark] = [
        {"t_s": float(e["t_s"]) - zero_s, "what": f"{e['node']} {e['action']}"}
        for e in (params.events if params else [])
        if e.get("outcome") == "applied"
    ]
    steps = setting(params, "load.steps") if setting(params, "load.schedule") == "steps" else None
    t = 0.0
    for (_, d), (rate, _) in zip(steps or [], (steps or [])[1:], strict=False):
        t += d
        out.append({"t_s": t, "what": f"rate {rate:g}/s"})
    return sorted(out, key=lambda m: m["t_s"])


# ------------------------------------------------------------------ handoffs


def handoffs(run: Run, point: int) -> tuple[pd.DataFrame, str]:
    """Every slice move of a point, one row each (slice, epoch, from, to, reason, t_start_s,
    t_done_s, giver_last_id, taker_first_id), and where it came from: "lb" (the LB's
    handoff lines, the balancing time as the LB measured it) or "logs" (derived from the
    PNs' logs: a slice's epoch changing between the giver's last item and the taker's
    first; the time between them bounds the slice's pause from above)."""
    zero_ns = point_zero_ns(run, point)
    lines = node_events(run, point, "lb", "handoff")
    if lines:
        df = pd.DataFrame(lines)
        start = _run_start_ns(run, point) + zero_ns
        return (
            pd.DataFrame(
                {
                    "slice": df["slice"].astype(int),
                    "epoch": df["epoch"].astype(int),
                    "from": df["from"],
                    "to": df["to"],
                    "reason": df["reason"],
                    "t_start_s": (df["t_ns_start"].astype(np.int64) - start) / 1e9,
                    "t_done_s": (df["t_ns_done"].astype(np.int64) - start) / 1e9,
                    "giver_last_id": df.get("giver_last_id"),
                    "taker_first_id": df.get("taker_first_id"),
                }
            ),
            "lb",
        )
    log = point_log(run, point)
    log = log.loc[log["kind"] == LOG_PROCESSED].copy()
    log["done_ns"] -= zero_ns
    return handoffs_from_log(log), "logs"


def handoffs_from_log(log: pd.DataFrame) -> pd.DataFrame:
    """Slice moves seen in the PNs' logs: per slice, in epoch order, the last item of each
    epoch and the first of the next (times in s on the log's axis)."""
    cols = ["slice", "epoch", "from", "to", "reason", "t_start_s", "t_done_s",
            "giver_last_id", "taker_first_id"]  # fmt: skip
    if log.empty:
        return pd.DataFrame(columns=cols)
    g = log.sort_values("done_ns").groupby(["slice", "epoch"], sort=True)
    last = g.last()[["pn", "id", "done_ns"]]
    first = g.first()[["pn", "id", "done_ns"]]
    nxt = first.groupby(level="slice").shift(-1)
    moves = last.join(nxt.add_suffix("_next")).dropna(subset=["pn_next"]).reset_index()
    moves = moves[moves["pn"] != moves["pn_next"]]
    return pd.DataFrame(
        {
            "slice": moves["slice"].astype(int),
            "epoch": moves["epoch"].astype(int) + 1,
            "from": moves["pn"].astype(int),
            "to": moves["pn_next"].astype(int),
            "reason": "",
            "t_start_s": moves["done_ns"] / 1e9,
            "t_done_s": moves["done_ns_next"] / 1e9,
            "giver_last_id": moves["id"].astype(np.int64),
            "taker_first_id": moves["id_next"].astype(np.int64),
        },
        columns=cols,
    ).reset_index(drop=True)


def balancings(moves: pd.DataFrame, joins_s: list[float]) -> pd.DataFrame:
    """The moves grouped into balancings, one per join (the moves that started after it and
    before the next): start, done, duration and slices moved."""
    rows = []
    bounds = [*joins_s, math.inf]
    for i, t in enumerate(joins_s):
        m = moves[(moves["t_start_s"] >= t - 1e-3) & (moves["t_start_s"] < bounds[i + 1])]
        if m.empty:
            continue
        start, done = float(m["t_start_s"].min()), float(m["t_done_s"].max())
        rows.append({"join": i + 1, "t_join_s": t, "t_start_s": start, "t_done_s": done,
                     "duration_ms": (done - start) * 1e3, "moved": len(m)})  # fmt: skip
    return pd.DataFrame(rows)


def table2(run: Run, point: int) -> pd.DataFrame:
    """The report's Table 2: RTD and throughput before, during and after each balancing
    (windows TABLE2_WINDOW_S wide; "during" widened to TABLE2_MIN_DURING_S), by the PNs
    present after it, with the report's values beside."""
    joins = [m["t_s"] for m in marks(run, point) if m["what"].endswith(" start")]
    moves, _ = handoffs(run, point)
    b = balancings(moves, joins)
    s = run.point_samples(point, ["status", "received_ns", "latency_ns", "intended_ns"])
    zero = int(s["intended_ns"].min()) if len(s) else 0
    ok = s[s["status"].astype(str) == "ok"]
    t = (ok["received_ns"].to_numpy() - zero) / 1e9
    rtd = ok["latency_ns"].to_numpy() / 1e9
    pns_at_start = setting(point_params(run).get(point), "server.pns_at_start") or 1
    rows = []
    for _, r in b.iterrows():
        mid = (r["t_start_s"] + r["t_done_s"]) / 2
        half = max(r["t_done_s"] - r["t_start_s"], TABLE2_MIN_DURING_S) / 2
        windows = {
            "before": (r["t_start_s"] - TABLE2_WINDOW_S, r["t_start_s"]),
            "during": (mid - half, mid + half),
            "after": (r["t_done_s"], r["t_done_s"] + TABLE2_WINDOW_S),
        }
        pns = int(pns_at_start + r["join"])
        row: dict[str, Any] = {"pns": pns, "duration_ms": r["duration_ms"]}
        for name, (lo, hi) in windows.items():
            inside = (t >= lo) & (t < hi)
            row[f"tput_{name}"] = float(inside.sum() / (hi - lo))
            row[f"rtd_{name}_s"] = float(rtd[inside].mean()) if inside.any() else math.nan
        for key, value in REPORT_TABLE2.get(pns, {}).items():
            row[f"report_{key}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


def table3(run: Run) -> pd.DataFrame:
    """The report's Table 3: balancing time by slices and data rate (MB/s), one row per
    point that balanced: the mean and the largest over its balancings, beside the
    report's value for the nearest of its rates."""
    params = point_params(run)
    rows = []
    for point in run.sample_points():
        p = params.get(point)
        joins = [m["t_s"] for m in marks(run, point) if m["what"].endswith(" start")]
        moves, source = handoffs(run, point)
        b = balancings(moves, joins)
        if b.empty:
            continue
        rate = setting(p, "load.rate_per_s")
        image_bytes = setting(p, "driver.image_bytes") or 0
        mb_per_s = rate * image_bytes / 1e6 if rate else math.nan
        slices = int(setting(p, "server.slices") or 0)
        report_rate = min((r for r, _ in REPORT_TABLE3_MS), key=lambda r: abs(r - mb_per_s))
        rows.append({"point": point, "slices": slices, "rate_per_s": rate,
                     "mb_per_s": mb_per_s, "balancings": len(b),
                     "balancing_ms": float(b["duration_ms"].mean()),
                     "balancing_max_ms": float(b["duration_ms"].max()), "source": source,
                     "report_ms": REPORT_TABLE3_MS.get((report_rate, slices))})  # fmt: skip
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ overhead


@dataclass
class Side:
    """One side of the overhead comparison: mean throughput and RTD with 95% intervals."""

    points: list[int]
    items: int
    throughput_per_s: float
    throughput_ci: list[float] | None
    rtd_mean_s: float
    rtd_ci: list[float] | None


def _side(run: Run, points: list[int]) -> Side | None:
    rates, rtds = [], []
    for point in points:
        s = run.point_samples(point, ["status", "received_ns", "latency_ns", "intended_ns"])
        ok = s[s["status"].astype(str) == "ok"].sort_values("intended_ns")
        if ok.empty:
            continue
        rtds.append(ok["latency_ns"].to_numpy() / 1e9)
        received = ok["received_ns"].to_numpy()
        sec = _per_second(received - received.min(), ok["latency_ns"].to_numpy())
        # Whole seconds between the first and the last reply: the ends are partial.
        rates.append(sec["throughput_per_s"].to_numpy()[1:-1].astype(float))
    if not rtds:
        return None
    rate, rtd = np.concatenate(rates), np.concatenate(rtds)
    return Side(points=points, items=len(rtd),
                throughput_per_s=float(rate.mean()) if len(rate) else math.nan,
                throughput_ci=mean_ci(rate), rtd_mean_s=float(rtd.mean()),
                rtd_ci=mean_ci(rtd))  # fmt: skip


class Relative(TypedDict):
    """`_relative`: a difference as a fraction, with its interval."""

    value: float
    ci: list[float] | None


class Overhead(TypedDict):
    """`overhead`: the LB's sides, its costs, and the source report's."""

    lb: Side
    baseline: Side
    throughput_loss: Relative
    rtd_increase: Relative
    report: dict[str, float]


def overhead(run: Run) -> Overhead | None:
    """The LB's overhead: the points with the LB (server.balance true) against the baseline
    (false), pooled per side. Throughput loss and RTD increase as fractions of the
    baseline's, each with an interval from the two sides' intervals (their half-widths
    added in quadrature, as for a difference of independent means)."""
    params = point_params(run)
    sides: dict[bool, list[int]] = {True: [], False: []}
    for point in run.sample_points():
        balance = setting(params.get(point), "server.balance")
        if balance is not None:
            sides[bool(balance)].append(point)
    if not sides[True] or not sides[False]:
        return None
    lb, base = _side(run, sides[True]), _side(run, sides[False])
    if lb is None or base is None:
        return None
    loss = _relative(base.throughput_per_s, lb.throughput_per_s, base.throughput_ci,
                     lb.throughput_ci)  # fmt: skip
    increase = _relative(lb.rtd_mean_s, base.rtd_mean_s, lb.rtd_ci, base.rtd_ci, base.rtd_mean_s)
    return {"lb": lb, "baseline": base, "throughput_loss": loss, "rtd_increase": increase,
            "report": REPORT_OVERHEAD}  # fmt: skip


def _relative(
    a: float,
    b: float,
    a_ci: list[float] | None,
    b_ci: list[float] | None,
    of: float | None = None,
) -> Relative:
    """(a - b) / of (of = a by default), with an interval when both sides have one."""
    of = a if of is None else of
    value = (a - b) / of if of else math.nan
    ci = None
    if a_ci and b_ci and of:
        half = math.hypot((a_ci[1] - a_ci[0]) / 2, (b_ci[1] - b_ci[0]) / 2) / abs(of)
        ci = [value - half, value + half]
    return {"value": value, "ci": ci}
