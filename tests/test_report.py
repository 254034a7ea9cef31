"""The HTML report and `knee compare`, on real runs: small matrix and echo experiments run
with `knee run` into a temporary directory, their reports opened in headless Chromium
(Debian's package, installed by scripts/chromium) with name resolution off."""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from report_helpers import (
    check_in_browser,
    check_pngs,
    chromium,
    drawn_ms,
    events_toml,
    figure_ids,
    figure_spec,
    headline_p99_ms,
    knee_cmd,
    line,
    ok_after_warmup,
    only_dir,
    order_stat,
    read_points,
    read_samples,
    run_knee,
)
from scipy import stats as sps

import knee
from knee.report.boxes import box_stats
from knee.report.compare import PER_RUN_LEVEL, quantile_diff
from knee.report.figures import LOGIT_TICKS, Axis, Figure, Trace, logit, plotly_spec
from knee.report.html import Section, page
from knee.report.sections.spectrum import percentile_grid, spectrum
from knee.stats import quantiles, tail
from knee.stats.intervals import order_statistic_ranks as order_ranks
from knee.stats.intervals import quantile_rank

MATRIX_SPEC = """
[experiment]
name = "matrix-report"
system = "matrix"
seed = 3

[load]
schedule = "poisson"
rate_per_s = 50
duration_s = 2.0
warmup_s = 0.4
timeout_ms = 30000

[series.difficulty]
load = { schedule = "closed", clients = 1, requests = 50, warmup_s = 0, warmup_requests = 5 }
sweep = { "driver.p" = [200, 800] }

[series.rate]
driver = { p_min = 300, p_max = 400 }
sweep = { "load.rate_per_s" = [40, 150, 300] }

[series.cache]
server = { cache = 200 }
driver = { p_min = 300, p_max = 400 }
sweep = { "load.rate_per_s" = [150] }

[series.threads]
driver = { p_min = 300, p_max = 400 }
sweep = { "server.threads" = [1, 2], "load.rate_per_s" = [300] }
"""

# Every point kills its server 1 s in: the rest of the point fails (timeouts, errors).
KILLED_SPEC = (
    """
[experiment]
name = "echo-killed"
system = "echo"

[load]
schedule = "poisson"
rate_per_s = 300
duration_s = 2.0
warmup_s = 0.2
timeout_ms = 200
"""
    + events_toml((1.0, "kill", "server"))
    + """

[sweep]
"load.rate_per_s" = [200, 300, 400, 500, 600, 700]
"""
)

# One closed-loop point (run A); run B adds a constant-rate point no model applies to.
SMALL_SPEC = """
[experiment]
name = "echo-{tag}"
system = "echo"

[server]
threads = {threads}

[load]
schedule = "closed"
clients = 2
think_ms = 0.2
requests = 400
warmup_s = 0
warmup_requests = 20

[series.closed]
{extra}
"""
STEADY = """
[series.steady]
load = { schedule = "constant", rate_per_s = 400, duration_s = 1.5, warmup_s = 0.2 }
"""


@dataclass
class Runs:
    matrix: Path
    matrix_stdout: str
    killed: Path
    killed_code: int
    small_a: Path
    small_b: Path


def _run(spec_text: str, root: Path, name: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    spec = root / f"{name}.toml"
    spec.write_text(spec_text)
    out = root / name
    res = run_knee("run", str(spec), "--out", str(out), "--no-progress")
    return only_dir(out), res


def _interrupted(spec_text: str, root: Path, after_points: int) -> tuple[Path, int]:
    """Runs a spec and interrupts it (SIGINT, by PID) once `after_points` are measured."""
    spec = root / "killed.toml"
    spec.write_text(spec_text)
    out = root / "killed"
    proc = subprocess.Popen(
        knee_cmd("run", str(spec), "--out", str(out), "--no-progress"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            summaries = list(out.glob("*/summary.json"))
            if summaries:
                try:
                    points = json.loads(summaries[0].read_text())["points"]
                except (ValueError, KeyError):
                    points = []  # being replaced right now
                if len(points) >= after_points:
                    break
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return only_dir(out), code


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("report-runs")
    matrix, res = _run(MATRIX_SPEC, root, "matrix")
    assert res.returncode == 0, res.stderr
    killed, code = _interrupted(KILLED_SPEC, root, after_points=2)
    small_a, res_a = _run(SMALL_SPEC.format(tag="a", threads=0, extra=""), root, "a")
    assert res_a.returncode == 0, res_a.stderr
    small_b, res_b = _run(SMALL_SPEC.format(tag="b", threads=2, extra=STEADY), root, "b")
    assert res_b.returncode == 0, res_b.stderr
    return Runs(matrix, res.stdout, killed, code, small_a, small_b)


# ------------------------------------------------------------------ the matrix report


def test_knee_run_writes_a_self_contained_report(runs: Runs) -> None:
    html_path = runs.matrix / "report.html"
    assert f"report:        {html_path}" in runs.matrix_stdout
    html = html_path.read_text()
    # Self-contained: plotly.js inline, and outside the scripts no tag loads anything.
    assert "plotly.js v" in html
    markup = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"<(script|link|img|iframe|object)[^>]+(src|href|data)=", markup)
    for section in (
        "what-ran",
        "summary",
        "load",
        "spectrum",
        "boxes",
        "timeseries",
        "top1",
        "factors",
        "matrix",
    ):
        assert f'<section id="{section}">' in html, section
    check_pngs(html_path)


def test_matrix_report_shows_intervals_checks_models_and_findings(runs: Runs) -> None:
    html = (runs.matrix / "report.html").read_text()
    run = knee.open_run(runs.matrix)
    # Summary table: every point, with intervals and the checks' verdicts.
    for p in run.points:
        assert f">{p['label']}</td>" in html
    assert re.search(r'<span class="ci">\[[0-9.e+-]+, [0-9.e+-]+\]</span>', html)
    verdicts = re.findall(r'<td class="v-(pass|warn|fail|na)"', html)
    assert len(verdicts) >= 4 * len(run.points)
    # The model on the rate series: M/M/1 with its knee, and M/M/c for the pool.
    rate = figure_spec(html, "load-rate")
    names = [t.get("name", "") for t in rate["data"]]
    assert any(n.startswith("M/M/1") for n in names), names
    assert any(a["text"].startswith("knee ") for a in rate["layout"]["annotations"])
    assert "M/M/c" in html or "M/M/2" in html
    # Percentile spectrum on a logit axis: percentiles mapped through logit.
    spectrum = figure_spec(html, "spectrum-rate")
    assert spectrum["layout"]["xaxis"]["tickvals"][0] == pytest.approx(logit(LOGIT_TICKS[0]))
    # The matrix findings, each stated in words from this run's data.
    findings = re.findall(r'<li class="finding">(.*?)</li>', html, re.S)
    text = " ".join(findings)
    for topic in ("Difficulty.", "Rate.", "Cache.", "Threads."):
        assert topic in text, topic
    threads = next(f for f in findings if "Threads." in f)
    cores = json.loads((runs.matrix / "env.json").read_text())["cores"]
    assert f"{cores} cores" in threads
    hit = re.search(r"cache answered ([0-9.]+)% of requests", text)
    assert hit and 0 < float(hit.group(1)) < 100
    # A heatmap over the threads series' two factors... only one rate: one row per factor.
    assert "factors-threads-mean" in figure_ids(html)


def _check_latency_per_second(html: str, run_dir: Path) -> None:
    """The time series' per-second p50 and p99: order statistics of the successful replies
    that arrived in that second (warm-up included: it is a time line of the whole run)."""
    samples = read_samples(run_dir)
    done = samples[(samples["status"] == "ok") & (samples["received_ns"] >= 0)]
    second = done["received_ns"] // 1_000_000_000
    spec = figure_spec(html, "ts-latency")
    for name, per_mille in (("p50", 500), ("p99", 990)):
        expected = done["latency_ns"].groupby(second).agg(order_stat, per_mille=per_mille)
        trace = line(spec, name)
        assert trace["x"] == pytest.approx(list(expected.index + 0.5))
        assert drawn_ms(spec, trace["y"]) == pytest.approx(list(expected / 1e6))


def test_matrix_figures_match_the_samples(runs: Runs) -> None:
    """Figures' numbers against values computed here from samples.parquet with numpy and
    pandas alone: each is the order statistic x_(ceil(n q)), never an interpolation."""
    html = (runs.matrix / "report.html").read_text()
    samples = read_samples(runs.matrix)
    points = read_points(runs.matrix)
    ok = ok_after_warmup(samples)
    # Latency vs rate (one thread): the summary's p99 over every post-warm-up request (a
    # failure counts as slower than any success: null where it lands on one) and the mean
    # of the successful ones.
    # Its x axis is the achieved arrival rate, where the models put each point.
    spec = figure_spec(html, "matrix-load")
    by_rate = {p["achieved_rate_per_s"]: p["point"] for p in points if p["series"] == "rate"}
    p99, mean = line(spec, "measured p99"), line(spec, "measured mean")
    assert p99["x"] == mean["x"] == pytest.approx(sorted(by_rate))
    by_rate = dict(zip(p99["x"], (by_rate[x] for x in sorted(by_rate)), strict=True))
    expected = [headline_p99_ms(samples[samples["point"] == by_rate[x]]) for x in p99["x"]]
    p99_ms = drawn_ms(spec, p99["y"])
    assert [y is None for y in p99_ms] == [e is None for e in expected]
    assert [y for y in p99_ms if y is not None] == pytest.approx(
        [e for e in expected if e is not None]
    )
    means = [ok.loc[ok["point"] == by_rate[x], "latency_ns"].mean() / 1e6 for x in mean["x"]]
    assert drawn_ms(spec, mean["y"]) == pytest.approx(means)
    # Boxes per point: whiskers at p1 and p99, quartiles, of the successful requests.
    spec = figure_spec(html, "boxes-points")
    point_of = {str(p["label"]): p["point"] for p in points}
    boxes = next(t for t in spec["data"] if t["name"] == "latency")
    assert len(boxes["x"]) == ok["point"].nunique()
    for i, label in enumerate(boxes["x"]):
        v = ok.loc[ok["point"] == point_of[label], "latency_ns"]
        for key, per_mille in (
            ("lowerfence", 10),
            ("q1", 250),
            ("median", 500),
            ("q3", 750),
            ("upperfence", 990),
        ):
            got = drawn_ms(spec, boxes[key])[i]
            assert got == pytest.approx(order_stat(v, per_mille) / 1e6), (label, key)
        assert drawn_ms(spec, boxes["mean"])[i] == pytest.approx(v.mean() / 1e6)
    # The percentile spectrum of the rate series: each value a measured latency.
    spec = figure_spec(html, "spectrum-rate")
    first = spec["data"][0]
    v = np.sort(ok.loc[ok["point"] == by_rate[min(by_rate)], "latency_ns"].to_numpy())
    # The logit axis back to percentiles (the grid has 8 decimals), then ceil(n q) in integers.
    q_units = np.round(1e8 / (1 + np.exp(-np.asarray(first["x"])))).astype(np.int64)
    ranks = np.maximum(1, -(-len(v) * q_units // 10**8))
    assert ranks[-1] == len(v) - 1  # the curve stops at 1 - 1/n, before the maximum
    assert drawn_ms(spec, first["y"]) == pytest.approx(list(v[ranks - 1] / 1e6))
    _check_latency_per_second(html, runs.matrix)


def test_report_opens_in_chromium_with_every_figure_drawn(runs: Runs, tmp_path: Path) -> None:
    html_path = runs.matrix / "report.html"
    check_in_browser(html_path, tmp_path)
    shot = tmp_path / "shot.png"
    res = chromium(
        [f"--screenshot={shot}", "--window-size=1400,3000", html_path.resolve().as_uri()],
        tmp_path / "profile-shot",
    )
    assert res.returncode == 0 and shot.is_file(), res.stderr.decode(errors="replace")[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1400, 3000)
        pixels = np.asarray(im.convert("L"), dtype=float)
    assert pixels.std() > 20, "the screenshot is blank"
    assert (pixels < 200).mean() > 0.02, "almost nothing is drawn"


# ------------------------------------------------------------------ other runs


def test_report_of_an_interrupted_run_with_a_killed_node(runs: Runs, tmp_path: Path) -> None:
    assert runs.killed_code == 130
    (runs.killed / "figures").mkdir(exist_ok=True)
    (runs.killed / "figures" / "left-over.png").write_bytes(b"")  # check_pngs: removed
    res = run_knee("report", str(runs.killed))
    assert res.returncode == 0, res.stderr
    html_path = runs.killed / "report.html"
    html = html_path.read_text()
    assert "This run did not complete" in html
    run = knee.open_run(runs.killed)
    assert run.summary["status"] == "interrupted" and len(run.points) >= 2
    statuses = run.points[0]["status_rates"]
    assert statuses["ok"] < 0.9  # the kill made the rest of the point fail
    assert re.search(r"(timeout|error|drop) [0-9.]+%", html)
    # The kill is marked on the time series.
    ts = figure_spec(html, "ts-throughput")
    labels = [a["text"] for a in ts["layout"]["annotations"]]
    assert "kill server" in labels, labels
    # With failures in every point, the per-second percentiles are still those of the
    # successful replies, computed here from the samples.
    _check_latency_per_second(html, runs.killed)
    check_in_browser(html_path, tmp_path)
    check_pngs(html_path)


def test_one_point_closed_loop_and_no_model_runs(runs: Runs) -> None:
    for run_dir in (runs.small_a, runs.small_b):
        html = (run_dir / "report.html").read_text()
        assert "<h1>knee report: echo-" in html
        check_pngs(run_dir / "report.html")
    run = knee.open_run(runs.small_a)
    assert len(run.points) == 1 and run.points[0]["target_rate_per_s"] is None


def test_compare_overlays_two_runs_with_intervals(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = run_knee("compare", str(runs.small_a), str(runs.small_b), "--out", str(out))
    assert res.returncode == 0, res.stderr
    html_path = out / "compare.html"
    html = html_path.read_text()
    assert "only in B: steady" in html
    row = re.search(r'<tr><td class="l">closed</td>(.*?)</tr>', html, re.S)
    assert row, "the matched point is missing"
    cells = re.findall(r'<td class="(v-pass|v-fail|)">([^<]+)</td>', row.group(1))
    assert {v for _, v in cells} <= {"B higher", "B lower", "not significant"} and cells
    check_in_browser(html_path, tmp_path)
    check_pngs(html_path)


def test_a_run_compared_with_itself_differs_by_nothing(runs: Runs) -> None:
    run = knee.open_run(runs.matrix)
    ok = run.samples[(run.samples["status"] == "ok") & ~run.samples["warmup"]]
    for _, group in ok.groupby("point"):
        v = np.sort(group["latency_ns"].to_numpy())
        for q in (0.5, 0.99):
            d = quantile_diff(v, v, q)
            assert d.value == 0
            if d.lo is not None:
                assert d.lo <= 0 <= d.hi and d.verdict == "not significant"


def test_a_failed_report_keeps_the_run(runs: Runs, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(runs.small_a, broken)
    (broken / "summary.json").write_text('{"points": [')  # cut short
    before = sorted(p.name for p in broken.iterdir())
    res = run_knee("report", str(broken))
    assert res.returncode == 2  # refused before anything is read (tests/test_report_refuses.py)
    assert f"{broken}: summary.json is not JSON" in res.stderr
    assert sorted(p.name for p in broken.iterdir()) == before
    res = run_knee("report", str(tmp_path / "no-such-run"))
    assert res.returncode == 2 and "no such directory" in res.stderr


# ------------------------------------------------------------------ small fixed data


def test_order_statistic_ranks_match_hand_computed_values() -> None:
    # n = 10, the median at 95%: x(2)..x(9), coverage 1 - 2 * 11/1024 = 97.85%.
    assert order_ranks(10, 0.5, 0.95) == (2, 9)
    # Too few samples for the 99th percentile at 95%.
    assert order_ranks(10, 0.99, 0.95) is None
    for n, q in ((25, 0.5), (200, 0.9), (1000, 0.99), (5000, 0.999)):
        lo, hi = order_ranks(n, q, PER_RUN_LEVEL)
        coverage = sps.binom.cdf(hi - 1, n, q) - sps.binom.cdf(lo - 1, n, q)
        assert coverage >= PER_RUN_LEVEL
        # The narrowest such ranks: one step in on either side loses the guarantee.
        assert sps.binom.cdf(lo, n, q) > (1 - PER_RUN_LEVEL) / 2
        assert sps.binom.cdf(hi - 2, n, q) < 1 - (1 - PER_RUN_LEVEL) / 2


def test_quantile_difference_on_fixed_data() -> None:
    a = np.arange(1, 201, dtype=float)  # 1..200
    b = a + 1000.0
    d = quantile_diff(a, b, 0.5)
    assert (d.a, d.b, d.value) == (100.0, 1100.0, 1000.0)
    lo, hi = order_ranks(200, 0.5, PER_RUN_LEVEL)
    assert (d.lo, d.hi) == (b[lo - 1] - a[hi - 1], b[hi - 1] - a[lo - 1])
    assert d.verdict == "B higher"
    assert quantile_diff(b, a, 0.5).verdict == "B lower"


def test_box_statistics_on_fixed_data() -> None:
    import pandas as pd

    df = pd.DataFrame({"g": [1] * 101 + [2] * 3, "v": [*range(0, 101), 5, 5, 5]})
    df["v"] = df["v"] * 1e6  # ns -> the boxes are in ms
    boxes = box_stats(df, ["g"], "v")
    assert boxes[1] == {"lo": 1.0, "q1": 25.0, "median": 50.0, "q3": 75.0, "hi": 99.0, "mean": 50.0}
    assert boxes[2]["median"] == boxes[2]["lo"] == boxes[2]["hi"] == 5.0


def test_one_percentile_definition_on_fixed_data() -> None:
    """knee.stats.quantiles is the summary's order statistic: the rank is intervals'
    quantile_rank on whole thousandths, the values numpy's inverted CDF; per group (one
    sort) as per array; and the slowest 1% is the floor(n/100) ranked above the p99."""
    for n in range(1, 1500):
        for per_mille in (0, 1, 10, 250, 500, 750, 900, 990, 999, 1000):
            q = per_mille / 1000
            assert quantiles.rank(n, q) == quantile_rank(n, q) == max(1, -(-n * per_mille // 1000))
    # 1..250: p99 is x_(248) = 248 (pandas' linear quantile says 248.51), the top 249 and 250.
    v = np.arange(1, 251)
    assert quantiles.order_statistic(v, 0.99) == 248.0
    assert list(v[tail.top_mask(v)]) == [249, 250] and tail.top_count(250) == 2
    rng = np.random.default_rng(7)
    df = pd.DataFrame({"g": rng.integers(0, 5, 4000), "v": rng.integers(0, 300, 4000) * 1000})
    levels = (0.01, 0.25, 0.5, 0.75, 0.99, 0.999)
    got = quantiles.order_statistics(df.groupby("g")["v"], list(levels))
    top = tail.top_mask_by(df.groupby("g")["v"])
    for g, rows in df.groupby("g").indices.items():
        values = df["v"].to_numpy()[rows]
        for q in levels:
            expected = order_stat(values, round(q * 1000))
            assert got.at[g, q] == expected == np.quantile(values, q, method="inverted_cdf")
        n, k = len(values), len(values) // 100
        assert top[rows].sum() == k  # exactly, although the values have many ties
        assert values[top[rows]].min() >= order_stat(values, 990)
        assert (top[rows] == tail.top_mask(values)).all()  # one definition, both ways
    # A spectrum is order statistics at every percentile of its grid.
    grid, ms = spectrum(np.arange(1, 1001) * 1_000_000)
    assert list(ms) == [float(np.ceil(round(1000 * q, 6))) for q in grid]


def test_percentile_grid_stops_where_the_sample_does() -> None:
    assert len(percentile_grid(0)) == 0
    grid = percentile_grid(1000)
    assert grid[0] == pytest.approx(0.01) and grid[-1] == pytest.approx(0.999)
    assert np.all(np.diff(grid) > 0)


def test_logit_axis_and_unsafe_titles() -> None:
    fig = Figure(
        "x",
        "</script><script>alert(1)</script>",
        Axis("percentile", "logit"),
        Axis("ms"),
        [Trace("line", "a", [0.5, 0.9, 0.99], [1.0, math.nan, 3.0])],
    )
    spec = plotly_spec(fig)
    assert spec["data"][0]["x"] == pytest.approx([0.0, math.log(9), math.log(99)])
    assert spec["data"][0]["y"] == [1.0, None, 3.0]  # NaN is a gap, not invalid JSON
    html = page("t", "s", [Section("s", "s", [fig])])
    assert "<script>alert(1)" not in html
