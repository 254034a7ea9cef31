"""What sets the knee (issue 30): the report names each load curve's bottleneck, draws the
utilization of every resource the run measured against the load, and tabulates U and D per
resource at each point; the headline and `knee find`'s printed answers carry the "set by"
line. Real runs of the matrix system (one thread: its server's CPU or its one worker is the
bottleneck): two open-loop rates well below and above its capacity (~55/s), and a closed
loop of 1 and 2 clients. Nothing here asserts how fast anything ran."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from report_helpers import (
    check_in_browser,
    check_pngs,
    figure_ids,
    figure_spec,
    naive_matrix_spec,
    poisson_rates,
    run_knee,
    run_spec,
)
from rich.console import Console

from knee.analysis.answers import from_points
from knee.find.cli import print_answers
from knee.report import fmt
from knee.resources.bottleneck import ranked

OPEN_SPEC = naive_matrix_spec("what-sets-open", poisson_rates([10, 120]))

CLOSED_SPEC = (
    naive_matrix_spec("what-sets-closed")
    + """
[load]
schedule = "closed"
clients = 1
think_ms = 0
requests = 60
warmup_s = 0
warmup_requests = 5
timeout_ms = 60000

[series.clients]
sweep = { "load.clients" = [1, 2] }
"""
)

#: The generator's own rows of the table (knee.report.sections.what_sets.GENERATOR_ROWS).
GENERATOR_ROW = "the generator:"


@pytest.fixture(scope="module")
def open_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_spec(OPEN_SPEC, tmp_path_factory.mktemp("what-sets"), "open")


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_spec(CLOSED_SPEC, tmp_path_factory.mktemp("what-sets"), "closed")


def _points(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "summary.json").read_text())["points"]


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)">', page)


def _section(page: str, section_id: str) -> str:
    m = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert m, section_id
    return m.group(1)


def _text(fragment: str) -> str:
    """The fragment's words; bold stays inside its sentence."""
    no_scripts = re.sub(r"<script.*?</script>", " ", re.sub(r"</?b>", "", fragment), flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", no_scripts)))


def _with_u(points: list[dict[str, Any]]) -> dict[str, str]:
    """Every resource with a U at some point: name -> label (one label each in these runs:
    the pool's size does not change)."""
    out: dict[str, str] = {}
    for p in points:
        for name, r in (p.get("resources") or {}).items():
            if r.get("u") is not None:
                out[name] = r["label"]
    return out


def _table_rows(fragment: str) -> list[tuple[str, list[str]]]:
    """The section's table: (the row's class, its cells as text), header left out."""
    m = re.search(r"(<table>.*?</table>)", fragment, re.S)
    assert m, "no table"
    rows = re.findall(r"<tr([^>]*)>(.*?)</tr>", m.group(1), re.S)[1:]
    out = []
    for attrs, row in rows:
        css = re.search(r'class="([^"]*)"', attrs)
        cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        out.append((css.group(1) if css else "", cells))
    return out


def _group(run_dir: Path) -> dict[str, Any]:
    (group,) = from_points(_points(run_dir), None)
    return group


def test_a_rate_sweep_names_its_bottleneck_and_tabulates_every_resource(
    open_run: Path, tmp_path: Path
) -> None:
    page = (open_run / "report.html").read_text()
    assert _sections(page)[:3] == ["headline", "what-sets", "what-ran"]
    points = _points(open_run)
    bn = _group(open_run)["bottleneck"]
    assert bn is not None
    top = bn["bottleneck"]
    # One thread computing M^P: the server's CPU or its one worker sets the capacity.
    assert top["resource"] in ("server", "pool:server"), top
    assert top["label"].startswith("the server's"), top
    section = _section(page, "what-sets")
    assert f"<b>{html.escape(top['label'])}</b>" in section
    assert bn["sentence"] in _text(section)

    # U of every resource against the offered rate, the bottleneck's line the wide one.
    labels = _with_u(points)
    rates = sorted(float(p["target_rate_per_s"]) for p in points)
    assert {"what-sets-u-0", "what-sets-bound-0"} <= set(figure_ids(page))
    u_fig = figure_spec(page, "what-sets-u-0")
    lines = {t["name"]: t for t in u_fig["data"]}
    one = lines.pop("U = 1")
    assert one["line"]["dash"] == "dash" and one["y"] == [1.0, 1.0]
    bold = [n for n, t in lines.items() if t["line"].get("width")]
    assert bold == [f"{labels[top['resource']]} (bottleneck)"]
    assert {n.removesuffix(" (bottleneck)") for n in lines} == set(labels.values())
    for t in lines.values():
        assert t["x"] == rates
    # The throughput with the bottleneck's bound 1/D across and the measured bracket.
    bound_fig = figure_spec(page, "what-sets-bound-0")
    names = [t.get("name", "") for t in bound_fig["data"] if "fill" not in t]
    bound = [t for t in bound_fig["data"] if t["name"].startswith(f"bound 1/D of {top['label']}")]
    assert len(bound) == 1 and bound[0]["y"][0] == pytest.approx(top["bound_per_s"])
    assert "throughput (completions/s)" in names
    if all(v is not None for v in bn["measured_per_s"]):
        assert any(n.startswith("measured capacity") for n in names), names

    # The table: one row per resource with a U, the bottleneck's in bold; then the
    # generator's own rows; a column per point, "U% · D" in each cell.
    rows = _table_rows(section)
    resources = [(css, cells) for css, cells in rows if not cells[0].startswith(GENERATOR_ROW)]
    assert sorted(cells[0] for _, cells in resources) == sorted(labels.values())
    assert [cells[0] for css, cells in resources if css == "bottleneck"] == [
        labels[top["resource"]]
    ]
    assert any(cells[0].startswith(GENERATOR_ROW) for _, cells in rows)
    by_rate = sorted(points, key=lambda p: float(p["target_rate_per_s"]))
    for _, cells in resources:
        name = next(n for n, label in labels.items() if label == cells[0])
        assert len(cells) == 2 + len(by_rate)
        for cell, p in zip(cells[2:], by_rate, strict=True):
            r = p["resources"].get(name) or {}
            # A resource without a U at this point (a pool measured busier than its
            # workers, docs/explain.md) has no cell figures.
            want = "-" if r.get("u") is None else f"{fmt.pct(r['u'])} · {fmt.duration(r['d_ns'])}"
            assert cell == want

    check_pngs(open_run / "report.html")
    dom = check_in_browser(open_run / "report.html", tmp_path)
    assert top["label"] in _text(_section(dom, "what-sets"))


def test_the_headline_and_knee_finds_answers_say_what_sets_the_capacity(
    open_run: Path,
) -> None:
    group = _group(open_run)
    bn = group["bottleneck"]
    headline = _section((open_run / "report.html").read_text(), "headline")
    lines = re.findall(r'<p class="finding">(.*?)</p>', headline, re.S)
    set_by = [line for line in lines if _text(line).startswith("Capacity " + bn["sentence"])]
    assert len(set_by) == 1, lines
    assert f"<b>{html.escape(bn['bottleneck']['label'])}</b>" in set_by[0]
    # The verdict first, then the "set by" line.
    assert _text(lines[0]).startswith("Capacity ") and lines.index(set_by[0]) == 1

    # `knee find` (and `knee http` searching) print the same sentence after the capacity.
    console = Console(record=True, width=1000)
    print_answers(console, {"groups": [group]})
    printed = console.export_text().splitlines()
    assert printed[0] == group["label"]
    label = [i for i, line in enumerate(printed) if line.startswith("  set by        ")]
    assert len(label) == 1, printed
    assert printed[label[0]] == "  set by        " + bn["sentence"].removeprefix("set by ")
    capacity = [i for i, line in enumerate(printed) if line.startswith("  capacity ")]
    knee = [i for i, line in enumerate(printed) if line.startswith("  knee ")]
    assert capacity[0] < label[0] < knee[0]


def test_a_closed_loop_run_names_the_busiest_resource_at_each_point(closed_run: Path) -> None:
    page = (closed_run / "report.html").read_text()
    assert _sections(page)[:2] == ["headline", "what-sets"]
    assert "set by" not in _text(_section(page, "headline"))  # no load curve: no answers
    section = _section(page, "what-sets")
    points = sorted(_points(closed_run), key=lambda p: p["swept"]["load.clients"])
    assert [p["swept"]["load.clients"] for p in points] == [1, 2]
    for p, where in zip(points, ("1 client", "2 clients"), strict=True):
        (name, busiest), *_ = ranked(p["resources"])
        expected = f"At {where} the busiest resource is <b>{html.escape(busiest['label'])}"
        assert expected in section, (expected, _text(section))
    labels = _with_u(points)
    fig = figure_spec(page, "what-sets-u-s0")
    lines = {t["name"]: t for t in fig["data"] if t["name"] != "U = 1"}
    assert set(lines) == set(labels.values())
    assert all(t["x"] == [1, 2] for t in lines.values())
    assert not any(t["line"].get("width") for t in lines.values())  # no curve, no bottleneck
    rows = _table_rows(section)
    resources = [cells[0] for _, cells in rows if not cells[0].startswith(GENERATOR_ROW)]
    assert sorted(resources) == sorted(labels.values())
    assert all(css != "bottleneck" for css, _ in rows)


def test_a_run_without_resources_has_no_such_section(open_run: Path, tmp_path: Path) -> None:
    """A summary written before the resources existed: the section is left out and the
    headline has no "set by" line (a copy of the real run, its points' resources removed)."""
    copy = tmp_path / open_run.name
    shutil.copytree(open_run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    for p in summary["points"]:
        p.pop("resources", None)
    summary.pop("answers", None)  # written after the resources were: not in such a summary
    (copy / "summary.json").write_text(json.dumps(summary))
    res = run_knee("report", str(copy))
    assert res.returncode == 0, res.stderr[-2000:]
    page = (copy / "report.html").read_text()
    assert "what-sets" not in _sections(page)
    assert not any(f.startswith("what-sets") for f in figure_ids(page))
    assert "set by" not in _text(_section(page, "headline"))
    check_pngs(copy / "report.html")
