"""The share system's report sections (report 002) on real runs: a tiny sweep over nodes for
both designs and over file sizes, and a distributed run whose peer-1 is killed mid-point,
each run with `knee run` (which writes report.html) and opened in headless Chromium."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from report_helpers import (
    check_in_browser,
    check_pngs,
    drawn_ms,
    events_toml,
    figure_ids,
    figure_spec,
    line,
    ok_after_warmup,
    order_stat,
    read_points,
    read_samples,
    run_specs_at_once,
)

import knee
from knee.analysis import share as share_analysis

# Nodes 1-2 for the central (SQLite) and the distributed index; 1 KiB and 1 MiB files.
SWEEP_SPEC = """
[experiment]
name = "share-report"
system = "share"

[server]
files = 4
file_bytes = 1024

[driver]
ops = 40

[load]
schedule = "closed"
duration_s = 60
timeout_ms = 10000
warmup_s = 0

[series.central]
server = { design = "central", index = "sqlite-global-lock" }
sweep = { "server.peers" = [1, 2] }

[series.distributed]
server = { design = "distributed" }
sweep = { "server.peers" = [1, 2] }

[series.sizes]
server = { design = "distributed", peers = 2 }
sweep = { "server.file_bytes" = [1024, 1048576] }
"""

# peer-1 is killed while the clients run (3 clients x 3000 ops of each phase take well over
# a second): searches for the names it owns go to its replica, obtains from it fail.
KILLED_SPEC = """
[experiment]
name = "share-killed"
system = "share"

[server]
design = "distributed"
peers = 3
files = 20
file_bytes = 1024

[driver]
ops = 3000

[load]
schedule = "closed"
duration_s = 60
timeout_ms = 5000
warmup_s = 0
""" + events_toml((0.3, "kill", "peer-1"))

NODES_FIGURES = [f"share-nodes-{op}" for op in ("register", "search", "obtain", "unregister")]


#: The runs by name: the sweep and the killed peer, made at the same time.
Runs = dict[str, Path]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    specs = {"sweep": SWEEP_SPEC, "killed": KILLED_SPEC}
    return run_specs_at_once(tmp_path_factory.mktemp("share-report"), specs)


def findings(page: str) -> dict[str, str]:
    """The share section's findings as plain text, by their bold topic."""
    section = page[page.index('<section id="share">') :]
    items = re.findall(r'<li class="finding"><b>(.*?)</b>(.*?)</li>', section, re.S)
    return {topic: html.unescape(re.sub(r"<[^>]+>", "", body)) for topic, body in items}


def test_sweep_report_has_every_share_figure_from_the_analysis(runs: Runs, tmp_path: Path) -> None:
    html_path = runs["sweep"] / "report.html"
    page = html_path.read_text()
    assert '<section id="share">' in page
    ids = figure_ids(page)
    for fig in [*NODES_FIGURES, "share-sizes-obtain", "share-sizes-throughput", "share-ops-per-s"]:
        assert fig in ids, fig
    assert "share-replicas" not in ids  # nothing fell back: a table and a sentence only
    check_pngs(html_path)

    run = knee.open_run(runs["sweep"])
    # Response time vs nodes: a line per design with the analysis' means at 1 and 2 peers.
    times = share_analysis.response_time_vs_nodes(run)
    search = figure_spec(page, "share-nodes-search")
    lines = {t["name"]: t for t in search["data"]}
    dist = times[(times["series"] == "distributed") & (times["operation"] == "search")]
    assert lines["distributed mean"]["x"] == [1, 2]
    assert drawn_ms(search, lines["distributed mean"]["y"]) == pytest.approx(list(dist["mean_ms"]))
    assert "central (sqlite-global-lock) mean" in lines
    # Obtain vs file size: only the sizes series has two sizes at one design and peer count.
    sizes = share_analysis.obtain_vs_file_size(run)
    sizes = sizes[sizes["series"] == "sizes"]
    throughput = figure_spec(page, "share-sizes-throughput")
    measured = next(t for t in throughput["data"] if t["name"] == "distributed measured")
    assert measured["x"] == [1024, 1048576]
    assert measured["y"] == pytest.approx(list(sizes["aggregate_mb_per_s"]))
    assert any(t["name"].startswith("report 002") for t in throughput["data"])

    text = findings(page)
    assert set(text) >= {"Nodes.", "File size.", "Operations per second", "Replica fallbacks."}
    assert "from 1 to 2 peers" in text["Nodes."]
    first = sizes.iloc[0]
    assert f"mean obtain time {first['mean_ms']:.3g} ms at 1 KiB" in text["File size."]
    assert "No node was stopped or killed in this run" in text["Replica fallbacks."]
    assert re.search(r" 0 of \d+ index operations", text["Replica fallbacks."])

    check_in_browser(html_path, tmp_path)


def test_nodes_figures_match_the_samples(runs: Runs) -> None:
    """Response time per node count against values computed here from samples.parquet with
    numpy and pandas alone: the p99 (figure) and p50 (table) are order statistics
    x_(ceil(n q)) of the point's successful post-warm-up operations (op codes:
    docs/share.md)."""
    page = (runs["sweep"] / "report.html").read_text()
    ok = ok_after_warmup(read_samples(runs["sweep"]))
    for design, series in (
        ("distributed", "distributed"),
        ("central (sqlite-global-lock)", "central"),
    ):
        point_at = {
            p["swept"]["server.peers"]: p["point"]
            for p in read_points(runs["sweep"])
            if p["series"] == series
        }
        for op, code in (("search", 3), ("obtain", 4)):
            latency = {
                peers: ok.loc[(ok["point"] == point) & (ok["op"] == code), "latency_ns"]
                for peers, point in point_at.items()
            }
            spec = figure_spec(page, f"share-nodes-{op}")
            p99 = line(spec, f"{design} p99")
            assert p99["x"] == [1, 2]
            assert drawn_ms(spec, p99["y"]) == pytest.approx(
                [order_stat(latency[x], 990) / 1e6 for x in [1, 2]]
            )
            # The table: peers, n, mean, p50 per design and operation.
            rows = re.findall(
                rf'<tr><td class="l">{re.escape(html.escape(design))}</td><td class="">{op}'
                r'</td><td class="">(\d+)</td><td class="">(\d+)</td><td class="">([^<]+)</td>'
                r'<td class="">([^<]+)</td>',
                page,
            )
            assert [int(r[0]) for r in rows] == [1, 2], rows
            for peers, n, mean, p50 in rows:
                v = latency[int(peers)]
                assert int(n) == len(v)
                assert float(mean) == pytest.approx(v.mean() / 1e6, rel=5e-3)
                assert float(p50) == pytest.approx(order_stat(v, 500) / 1e6, rel=5e-3)


def test_killed_owner_shows_replica_fallbacks(runs: Runs, tmp_path: Path) -> None:
    html_path = runs["killed"] / "report.html"
    page = html_path.read_text()
    ids = figure_ids(page)
    assert "share-replicas" in ids and "share-ops-per-s" in ids
    assert not any(i.startswith(("share-nodes-", "share-sizes-")) for i in ids)  # one point
    check_pngs(html_path)

    fb = share_analysis.replica_fallbacks(knee.open_run(runs["killed"]))
    index_ops = fb[fb["operation"] != "obtain"]
    replica = int(index_ops["replica"].sum())
    assert replica > 0
    obtain_drops = int(fb.loc[fb["operation"] == "obtain", "drop"].sum())
    assert obtain_drops > 0  # obtains from the killed peer have no replica

    text = findings(page)["Replica fallbacks."]
    assert "kill peer-1 at 0.3 s" in text
    assert f" {replica} of {int(index_ops['count'].sum())} index operations" in text
    bars = figure_spec(page, "share-replicas")["data"]
    assert sum(sum(t["y"]) for t in bars if t["name"].endswith("by the replica")) == replica
    assert sum(sum(t["y"]) for t in bars if t["name"] == "obtain: node down") == obtain_drops

    check_in_browser(html_path, tmp_path)
