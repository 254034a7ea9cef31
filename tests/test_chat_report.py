"""chat's own report sections on a real run: a tiny sweep (2 reply sizes x 1-2 clients, no
pause) in which every point kills the primary and restarts it, run with `knee run`, so one
report holds the five graph types, the magic-1% table and a failover verdict per point. The
page is opened in headless Chromium (helpers from test_report)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from report_helpers import (
    check_in_browser,
    check_pngs,
    events_toml,
    figure_ids,
    figure_spec,
    line,
    ok_after_warmup,
    only_dir,
    order_stat,
    read_points,
    read_samples,
    run_knee,
)

import knee
from knee.analysis import chat
from knee.report.figures import Axis, Figure, Trace
from knee.report.png import write_png

SPEC = """
[experiment]
name = "chat-report-test"
system = "chat"

[server]
replicas = 2
heartbeat_ms = 50
failure_timeout_ms = 300

[driver]
mix = "login_logout"

[load]
schedule = "closed"
clients = 1
think_ms = 0
duration_s = 2.5
requests = 100000
timeout_ms = 300
warmup_s = 0.2

[sweep]
"driver.reply_bytes" = [4, 1024]
"load.clients" = [1, 2]
""" + events_toml((1.0, "kill", "replica-0"), (1.8, "start", "replica-0"))

SWEEP_FIGURES = (
    "chat-latency-clients",
    "chat-area-max",
    "chat-area-p99",
    "chat-breakdown-clients",
    "chat-breakdown-reply",
    "chat-scatter-max",
    "chat-scatter-p99",
    "chat-latency-throughput",
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chat-report")
    spec = root / "chat.toml"
    spec.write_text(SPEC)
    res = run_knee("run", str(spec), "--out", str(root / "runs"), "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "report:" in res.stdout
    return only_dir(root / "runs")


def _section(html: str, section_id: str) -> str:
    m = re.search(rf'<section id="{re.escape(section_id)}">(.*?)</section>', html, re.S)
    assert m, f"section {section_id} is missing"
    return m.group(1)


def test_chat_sections_figures_and_pngs(run_dir: Path, tmp_path: Path) -> None:
    html_path = run_dir / "report.html"
    html = html_path.read_text()
    run = knee.open_run(run_dir)
    points = [p["point"] for p in run.points]
    assert len(points) == 4
    ids = figure_ids(html)
    for fig in (*SWEEP_FIGURES, *(f"chat-failover-p{p}" for p in points)):
        assert fig in ids, fig
    for section in ("chat-sweep", "chat-magic", *(f"chat-failover-p{p}" for p in points)):
        _section(html, section)
    check_pngs(html_path)
    check_in_browser(html_path, tmp_path)


def test_failover_verdict_matches_the_database(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text()
    run = knee.open_run(run_dir)
    for p in run.points:
        section = _section(html, f"chat-failover-p{p['point']}")
        integrity = chat.failover_integrity(run, p["point"])
        assert integrity["lost"] == 0 and integrity["applied_twice"] == 0, integrity
        assert "<b>PASS</b>" in section and "FAIL" not in section
        assert f"of {integrity['acknowledged_writes']} writes acknowledged" in section
        gap_ms = chat.failover_gap_ms(run, p["point"])
        assert gap_ms is not None and f"{gap_ms:.0f} ms" in section
        # The kill and the restart are marked on the timeline.
        spec = figure_spec(html, f"chat-failover-p{p['point']}")
        labels = [a["text"] for a in spec["layout"]["annotations"]]
        assert labels == ["kill replica-0", "start replica-0"], labels
        drawn = sum(len(t["x"]) for t in spec["data"])
        assert 0 < drawn <= len(chat.failover_timeline(run, p["point"])["samples"])


def test_sweep_figures_carry_the_analysis_data(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text()
    run = knee.open_run(run_dir)
    table = chat.latency_vs_clients(run)
    spec = figure_spec(html, "chat-latency-clients")
    assert [t["name"] for t in spec["data"]] == ["4 B reply", "1024 B reply"]
    for trace, reply in zip(spec["data"], table.columns, strict=True):
        assert trace["y"] == pytest.approx(table[reply].tolist())
    area = chat.latency_area(run)
    spec = figure_spec(html, "chat-area-max")
    means = next(t for t in spec["data"] if t["name"] == "mean")["y"]
    assert means == pytest.approx(area["mean_ms"].tolist()) and means == sorted(means)
    # Stacked breakdown: three parts for the top 1% and the rest at each client count.
    spec = figure_spec(html, "chat-breakdown-clients")
    assert spec["layout"]["barmode"] == "stack"
    assert [t["name"] for t in spec["data"]] == ["database", "server", "network + middleware"]
    assert len(spec["data"][0]["x"]) == 4
    # The magic-1% table: one row per configuration, each with its verdict.
    magic = chat.magic_one_percent(run)
    section = _section(html, "chat-magic")
    verdicts = re.findall(r'<td class="v-(?:pass|warn)">(yes|no)</td>', section)
    assert verdicts == ["yes" if h else "no" for h in magic["holds"]]
    assert f"it holds in {int(magic['holds'].sum())} of {len(magic)} configurations" in section


def test_sweep_figures_match_the_samples(run_dir: Path) -> None:
    """The per-point p99 and the magic-1% table against values computed here from
    samples.parquet with numpy and pandas alone: the p99 is the order statistic
    x_(ceil(n q)) of a point's successful post-warm-up latencies, and the top 1% is its
    floor(n/100) slowest."""
    html = (run_dir / "report.html").read_text()
    ok = ok_after_warmup(read_samples(run_dir))
    labels = {p["point"]: str(p["label"]) for p in read_points(run_dir)}
    per_point = {point: np.sort(g.to_numpy()) for point, g in ok.groupby("point")["latency_ns"]}
    assert len(per_point) == 4
    # Area plot: configurations sorted by mean, each with its p99.
    order = sorted(per_point, key=lambda point: per_point[point].mean())
    spec = figure_spec(html, "chat-area-p99")
    assert line(spec, "mean")["y"] == pytest.approx([per_point[p].mean() / 1e6 for p in order])
    expected = [order_stat(per_point[p], 990) / 1e6 for p in order]
    assert line(spec, "p99")["y"] == pytest.approx(expected)
    # The same p99s in the scatter plot against throughput.
    scatter = figure_spec(html, "chat-scatter-p99")
    drawn = sorted(y for t in scatter["data"] for y in t["y"])
    assert drawn == pytest.approx(sorted(expected))
    # The magic-1% table: n, and the maximum and mean without the top floor(n/100).
    section = _section(html, "chat-magic")
    rows = re.findall(
        r'<tr><td class="l">([^<]*)</td><td>(\d+)</td>((?:<td>[^<]*</td>){6})', section
    )
    assert len(rows) == len(per_point)
    point_of = {label: point for point, label in labels.items()}
    for label, n, cells in rows:
        v = per_point[point_of[label]]
        mean, std, top, mean_without, std_without, max_without = (
            float(c) for c in re.findall(r"<td>([^<]*)</td>", cells)
        )
        assert int(n) == len(v)
        rest = v[: len(v) - len(v) // 100]
        assert top == pytest.approx(v[-1] / 1e6, rel=5e-3)
        assert mean == pytest.approx(v.mean() / 1e6, rel=5e-3)
        assert std == pytest.approx(v.std(ddof=1) / 1e6, rel=5e-3)
        assert max_without == pytest.approx(rest[-1] / 1e6, rel=5e-3)
        assert mean_without == pytest.approx(rest.mean() / 1e6, rel=5e-3)
        assert std_without == pytest.approx(rest.std(ddof=1) / 1e6, rel=5e-3)


def test_png_of_a_figure_with_many_lines_keeps_its_plot(tmp_path: Path) -> None:
    """The 48-configuration sweep's load curve has ~100 named lines: a legend that size
    collapsed the PNG's axes to nothing, so past LEGEND_MAX the PNG has no legend."""
    xs = [1, 4, 7, 10]
    fig = Figure(
        "many",
        "many lines",
        Axis("clients"),
        Axis("ms"),
        [Trace("line", f"line {i}", xs, [i + x for x in xs], color=i) for i in range(100)],
    )
    path = tmp_path / "many.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied" is a warning
        write_png(fig, path)
    with Image.open(path) as im:
        pixels = np.asarray(im.convert("L"), dtype=float)
    # The plot area is most of the image: many rows hold some drawing.
    drawn_rows = (pixels < 200).any(axis=1).mean()
    assert drawn_rows > 0.6, drawn_rows
