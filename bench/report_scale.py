#!/usr/bin/env python3
"""How `knee report` scales with the run: its time and peak memory on a run of 50 million
samples, against reading that run's samples.parquet once with pyarrow (`pq.read_table`).

The run is synthetic but made the way `knee run` makes one: an open-loop (Poisson) echo
sweep of 5 rates with the same duration (so the largest point holds a third of the
samples), each point's 96-byte records appended to raw/pNNN-load.samples.bin in chunks as
knee-node appends them, then samples.parquet written by the runner's own
`knee.results.write_samples` and summary.json from the runner's `knee.stats.point_stats` on
each point (`knee.results.point_frame`), with spec.toml resolved by `knee.spec`. Latency is
a sender lag, a network time with a long tail and the server's queue (M/M/1 at the point's
utilisation) plus service; a few requests time out and a few sends stall.

Both measured commands run as child processes, alternately, `--repeats` times each;
medians are compared. Peak memory is the child's own maximum resident set (see PEAK_WRAPPER).
Targets: `knee report` peak RSS <= 4 GiB, time <= 5 x the plain read. It measures, it does
not test: exit 0 when a target is missed, 1 when something broke.

    python3 bench/report_scale.py                       # 50,000,000 samples: ~5 min
    python3 bench/report_scale.py --samples 2000000     # a small run: ~30 s
    python3 bench/report_scale.py --keep runs/scale     # keep the run directory there
    python3 bench/report_scale.py --smoke               # 200,000 samples, once: seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from benchlib import BENCH_DIR, BenchError, median

sys.path.insert(0, str(BENCH_DIR.parent / "python"))  # this tree's knee, not an installed one

from knee import env, results  # noqa: E402
from knee.resources.usage import Inputs, point_resources  # noqa: E402
from knee.spec import load_spec  # noqa: E402
from knee.stats import point_stats  # noqa: E402
from knee.stats.interference import add_interference  # noqa: E402
from knee.stats.point import PointSettings  # noqa: E402
from knee.toml_writer import dump_toml  # noqa: E402

DEFAULT_SAMPLES = 50_000_000
#: Offered rates of the sweep's points (requests/s); every point lasts as long.
RATES_PER_S = (20_000, 40_000, 60_000, 80_000, 100_000)
#: Records generated and appended at a time: bounds the generator's own memory.
CHUNK = 1_000_000
#: The echo server's mean service time: capacity 1 / 6 us, so the last point runs at 60%.
SERVICE_MEAN_NS = 6_000
NETWORK_MIN_NS = 25_000
TIMEOUT_P = 1e-5  # requests that never get a reply
STALL_P = 1e-4  # sends held up by a VM stall (1 to 20 ms late)
SPIKE_P = 1e-3  # replies delayed 10 to 100 x in the network (the tail)
RUN_START_NS = 1_000_000_000_000  # the runner's monotonic origin: any value works
GAP_NS = 1_000_000_000  # between points: nodes stop and start
TARGET_RSS_BYTES = 4 * 2**30
TARGET_RATIO = 5.0
TIMEOUT_S = 3600.0

SPEC = """
[experiment]
name = "report-scale"
system = "echo"
seed = 1
description = "synthetic open-loop echo sweep (bench/report_scale.py)"

[load]
schedule = "poisson"
duration_s = {duration_s}
warmup_s = {warmup_s}
timeout_ms = 1000

[sweep]
"load.rate_per_s" = {rates}
"""


@dataclass
class Measured:
    wall_s: float
    peak_rss_bytes: int
    stdout: str


#: Runs a command and writes its peak RSS (KiB) to a file. The command is forked from this
#: small process: Linux's ru_maxrss of a child starts at its parent's RSS at the fork (it
#: survives exec), so forking from the bench, which holds the generator's arrays, would
#: inflate every figure.
PEAK_WRAPPER = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(code)"
)


def measure(cmd: list[str]) -> Measured:
    """Runs a command, returning its wall time and its own peak RSS (PEAK_WRAPPER)."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak_kib"
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", PEAK_WRAPPER, str(peak), *cmd],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
                env=_child_env(),
            )
        except subprocess.TimeoutExpired as e:
            raise BenchError(f"{' '.join(cmd[:4])} timed out after {TIMEOUT_S:.0f} s") from e
        wall_s = time.monotonic() - t0
        if proc.returncode != 0 or not peak.exists():
            tail = " | ".join(proc.stderr.strip().splitlines()[-5:])
            raise BenchError(f"{' '.join(cmd[:4])} exited {proc.returncode}: {tail}")
        return Measured(wall_s, int(peak.read_text()) * 1024, proc.stdout)


def _child_env() -> dict[str, str]:
    python = str(BENCH_DIR.parent / "python")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": python if not path else f"{python}{os.pathsep}{path}"}


# ------------------------------------------------------------------ the synthetic run


def records(
    rng: np.random.Generator, n: int, t_ns: float, rate_per_s: float, first_id: int
) -> tuple[np.ndarray, float]:
    """n records of an open-loop Poisson point from time t_ns on, and the next send time."""
    r = np.zeros(n, dtype=results.SAMPLE_DTYPE)
    intended = t_ns + np.cumsum(rng.exponential(1e9 / rate_per_s, n))
    lag = rng.exponential(3_000, n)
    stalled = rng.random(n) < STALL_P
    lag[stalled] += rng.uniform(1e6, 20e6, int(stalled.sum()))
    sent = intended + lag
    utilisation = rate_per_s * SERVICE_MEAN_NS / 1e9
    service = rng.gamma(4.0, SERVICE_MEAN_NS / 4.0, n)
    queued = rng.random(n) < utilisation  # M/M/1: waits with probability rho
    queue = np.where(queued, rng.exponential(SERVICE_MEAN_NS / (1 - utilisation), n), 0.0)
    network = NETWORK_MIN_NS + rng.gamma(2.0, 5_000, n)
    spike = rng.random(n) < SPIKE_P
    network[spike] *= rng.uniform(10, 100, int(spike.sum()))
    server = queue + service
    received = sent + network + server
    lost = rng.random(n) < TIMEOUT_P
    r["request_id"] = np.arange(first_id, first_id + n, dtype=np.uint64)
    r["intended_ns"] = intended.astype(np.uint64)
    r["sent_ns"] = sent.astype(np.uint64)
    r["received_ns"] = np.where(lost, 0, received).astype(np.uint64)
    r["server_ns"] = np.where(lost, 0, server).astype(np.uint64)
    r["queue_ns"] = np.where(lost, 0, queue).astype(np.uint64)
    r["service_ns"] = np.where(lost, 0, service).astype(np.uint64)
    r["bytes_out"] = 32  # a 16-byte body in its frame
    r["bytes_in"] = np.where(lost, 0, 32).astype(np.uint64)
    r["status"] = np.where(lost, results.STATUS_NAMES.index("timeout"), 0).astype(np.uint8)
    return r, float(intended[-1])


def generate(run_dir: Path, samples: int, seed: int) -> None:
    """Writes a run directory of `samples` samples as knee run would (see the docstring)."""
    rates = np.asarray(RATES_PER_S, dtype=np.float64)
    duration_s = samples / rates.sum()
    warmup_s = round(min(5.0, duration_s / 20), 3)
    (run_dir / "raw").mkdir(parents=True)
    spec_path = run_dir / "scale.toml"
    spec_path.write_text(
        SPEC.format(duration_s=duration_s, warmup_s=warmup_s, rates=list(RATES_PER_S))
    )
    spec = load_spec(spec_path)
    spec_path.unlink()
    (run_dir / "spec.toml").write_text(
        f"# resolved from {spec_path.name}\n" + dump_toml(spec.resolved)
    )
    results.write_json(run_dir / "env.json", _env())
    rng = np.random.default_rng(seed)
    counts = np.floor(samples * rates / rates.sum()).astype(np.int64)
    counts[-1] += samples - counts.sum()
    raws: list[results.RawFile] = []
    events: list[dict] = []
    timeseries: list[dict] = []
    start_ns = RUN_START_NS + GAP_NS
    for point, n in zip(spec.points, counts.tolist(), strict=True):
        rate = float(point.load["rate_per_s"])
        raw = results.RawFile(
            point=point.index,
            series=point.series,
            node="load",
            samples=f"raw/p{point.index:03d}-load.samples.bin",
            histogram=f"raw/p{point.index:03d}-load.histogram.csv",
            run_start_ns=RUN_START_NS,
            warmup_end_ns=start_ns + int(warmup_s * 1e9),
            warmup_requests=point.load["warmup_requests"],
        )
        raws.append(raw)
        t_ns = float(start_ns)
        with open(run_dir / raw.samples, "wb") as f:
            for first in range(0, n, CHUNK):
                chunk, t_ns = records(rng, min(CHUNK, n - first), t_ns, rate, first)
                chunk.tofile(f)
        end_ns = int(t_ns)
        events += _events(point.index, start_ns, end_ns)
        timeseries += _timeseries(rng, point.index, start_ns, end_ns, rate)
        start_ns = end_ns + GAP_NS
    results.write_manifest(run_dir, raws)
    points = []
    for point, raw in zip(spec.points, raws, strict=True):
        stats = point_stats(
            results.point_frame(run_dir, [raw]),
            PointSettings(
                schedule=point.load["schedule"],
                target_rate_per_s=point.load["rate_per_s"],
                late_ms=point.load["late_ms"],
                timeout_ms=point.load["timeout_ms"],
            ),
        )
        warmup_end_s = (raw.warmup_end_ns - RUN_START_NS) / 1e9
        stats.update(
            point=point.index,
            series=point.series,
            label=point.label,
            swept=point.swept,
            target_rate_per_s=point.load["rate_per_s"],
        )
        stats["resources"] = point_resources(
            Inputs(point.index, warmup_end_s, timeseries, stats, nodes={})
        )
        add_interference(stats, timeseries, point.index, warmup_end_s)
        points.append(stats)
    results.write_table(run_dir / results.EVENTS, events)
    results.write_table(run_dir / results.TIMESERIES, timeseries)
    results.write_samples(run_dir, raws)
    summary = {
        "experiment": spec.experiment["name"],
        "system": spec.experiment["system"],
        "preset": None,
        "status": "complete",
        "points": points,
    }
    results.write_json(run_dir / results.SUMMARY, summary)
    for raw in raws:  # samples.parquet has them; the raw files would double the disk used
        (run_dir / raw.samples).unlink()
    (run_dir / results.MANIFEST).unlink()


def _env() -> dict:
    """env.json as the runner writes it, with knee-node's fields empty (none ran)."""
    out = env.collect(shutil.which("true") or "/bin/true")
    return {**out, "knee_node_version": None, "knee_node_path": None, "knee_node_crates": None}


def _events(point: int, start_ns: int, end_ns: int) -> list[dict]:
    def at(t_ns: int, kind: str, node: str = "", detail: str = "") -> dict:
        return {
            "t_s": (t_ns - RUN_START_NS) / 1e9,
            "point": point,
            "node": node,
            "kind": kind,
            "detail": detail,
        }

    return [
        at(start_ns - GAP_NS // 2, "point_start"),
        at(start_ns - GAP_NS // 2, "node_start", "server"),
        at(start_ns - GAP_NS // 4, "node_ready", "server", "127.0.0.1:40000"),
        at(start_ns - GAP_NS // 4, "node_start", "load"),
        at(end_ns + GAP_NS // 4, "node_stop", "load", "exit code 0"),
        at(end_ns + GAP_NS // 4, "node_stop", "server", "exit code 0"),
        at(end_ns + GAP_NS // 2, "point_end"),
    ]


def _timeseries(
    rng: np.random.Generator, point: int, start_ns: int, end_ns: int, rate_per_s: float
) -> list[dict]:
    """One row a second per node and for the host, as knee.monitor samples them."""
    rows = []
    t0 = (start_ns - RUN_START_NS) / 1e9
    for i in range(1, int((end_ns - start_ns) / 1e9) + 1):
        t_s = t0 + i
        for node, role, cpu in (("server", "server", 40.0), ("load", "load", 100.0)):
            rows.append(
                {
                    "t_s": t_s,
                    "point": point,
                    "node": node,
                    "role": role,
                    "cpu_percent": min(100.0, cpu * rate_per_s / 1e5 + rng.normal(0, 2)),
                    "rss_bytes": 8 << 20,
                    "bytes_rx": int(32 * rate_per_s * i),
                    "bytes_tx": int(32 * rate_per_s * i),
                }
            )
        rows.append(
            {
                "t_s": t_s,
                "point": point,
                "node": "host",
                "role": "host",
                "interval_s": 1.0,
                "cpu_percent": 150.0,
                "foreign_cpu_percent": abs(rng.normal(1.0, 0.5)),
                "steal_percent": 0.0,
                "iowait_percent": 0.0,
                "tick_error_percent": 1.0,
            }
        )
    return rows


# ------------------------------------------------------------------ the comparison

PLAIN_READ = "import sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); print(t.num_rows)"


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="samples in the run")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each command")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="write the run directory here and keep it")
    ap.add_argument("--smoke", action="store_true", help="200,000 samples, one run of each")
    args = ap.parse_args()
    if args.smoke:  # every step, in seconds; its figures are not judged
        args.samples, args.repeats = 200_000, 1
    if args.samples < 10 * len(RATES_PER_S):
        ap.error("--samples: at least 10 per point")
    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="knee-report-scale-")
    run_dir = args.keep or Path(tmp.name) / "run"  # type: ignore[union-attr]
    if run_dir.exists():
        ap.error(f"{run_dir} exists")
    try:
        t0 = time.monotonic()
        generate(run_dir, args.samples, args.seed)
        gen_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        parquet_bytes = (run_dir / results.SAMPLES).stat().st_size
        print(
            f"generated {args.samples:,} samples in {time.monotonic() - t0:.0f} s "
            f"(generator peak RSS {_gib(gen_rss)}; samples.parquet {parquet_bytes / 2**20:.0f} MiB)"
        )
        report_cmd = [sys.executable, "-m", "knee.cli", "report", str(run_dir)]
        read_cmd = [sys.executable, "-c", PLAIN_READ, str(run_dir / results.SAMPLES)]
        report, read = [], []
        for i in range(args.repeats):
            order = [(report_cmd, report), (read_cmd, read)]
            for cmd, into in order if i % 2 == 0 else order[::-1]:  # who goes first swaps
                m = measure(cmd)
                into.append(m)
                print(
                    f"  {'report' if cmd is report_cmd else 'read  '} {m.wall_s:7.1f} s "
                    f"{_gib(m.peak_rss_bytes)}",
                    flush=True,
                )
        rows = int(read[0].stdout.split()[-1])
        if rows != args.samples:
            raise BenchError(f"samples.parquet has {rows} rows, not {args.samples}")
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if tmp is not None:
            tmp.cleanup()
    rt, pt = median([m.wall_s for m in report]), median([m.wall_s for m in read])
    rm = max(m.peak_rss_bytes for m in report)
    pm = max(m.peak_rss_bytes for m in read)
    mem_ok, time_ok = rm <= TARGET_RSS_BYTES, rt <= TARGET_RATIO * pt
    print(f"samples                       {args.samples:>14,}")
    print(f"knee report (median of {args.repeats})      {rt:>10.1f} s   peak RSS {_gib(rm)}")
    print(f"pq.read_table (median of {args.repeats})    {pt:>10.1f} s   peak RSS {_gib(pm)}")
    print(
        f"time ratio report / read      {rt / pt:>12.2f}     target <= {TARGET_RATIO:g}: "
        f"{'PASS' if time_ok else 'MISS'}"
    )
    print(
        f"memory: report peak RSS       {_gib(rm):>14}   target <= {_gib(TARGET_RSS_BYTES)}: "
        f"{'PASS' if mem_ok else 'MISS'}  (report / read {rm / pm:.2f})"
    )
    print(
        json.dumps(
            {
                "samples": args.samples,
                "report_s": rt,
                "read_s": pt,
                "time_ratio": rt / pt,
                "report_peak_rss_bytes": rm,
                "read_peak_rss_bytes": pm,
                "memory_ratio": rm / pm,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
