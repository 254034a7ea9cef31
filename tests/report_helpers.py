"""Helpers shared by the report tests: running `knee`, reading a report's figures, reading a
run's samples and their order statistics independently of knee, and loading a report in
headless Chromium (Debian's package, installed by scripts/chromium) with name resolution
off."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]

#: Chromium with no network: names do not resolve, nothing runs in the background.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
    "--virtual-time-budget=15000",
)
CHROMIUM_TIMEOUT_S = 120.0


def knee_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "knee.cli", *args]


def run_knee(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(knee_cmd(*args), capture_output=True, text=True, timeout=timeout_s)


def run_knee_each(
    arg_lists: list[list[str]], timeout_s: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """`knee` once per argument list, all started together (a refusal is mostly Python's
    start, about 2 s each): their results, in order."""
    with ThreadPoolExecutor(max_workers=len(arg_lists)) as pool:
        return list(pool.map(lambda args: run_knee(*args, timeout_s=timeout_s), arg_lists))


def only_dir(root: Path) -> Path:
    dirs = [d for d in root.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


#: The stream system's two lossy services: one fixed 1 ms, one uniform 1-3 ms, each losing 10%.
LOSSY_SERVICES = """[
  { name = "fast", delay = "fixed", delay_ms = 1.0, loss_p = 0.1 },
  { name = "slow", delay = "uniform", min_ms = 1.0, max_ms = 3.0, loss_p = 0.1 },
]"""


def stream_spec(
    name: str, seed: int, streams: str, frames: int, timeout_ms: int, services: str = ""
) -> str:
    """A small closed-loop experiment of the stream system, client on stream 0, without its
    series (which end it: the duration, 30 s, is a bound): `services` the servers' list
    (a series may give its own instead)."""
    services = f"services = {services}\n" if services else ""
    return (
        f'\n[experiment]\nname = "{name}"\nsystem = "stream"\nseed = {seed}\n\n'
        f"[server]\nstreams = {streams}\n{services}\n"
        f"[driver]\nstream = 0\nframes = {frames}\n\n"
        f'[load]\nschedule = "closed"\ntimeout_ms = {timeout_ms}\nduration_s = 30\nwarmup_s = 0\n'
    )


def naive_matrix_spec(name: str, load: str = "", slo: str = "") -> str:
    """A matrix experiment on one naive thread, no cache, the same 50 x 50 matrix to a power
    of 2,000 to 2,500 (slow enough that tens of requests a second load it), then `load`:
    its [load] and series."""
    slo = f'slo = "{slo}"\n' if slo else ""
    return (
        f'\n[experiment]\nname = "{name}"\nsystem = "matrix"\nseed = 1\n{slo}\n'
        '[server]\nalgorithm = "naive"\nthreads = 1\ncache = 0\n\n'
        "[driver]\nn = 50\nsame_matrix = true\np_min = 2000\np_max = 2500\n" + load
    )


def poisson_rates(rates_per_s: list[int]) -> str:
    """An open loop of 2.5 s a point, Poisson arrivals (0.4 s warm-up, no timeout to speak
    of), one series sweeping the rate: a spec's [load] and [series.rate]."""
    return (
        '\n[load]\nwarmup_s = 0.4\nschedule = "poisson"\nrate_per_s = 10\nduration_s = 2.5\n'
        f'timeout_ms = 60000\n\n[series.rate]\nsweep = {{ "load.rate_per_s" = {rates_per_s} }}\n'
    )


def events_toml(*events: tuple[float, str, str]) -> str:
    """A spec's event timeline: one [[events]] table per (at_s, action, node)."""
    return "".join(
        f'\n[[events]]\nat_s = {at_s}\naction = "{action}"\nnode = "{node}"\n'
        for at_s, action, node in events
    )


def run_spec(spec_text: str, root: Path, name: str, timeout_s: float = 240) -> Path:
    """Writes the spec to root/<name>.toml and runs `knee run` on it into root/<name>,
    asserting it exits 0 (its output's tail said if not): the run directory."""
    spec = root / f"{name}.toml"
    spec.write_text(spec_text)
    res = run_knee(
        "run", str(spec), "--out", str(root / name), "--no-progress", timeout_s=timeout_s
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return only_dir(root / name)


def run_specs_at_once(root: Path, specs: dict[str, str], *args: str) -> dict[str, Path]:
    """Writes each spec to root/<name>.toml and runs `knee run` (with `args`) on them all at
    the same time, each into root/<name>, asserting each exits 0: the run directories, by
    name."""
    procs = {}
    for name, text in specs.items():
        spec = root / f"{name}.toml"
        spec.write_text(text)
        cmd = knee_cmd("run", str(spec), "--out", str(root / name), "--no-progress", *args)
        procs[name] = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
    for proc in procs.values():
        _, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr[-3000:]
    return {name: only_dir(root / name) for name in specs}


def smoke_run(experiment: str, root: Path) -> tuple[Path, str]:
    """`experiments/<experiment>.toml`'s smoke run (report included) and its output.

    scripts/test runs every experiment's smoke preset once from a plain install
    (scripts/e2e) and keeps the runs that passed in `$KNEE_E2E_RUNS`; a test checking such a
    run reads that one rather than running the same preset again. Without it (a test run on
    its own), the run is made here, under `root`. The run directory is only read."""
    kept = os.environ.get("KNEE_E2E_RUNS")
    if kept and (log := Path(kept) / f"{experiment}.log").is_file():
        return only_dir(Path(kept) / experiment), log.read_text()
    spec = REPO / "experiments" / f"{experiment}.toml"
    res = run_knee("run", str(spec), "--preset", "smoke", "--out", str(root), timeout_s=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return only_dir(root), res.stdout


def figure_ids(html: str) -> list[str]:
    return re.findall(r'<div class="chart" id="fig-[^"]+" data-figure="([^"]+)"', html)


def figure_spec(html: str, fig_id: str) -> dict:
    m = re.search(
        rf'<script type="application/json" id="data-fig-{re.escape(fig_id)}">(.*?)</script>',
        html,
        re.S,
    )
    assert m, fig_id
    return json.loads(m.group(1))


#: Nanoseconds per unit a report's time axis can be drawn in (knee.report.kit.axes).
NS_PER_UNIT = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}


def drawn_ms(spec: dict, values: list, axis: str = "y") -> list:
    """A figure's values along one axis in ms, the report's unit: a time axis is drawn in
    the unit that fits its values, named in the spec's layout.meta.units (an axis not named
    there has the values as the report computed them)."""
    unit = ((spec["layout"].get("meta") or {}).get("units") or {}).get(axis, "ms")
    per_ms = NS_PER_UNIT[unit] / 1e6
    return [None if v is None else v * per_ms for v in values]


def line(spec: dict, name: str) -> dict:
    """The drawn trace (not an interval band) called `name` of a figure's Plotly spec."""
    found = [t for t in spec["data"] if t.get("name") == name and "fill" not in t]
    assert len(found) == 1, (name, [t.get("name") for t in spec["data"]])
    return found[0]


# ------------------------------------------------------------------ independent values
# The checks below recompute figures' numbers from samples.parquet with pandas and numpy
# only (no knee.stats, knee.analysis or knee.results), so they test the report's numbers,
# not its agreement with itself.


def read_samples(run_dir: Path) -> pd.DataFrame:
    """samples.parquet as pandas reads it, with the status as plain strings."""
    df = pd.read_parquet(run_dir / "samples.parquet")
    return df.assign(status=df["status"].astype(str), warmup=df["warmup"].astype(bool))


def read_points(run_dir: Path) -> list[dict]:
    """summary.json's points (the points' labels, series and settings)."""
    return json.loads((run_dir / "summary.json").read_text())["points"]


def ok_after_warmup(samples: pd.DataFrame) -> pd.DataFrame:
    return samples[(samples["status"] == "ok") & ~samples["warmup"]]


def order_stat(values: object, per_mille: int) -> float:
    """The order statistic x_(ceil(n q)) for q = per_mille / 1000, the rank in integers
    (docs/statistics.md); inf values sort last, so a rank that lands on one returns inf."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    assert len(v), "no values"
    rank = max(1, -(-len(v) * per_mille // 1000))
    return float(v[rank - 1])


def headline_p99_ms(samples: pd.DataFrame) -> float | None:
    """The p99 over every post-warm-up request of one point, a failure counting as slower
    than any success (+inf): None when it lands on a failure, else in ms."""
    after = samples[~samples["warmup"]]
    ok = after["status"].to_numpy() == "ok"
    latency = np.where(ok, after["latency_ns"].to_numpy(dtype=np.float64), np.inf)
    p99 = order_stat(latency, 990)
    return None if np.isinf(p99) else p99 / 1e6


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: ./scripts/chromium installs it")
    proc = subprocess.Popen(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its helper processes share the group we end below
    )
    try:
        out, err = proc.communicate(timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT_S:g} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers left behind, if any
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check_in_browser(html_path: Path, tmp_path: Path) -> str:
    """Loads the page from a file:// URL, asserts no errors and every chart drawn; returns
    the dumped DOM."""
    res = chromium(["--dump-dom", html_path.resolve().as_uri()], tmp_path / "profile-dom")
    dom = res.stdout.decode(errors="replace")
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    errors = re.search(r'<pre id="knee-errors" data-count="(\d+)">(.*?)</pre>', dom, re.S)
    assert errors, "the error probe is missing"
    assert errors.group(1) == "0", f"errors in the page: {errors.group(2)}"
    assert attrs.get("data-report-done") == "1", "the page did not finish drawing"
    n_figures = len(figure_ids(html_path.read_text()))
    assert n_figures > 0
    assert attrs.get("data-figures") == str(n_figures)
    assert attrs.get("data-drawn") == str(n_figures), attrs
    charts = re.findall(r"<div[^>]*data-figure=[^>]*>", dom)
    assert len(charts) == n_figures
    assert all('data-drawn="1"' in tag for tag in charts), charts
    return dom


def check_pngs(html_path: Path) -> None:
    """A PNG per figure, and nothing else, in figures/."""
    ids = figure_ids(html_path.read_text())
    pngs = {p.stem: p for p in (html_path.parent / "figures").glob("*.png")}
    assert set(ids) == set(pngs), (sorted(ids), sorted(pngs))
    for png in pngs.values():
        with Image.open(png) as im:
            assert im.format == "PNG" and im.width >= 400 and im.height >= 200
            pixels = np.asarray(im.convert("L"), dtype=float)
        assert pixels.std() > 5, f"{png.name} is blank"
