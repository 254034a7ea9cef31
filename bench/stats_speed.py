#!/usr/bin/env python3
"""How long `knee.stats.point_stats` takes on a point of one million real samples, against
a plain summary of the same point in the same process: mean, max and the four percentiles
(numpy.quantile) of its six duration columns, without intervals, checks, groups or the
top 1% (what knee computed before they existed).

The samples come from a real closed-loop echo run on 127.0.0.1 (2 clients, no think time);
`--quick` records 200,000 and repeats them, shifted in time, to a million. The two timings
alternate, 3 times each; medians are compared: the ratio point_stats / plain summary is the
result. The old goal, about a second for the point, is printed as information only (it
depends on the machine; the ratio to a baseline run alongside does less).

    python3 bench/stats_speed.py            # ~1,000,000 requests: about 30-60 s
    python3 bench/stats_speed.py --quick    # 200,000 requests, repeated 5 times
    python3 bench/stats_speed.py --smoke    # 20,000 requests to 100,000, once: seconds
"""

import json
import sys
import tempfile
import time
from pathlib import Path

import benchlib
import numpy as np
from benchlib import BENCH_DIR, BenchError, echo_closed_loop, find_knee_node, median

sys.path.insert(0, str(BENCH_DIR.parent / "python"))  # this tree's knee, not an installed one

import pandas as pd  # noqa: E402

from knee import results  # noqa: E402
from knee.stats import point_stats  # noqa: E402
from knee.stats.point import PointSettings  # noqa: E402

POINT_SAMPLES = 1_000_000
REPEATS = 3
#: Information only: the goal for a million samples when point_stats was written.
GOAL_S = 1.0
LOAD_TIMEOUT_S = 300.0


def record(requests: int, workdir: Path) -> np.ndarray:
    """Sample records of a closed-loop echo run of `requests` requests."""
    samples = echo_closed_loop(find_knee_node(), workdir, 2, requests, LOAD_TIMEOUT_S)
    return results.read_sample_records(samples)


def million(records: np.ndarray) -> pd.DataFrame:
    """The records as a point's frame, repeated back to back up to POINT_SAMPLES rows."""
    frame = results.samples_frame(
        records, point=0, series="main", node="load", run_start_ns=0, warmup_end_ns=0
    )
    span = int(frame["intended_ns"].max() - frame["intended_ns"].min()) + 1
    copies = []
    for i in range(-(-POINT_SAMPLES // len(frame))):
        copy = frame.copy()
        for col in ("intended_ns", "sent_ns", "received_ns"):
            copy[col] += i * span
        copies.append(copy)
    return pd.concat(copies, ignore_index=True).iloc[:POINT_SAMPLES]


COLUMNS = ("latency_ns", "server_ns", "network_ns", "queue_ns", "service_ns", "detail_ns")


def plain_summary(frame: pd.DataFrame) -> dict[str, list[float]]:
    """The baseline: OK post-warm-up rows, then mean, percentiles and max per column."""
    ok = frame[(frame["status"] == "ok").to_numpy() & ~frame["warmup"].to_numpy()]
    out = {}
    for col in COLUMNS:
        x = ok[col].to_numpy()
        qs = np.quantile(x, [0.5, 0.9, 0.99, 0.999], method="inverted_cdf")
        out[col] = [float(x.mean()), *map(float, qs), float(x.max())]
    return out


def main() -> int:
    args = benchlib.speed_args(
        __doc__, "20,000 requests to 100,000, once", "200,000 requests, repeated"
    )
    global POINT_SAMPLES, REPEATS
    requests = 200_000 if args.quick else POINT_SAMPLES
    if args.smoke:
        requests, POINT_SAMPLES, REPEATS = 20_000, 100_000, 1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            records = record(requests, Path(tmp))
            print(f"recorded {len(records)} requests in {time.monotonic() - t0:.1f} s")
        frame = million(records)
        stats_s, plain_s = [], []
        for _ in range(REPEATS):
            t = time.perf_counter()
            stats = point_stats(
                frame, PointSettings(schedule="closed", late_ms=1.0, timeout_ms=5000.0)
            )
            stats_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            plain_summary(frame)
            plain_s.append(time.perf_counter() - t)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    s, base = median(stats_s), median(plain_s)
    per_million_s = s * 1e6 / stats["count"]
    print(f"samples in the point       {stats['count']:>12,}")
    print(f"point_stats (median of {REPEATS})  {s * 1e3:>10.0f} ms")
    print(f"plain summary (baseline)   {base * 1e3:>10.0f} ms")
    print(f"  information: {per_million_s:.2f} s per million samples (old goal {GOAL_S:g} s)")
    print(f"ratio point_stats / plain  {s / base:>12.1f}")
    summary = {"samples": stats["count"], "point_stats_s": s, "plain_s": base, "ratio": s / base}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
