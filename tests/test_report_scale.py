"""The report read a point at a time gives the numbers of the whole frame: on a run written
by bench/report_scale.py's generator (small), on points that overlap in time, and with
samples.parquet written in chunks; and a figure of too many points shows a subset."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest
from report_helpers import (
    drawn_ms,
    figure_spec,
    line,
    ok_after_warmup,
    order_stat,
    read_points,
    read_samples,
    run_knee,
)

from knee import results
from knee.report import data, writer
from knee.report.figures import Axis, Figure, Trace
from knee.report.sections import timeseries

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import report_scale  # noqa: E402

SAMPLES = 200_000
BOX_KEYS = (("lowerfence", 10), ("q1", 250), ("median", 500), ("q3", 750), ("upperfence", 990))


@pytest.fixture(scope="module")
def scale_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("scale") / "run"
    report_scale.generate(run_dir, SAMPLES, seed=2)
    res = run_knee("report", str(run_dir))
    assert res.returncode == 0, res.stderr
    return run_dir


def _per_second(samples: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Replies per (second of arrival, status), and no-reply requests per second of their
    intended send, from the whole frame."""
    done = samples[samples["received_ns"] >= 0]
    replies = done.groupby([done["received_ns"] // 10**9, "status"]).size().unstack(fill_value=0)
    replies = replies.reindex(np.arange(replies.index.min(), replies.index.max() + 1), fill_value=0)
    lost = samples.loc[samples["received_ns"] < 0, "intended_ns"] // 10**9
    return replies, lost.value_counts().sort_index()


def test_generated_run_is_what_knee_run_writes(scale_run: Path) -> None:
    samples = read_samples(scale_run)
    points = read_points(scale_run)
    assert len(samples) == SAMPLES and len(points) == len(report_scale.RATES_PER_S)
    for p in points:  # the summary is point_stats of the same rows
        mine = samples[(samples["point"] == p["point"]) & ~samples["warmup"]]
        assert p["count"] == len(mine)
        assert p["statuses"]["timeout"] == int((mine["status"] == "timeout").sum())
    assert samples.groupby("point")["intended_ns"].is_monotonic_increasing.all()


def test_report_read_a_point_at_a_time_equals_the_whole_frame(scale_run: Path) -> None:
    html = (scale_run / "report.html").read_text()
    samples = read_samples(scale_run)
    ok = ok_after_warmup(samples)
    points = read_points(scale_run)
    # Percentile spectrum: every point's curve, each value the order statistic of its
    # successful post-warm-up latencies.
    spectrum = figure_spec(html, "spectrum-main")
    assert len(spectrum["data"]) == len(points)
    for trace, p in zip(spectrum["data"], points, strict=True):
        v = np.sort(ok.loc[ok["point"] == p["point"], "latency_ns"].to_numpy())
        q_units = np.round(1e8 / (1 + np.exp(-np.asarray(trace["x"])))).astype(np.int64)
        ranks = np.maximum(1, -(-len(v) * q_units // 10**8))
        assert drawn_ms(spectrum, trace["y"]) == pytest.approx(list(v[ranks - 1] / 1e6))
    # Boxes per point: quartiles, whiskers and mean of latency, server and network time.
    boxes = figure_spec(html, "boxes-points")
    for trace, column in zip(boxes["data"], ("latency_ns", "server_ns", "network_ns"), strict=True):
        assert trace["x"] == [p["label"] for p in points]
        for i, p in enumerate(points):
            v = ok.loc[ok["point"] == p["point"], column]
            for key, per_mille in BOX_KEYS:
                drawn = drawn_ms(boxes, [trace[key][i]])[0]
                assert drawn == pytest.approx(order_stat(v, per_mille) / 1e6)
            assert drawn_ms(boxes, [trace["mean"][i]])[0] == pytest.approx(v.mean() / 1e6)
    # Time series: per-second p50 and p99 of every successful reply (warm-up included),
    # replies per second by status, and requests without a reply.
    done = samples[(samples["status"] == "ok") & (samples["received_ns"] >= 0)]
    second = done["received_ns"] // 10**9
    latency = figure_spec(html, "ts-latency")
    for name, per_mille in (("p50", 500), ("p99", 990)):
        expected = done["latency_ns"].groupby(second).agg(order_stat, per_mille=per_mille)
        assert line(latency, name)["x"] == pytest.approx(list(expected.index + 0.5))
        assert drawn_ms(latency, line(latency, name)["y"]) == pytest.approx(list(expected / 1e6))
    replies, lost = _per_second(samples)
    through = figure_spec(html, "ts-throughput")
    for status in replies.columns:
        assert line(through, f"{status}/s")["y"] == list(replies[status].astype(float))
    no_reply = line(through, "no reply (by intended time)/s")
    assert no_reply["x"] == pytest.approx(list(lost.index + 0.5))
    assert no_reply["y"] == list(lost.astype(float))


def test_points_read_one_at_a_time_equal_the_whole_frame(scale_run: Path) -> None:
    run = results.open_run(scale_run)
    whole = results.open_run(scale_run).samples
    assert run.sample_points() == sorted(whole["point"].unique().tolist())
    where = pc.field("status") == "timeout"
    for point, part in run.iter_points(["latency_ns", "status", "warmup"], where):
        rows = whole[(whole["point"] == point) & (whole["status"] == "timeout")]
        assert list(part.columns) == ["latency_ns", "status", "warmup"]
        assert part["latency_ns"].tolist() == rows["latency_ns"].tolist()
    rr = data.load(scale_run)
    ok = rr.point_ok(2, ["latency_ns"])
    assert ok["latency_ns"].tolist() == rr.ok.loc[rr.ok["point"] == 2, "latency_ns"].tolist()


def _raw_files(run_dir: Path, spans_s: list[tuple[float, float]], warmup: int) -> list:
    """One recorder's raw file per (start, end) span, every point overlapping the next
    (the generator's records, with their times moved)."""
    rng = np.random.default_rng(4)
    (run_dir / "raw").mkdir(parents=True)
    raws = []
    for point, (start_s, end_s) in enumerate(spans_s):
        rate = 2_000.0
        records, _ = report_scale.records(
            rng, int((end_s - start_s) * rate), start_s * 1e9, rate, 0
        )
        path = f"raw/p{point:03d}-load.samples.bin"
        records.tofile(run_dir / path)
        raws.append(results.RawFile(point, "main", "load", path, "", 0, 0, warmup_requests=warmup))
    return raws


@pytest.mark.parametrize(
    ("batch_rows", "revisit_rows"), [(results.BATCH_ROWS, timeseries.REVISIT_ROWS), (300, 9000)]
)
def test_time_series_of_points_that_overlap_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int, revisit_rows: int
) -> None:
    """Seconds shared by several points or pieces of points (at their edges, and inside
    another point, read again a time range at a time) get the order statistics of all their
    replies."""
    monkeypatch.setattr(results, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(timeseries, "REVISIT_ROWS", revisit_rows)
    spans = [(1.0, 4.5), (4.2, 7.0), (2.0, 2.7), (6.5, 9.0), (0.5, 8.2)]
    raws = _raw_files(tmp_path, spans, warmup=0)
    results.write_samples(tmp_path, raws)
    figures = timeseries._sample_figures(data.load(tmp_path), [])
    latency = next(f for f in figures if f.id == "ts-latency")
    samples = read_samples(tmp_path)
    done = samples[samples["status"] == "ok"]
    second = done["received_ns"] // 10**9
    for trace, per_mille in zip(latency.traces, (500, 990), strict=True):
        expected = done["latency_ns"].groupby(second).agg(order_stat, per_mille=per_mille)
        assert trace.x == pytest.approx(list(expected.index + 0.5))
        assert trace.y == pytest.approx(list(expected / 1e6))


def test_samples_written_in_chunks_equal_the_points_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_samples converts WRITE_CHUNK records at a time: the same rows as point_frame,
    with the first warm-up requests (by intended time, ties in row order) marked."""
    monkeypatch.setattr(results, "WRITE_CHUNK", 1000)
    raws = _raw_files(tmp_path, [(0.0, 1.6), (2.0, 3.1)], warmup=700)
    extra = tmp_path / "raw/p001-load2.samples.bin"  # a second recorder in point 1
    (tmp_path / raws[1].samples).rename(extra)
    half = results.read_sample_records(extra)
    half[:1500].tofile(tmp_path / raws[1].samples)
    half[1500:].tofile(extra)
    raws.append(
        results.RawFile(1, "main", "load2", str(extra.relative_to(tmp_path)), "", 0, 0, 700)
    )
    rows = results.write_samples(tmp_path, raws)
    got = pd.read_parquet(tmp_path / results.SAMPLES)
    expected = []
    for point_raws in results.by_point(raws).values():  # point_frame's rule, by argsort
        frame = pd.concat([r.frame(tmp_path) for r in point_raws], ignore_index=True)
        first = np.argsort(frame["intended_ns"].to_numpy(), kind="stable")[:700]
        frame.loc[first, "warmup"] = True
        expected.append(frame)
    want = pd.concat(expected, ignore_index=True)
    assert rows == len(want) == len(got)
    for column in want.columns:
        assert got[column].astype(str).tolist() == want[column].astype(str).tolist(), column
    assert int(got["warmup"].sum()) == 2 * 700


def test_a_figure_of_too_many_points_shows_a_subset() -> None:
    n = 300_000
    y = np.random.default_rng(1).exponential(1.0, n)
    x = np.arange(n, dtype=float)
    few = Trace("line", "few", [0.0, 1.0], [1.0, 2.0])
    many = Trace("points", "many", x.tolist(), y.tolist(), hover=[str(i) for i in range(n)])
    fig = Figure("f", "t", Axis("x"), Axis("y"), [few, many], caption="Every request.")
    writer.bound(fig, limit=10_000)
    assert few.x == [0.0, 1.0]  # small traces are kept whole
    assert len(many.x) + 2 <= 10_000 and len(many.x) == len(many.y) == len(many.hover or [])
    assert max(many.y) == y.max()  # the tail is kept...
    assert set(np.sort(y)[-100:]) <= set(many.y)
    assert many.x[0] == 0.0 and many.x[-1] == n - 1 and many.x == sorted(many.x)  # ...in order
    assert all(y[int(i)] == v for i, v in zip(many.x, many.y, strict=True))
    assert "Every request. Drawn: " in fig.caption and f"of {n + 2:,} points" in fig.caption
