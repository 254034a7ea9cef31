"""`knee run` of the stream system end to end, and the data of its figures and tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from report_helpers import LOSSY_SERVICES, run_spec, stream_spec

import knee
from knee.analysis import stream as analysis
from knee.results import Run

SPEC = (
    stream_spec("stream-e2e", 3, "[[128, 64], [64, 32]]", 4, 20, LOSSY_SERVICES)
    + """
[series.serial]
driver = { mode = "serial" }
sweep = { "driver.service" = [0, 1] }

[series.parallel]
driver = { mode = "parallel", outstanding = 2 }

[series.loss]
driver = { mode = "serial", retransmit = 10 }
sweep = { "server.loss_p" = [0.0, 0.3] }
"""
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("stream-e2e")
    run_dir = run_spec(SPEC, root, "spec", timeout_s=300)
    return knee.open_run(run_dir)


def test_a_point_starts_only_the_services_its_client_uses(run: Run) -> None:
    starts = run.events[run.events["kind"] == "node_start"]
    nodes = starts.groupby("point")["node"].apply(lambda s: sorted(s)).to_dict()
    assert nodes[0] == ["client", "service-0"]
    assert nodes[1] == ["client", "service-1"]
    assert nodes[2] == ["client", "service-0", "service-1"]
    assert set(run.samples["status"].astype(str)) <= {"ok", "timeout", "late"}


def test_box_plot_data_counts_every_block_received_in_time(run: Run) -> None:
    box = analysis.block_latency_boxplot(run)
    ok = run.samples[run.samples["status"] == "ok"]
    assert box["n"].sum() == len(ok)
    assert set(box[box["point"] == 2]["service_name"]) == {"fast", "slow"}
    assert (box["whisker_low_ms"] <= box["q1_ms"]).all()
    assert (box["q1_ms"] <= box["median_ms"]).all() and (box["median_ms"] <= box["q3_ms"]).all()
    assert (box["q3_ms"] <= box["whisker_high_ms"]).all()
    fast = box[(box["point"] == 0)].iloc[0]
    assert 1.0 <= fast["median_ms"] < 20.0  # a 1 ms link, measured on a loaded machine
    # Quartiles are order statistics x_(ceil(n q)) (the rank in integers), here by numpy.
    blocks = ok[(ok["op"] == 0) & ~ok["warmup"]]
    for r in box.itertuples():
        v = np.sort(
            blocks.loc[
                (blocks["point"] == r.point) & (blocks["service"] == r.service), "latency_ns"
            ].to_numpy()
        )
        ranks = [max(1, -(-len(v) * per_mille // 1000)) for per_mille in (250, 500, 750)]
        expected = [v[k - 1] / 1e6 for k in ranks]
        assert [r.q1_ms, r.median_ms, r.q3_ms] == pytest.approx(expected)


def test_tables_follow_the_samples(run: Run) -> None:
    table = analysis.frames_and_bits_table(run)
    assert list(table["column"][:3]) == ["fast", "slow", "parallel - all services"]
    assert (table["frames"] == 4).all()
    assert (table["wire_bits_per_s"] > table["goodput_bits_per_s"]).all()
    drops = analysis.drop_rate_table(run)
    assert drops["requests"].sum() == len(run.samples)
    assert (drops["ci_low_pct"] <= drops["drop_rate_pct"]).all()
    assert (drops["drop_rate_pct"] <= drops["ci_high_pct"]).all()
    buffer = analysis.time_to_buffer(run)
    levels = buffer[["t_50pct_s", "t_80pct_s", "t_95pct_s", "t_99pct_s", "t_100pct_s"]]
    assert (np.diff(levels.to_numpy(), axis=1) >= 0).all()
    assert (buffer["frames"] == 4).all()


def test_loss_figure_data_and_its_expected_time(run: Run) -> None:
    loss = analysis.throughput_vs_loss(run)
    lossy = loss[loss["series"] == "loss"].set_index("loss_p")
    # Retransmitting until every block arrives: all delivered, at a price in time.
    assert (lossy["delivered_fraction"] == 1.0).all()
    assert lossy.at[0.3, "retransmissions"] > 0 and lossy.at[0.0, "retransmissions"] == 0
    assert lossy.at[0.3, "time_per_block_s"] > lossy.at[0.0, "time_per_block_s"]
    # L + p/(1-p) T with p = 0 is L; with p = 0.3 it adds 0.43 T.
    expected = lossy["expected_time_per_block_s"]
    assert expected[0.0] == pytest.approx(lossy.at[0.0, "latency_s"])
    assert expected[0.3] == pytest.approx(lossy.at[0.3, "latency_s"] + 0.3 / 0.7 * 0.020)


def test_summary_reports_late_as_a_status(run: Run) -> None:
    for point in run.points:
        assert set(point["statuses"]) == {"ok", "timeout", "drop", "error", "late"}


def test_stream_experiments_parse_with_their_presets() -> None:
    from knee.spec import load_spec

    root = Path(__file__).resolve().parents[1] / "experiments"
    for name in ("stream.toml", "stream-loss.toml"):
        for preset in ("quick", "full"):
            spec = load_spec(root / name, preset)
            assert spec.points and spec.experiment["system"] == "stream"
