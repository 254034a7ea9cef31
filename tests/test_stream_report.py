"""The stream system's own report sections on real runs: a tiny serial/parallel experiment
and a tiny loss sweep, each run with `knee run` (which writes report.html), then the page
checked for the sections, figures, tables and their PNGs, and loaded in headless Chromium."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from report_helpers import (
    LOSSY_SERVICES,
    check_in_browser,
    check_pngs,
    figure_ids,
    figure_spec,
    ok_after_warmup,
    order_stat,
    read_points,
    read_samples,
    run_spec,
    stream_spec,
)

import knee
from knee.analysis import stream as analysis

SERIAL_PARALLEL = """
[series.serial]
driver = { mode = "serial" }
sweep = { "driver.service" = [0, 1] }

[series.parallel]
driver = { mode = "parallel" }
"""
LOSS = """
[series.none]
driver = { mode = "serial" }
sweep = { "server.loss_p" = [0.0, 0.3] }

[series.retransmit]
driver = { mode = "serial", retransmit = 10 }
sweep = { "server.loss_p" = [0.0, 0.3] }
"""


@dataclass
class Runs:
    modes: Path
    loss: Path


def _run(root: Path, name: str, series: str) -> Path:
    return run_spec(stream_spec(name, 5, "[[64, 32]]", 6, 15, LOSSY_SERVICES) + series, root, name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("stream-report")
    return Runs(_run(root, "modes", SERIAL_PARALLEL), _run(root, "loss", LOSS))


def _findings(html: str) -> str:
    return " ".join(re.findall(r'<li class="finding">(.*?)</li>', html, re.S))


def test_serial_parallel_report_has_boxes_tables_and_buffering(runs: Runs, tmp_path: Path) -> None:
    html_path = runs.modes / "report.html"
    html = html_path.read_text()
    for section in ("stream", "stream-buffering"):
        assert f'<section id="{section}">' in html, section
    assert '<section id="stream-loss">' not in html  # no loss sweep in this run
    ids = figure_ids(html)
    assert {"stream-latency-boxes", "stream-buffering"} <= set(ids), ids
    check_pngs(html_path)
    check_in_browser(html_path, tmp_path)

    run = knee.open_run(runs.modes)
    # Boxes: serial and parallel side by side per service, with the analysis' quartiles.
    spec = figure_spec(html, "stream-latency-boxes")
    boxes = {t["name"]: t for t in spec["data"]}
    assert set(boxes) == {"serial", "parallel"}
    assert boxes["serial"]["x"] == ["fast", "slow"] and boxes["parallel"]["x"] == ["fast", "slow"]
    expected = analysis.block_latency_boxplot(run)
    serial = expected[expected["mode"] == "serial"].sort_values("service")
    assert boxes["serial"]["median"] == pytest.approx(list(serial["median_ms"]))
    assert boxes["serial"]["upperfence"] == pytest.approx(list(serial["whisker_high_ms"]))
    # Table 2: every service's drop count, serial and parallel, as the analysis counts it.
    for r in analysis.drop_rate_table(run).itertuples():
        assert f"<td>{r.dropped} / {r.requests}</td>" in html, r
    # Table 1: one row per point, with the source report's values beside it.
    table1 = analysis.frames_and_bits_table(run)
    assert "parallel - all services" in set(table1["column"])
    for r in table1.itertuples():
        assert f"<td class='l'>{r.column}</td><td>{r.frames}</td>" in html
    text = _findings(html)
    for topic in ("Latency.", "Throughput.", "Drops.", "Buffering."):
        assert topic in text, topic
    assert "Loss." not in text
    buffering = figure_spec(html, "stream-buffering")
    assert len(buffering["data"]) == len(run.points)
    assert all(t["x"] == [50, 80, 95, 99, 100] for t in buffering["data"])


def test_box_plots_match_the_samples(runs: Runs) -> None:
    """Each service's box against values computed here from samples.parquet with numpy and
    pandas alone: quartiles and median are order statistics x_(ceil(n q)) of the blocks
    received in time (status ok), whiskers the most extreme block within 1.5 IQR."""
    html = (runs.modes / "report.html").read_text()
    samples = read_samples(runs.modes)
    blocks = ok_after_warmup(samples[samples["op"] == 0])
    # The series are named after their driver mode (serial: one point per service).
    series = {p["point"]: p["series"] for p in read_points(runs.modes)}
    mode = blocks["point"].map(series)
    names = ["fast", "slow"]  # the spec's services, by index
    spec = figure_spec(html, "stream-latency-boxes")
    assert {t["name"] for t in spec["data"]} == {"serial", "parallel"}
    for trace in spec["data"]:
        part = blocks[mode == trace["name"]]
        for i, name in enumerate(trace["x"]):
            v = part.loc[part["service"] == names.index(name), "latency_ns"].to_numpy() / 1e6
            q1, median, q3 = (order_stat(v, per_mille) for per_mille in (250, 500, 750))
            assert trace["median"][i] == pytest.approx(median), (trace["name"], name)
            assert trace["q1"][i] == pytest.approx(q1) and trace["q3"][i] == pytest.approx(q3)
            fence = 1.5 * (q3 - q1)
            inside = v[(v >= q1 - fence) & (v <= q3 + fence)]
            assert trace["lowerfence"][i] == pytest.approx(inside.min())
            assert trace["upperfence"][i] == pytest.approx(inside.max())
            assert trace["mean"][i] == pytest.approx(np.mean(v))


def test_loss_report_draws_the_expected_time_per_block(runs: Runs, tmp_path: Path) -> None:
    html_path = runs.loss / "report.html"
    html = html_path.read_text()
    for section in ("stream", "stream-loss", "stream-buffering"):
        assert f'<section id="{section}">' in html, section
    ids = set(figure_ids(html))
    assert {"stream-loss-time", "stream-loss-goodput", "stream-latency-boxes"} <= ids, ids
    check_pngs(html_path)
    check_in_browser(html_path, tmp_path)

    loss = analysis.throughput_vs_loss(knee.open_run(runs.loss))
    traces = {t["name"]: t for t in figure_spec(html, "stream-loss-time")["data"]}
    for series in ("none", "retransmit"):
        rows = loss[loss["series"] == series].sort_values("loss_p")
        measured, model = traces[f"{series} measured"], traces[f"{series} L + p/(1-p)·T"]
        assert measured["x"] == [0.0, 0.3] and model["line"]["dash"] == "dash"
        assert measured["y"] == pytest.approx(list(rows["time_per_block_s"] * 1e3))
        assert model["y"] == pytest.approx(list(rows["expected_time_per_block_s"] * 1e3))
    # Without retransmission a lossy point delivers fewer blocks; with it, every block.
    none_lossy = loss[(loss["series"] == "none") & (loss["loss_p"] == 0.3)].iloc[0]
    retr_lossy = loss[(loss["series"] == "retransmit") & (loss["loss_p"] == 0.3)].iloc[0]
    assert none_lossy["delivered_fraction"] < 1.0
    assert retr_lossy["delivered_fraction"] == 1.0
    text = _findings(html)
    assert "Loss." in text and f"delivered {none_lossy['delivered_fraction']:.1%}" in text
    assert "Drops." not in text  # pooled drop rates over different p would mean nothing
