"""The report opens with the answer (DESIGN.md): capacity, SLO capacity and the knee with
their intervals, first; a search's path (find.json) after it; `knee compare` states the
answers of both runs and the bracket difference. Real runs of the matrix system: a small
sweep of rates and a small search. Nothing here asserts how fast anything ran."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest
from report_helpers import (
    check_in_browser,
    figure_ids,
    naive_matrix_spec,
    only_dir,
    poisson_rates,
    run_knee,
)

from knee.report import answers, fmt

SPEC = naive_matrix_spec("matrix-answers", poisson_rates([10, 25, 300]), slo="p99<80ms")


#: What `knee find` printed, beside the search's run directory.
PRINTED = "find.out"


def _spec(tmp: Path) -> Path:
    path = tmp / "matrix-answers.toml"
    path.write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    res = run_knee("run", str(_spec(tmp)), "--out", str(tmp / "runs"), "--no-progress")
    assert res.returncode in (0, 5), res.stderr[-3000:]  # 5: the SLO missed somewhere
    return only_dir(tmp / "runs")


@pytest.fixture(scope="module")
def search_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("search")
    # A p90: the spec's p99 would hold the low probe at 10/s for 1.5 x 459 samples (69 s),
    # where a p90's bound needs 44 (knee.stats.slo). What is asserted holds for a search
    # the budget ends too.
    args = ["find", str(_spec(tmp)), "--slo", "p90<80ms", "--probe", "3s", "--budget", "45s"]
    args += ["--max-rate", "150"]
    res = run_knee(*args, "--out", str(tmp / "runs"), "--no-progress", timeout_s=300)
    assert res.returncode in (0, 5), res.stderr[-3000:]
    (tmp / PRINTED).write_text(res.stdout)
    return only_dir(tmp / "runs")


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)">', page)


def _text(fragment: str) -> str:
    no_scripts = re.sub(r"<script.*?</script>", " ", fragment, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", no_scripts)))


def _section_text(page: str, section_id: str) -> str:
    m = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert m, section_id
    return _text(m.group(1))


def _capacity_words(group: dict) -> str:
    """How the headline must state the capacity: its rate, or what the run could say."""
    lo, hi = (group["capacity"]["interval_per_s"] + [None, None])[:2]
    if lo is not None:
        return f"{fmt.num(lo)}/s"
    if hi is not None:
        return f"below {fmt.num(hi)}/s"
    return "no point decided"


def test_a_sweep_report_opens_with_its_answers(sweep_run: Path) -> None:
    page = (sweep_run / "report.html").read_text()
    sections = _sections(page)
    assert sections[0] == "headline" and "what-ran" in sections
    assert sections.index("what-ran") > sections.index("headline")
    assert "search-path" not in sections  # a sweep has no search path
    points = json.loads((sweep_run / "summary.json").read_text())["points"]
    from knee.analysis.answers import from_points

    (group,) = from_points(points, "p99<80ms")
    text = _section_text(page, "headline")
    assert "Capacity " in text and _capacity_words(group) in text
    lo, hi = group["capacity"]["interval_per_s"]
    if lo is not None and hi is not None:
        assert f"[{fmt.num(lo)}, {fmt.num(hi)}]" in text  # the capacity's interval
    assert "p99<80ms" in text  # the SLO capacity is stated
    assert "headline-latency-0" in figure_ids(page)


def test_a_sweeps_answers_are_in_its_summary_and_the_report_reads_them(
    sweep_run: Path, tmp_path: Path
) -> None:
    """`knee run` writes a sweep's answers (per group: capacity, SLO capacity, knee, the
    bottleneck) to summary.json `answers`, in a search's shape; `knee.open_run(path)
    .answers` returns them; the report states what is written there, not a recomputation."""
    import knee
    from knee.analysis.answers import from_points

    summary = json.loads((sweep_run / "summary.json").read_text())
    written = summary["answers"]
    assert written["slo"] == "p99<80ms" and len(written["groups"]) == 1
    group = written["groups"][0]
    assert {"capacity", "slo_capacity", "knee", "bottleneck", "points"} <= set(group)
    recomputed = from_points(summary["points"], "p99<80ms")
    assert written["groups"] == json.loads(json.dumps(recomputed))
    assert knee.open_run(sweep_run).answers == written
    # A copy whose summary says another capacity: the report states that one.
    copy = tmp_path / sweep_run.name
    shutil.copytree(sweep_run, copy)
    group["capacity"] |= {"rate_per_s": 11.0, "interval_per_s": [11.0, 22.0]}
    (copy / "summary.json").write_text(json.dumps(summary))
    res = run_knee("report", str(copy))
    assert res.returncode == 0, res.stderr[-3000:]
    headline = _section_text((copy / "report.html").read_text(), "headline")
    assert "Capacity 11/s [11, 22]" in headline, headline[:500]


def test_a_search_report_states_the_answer_and_every_probe(
    search_run: Path, tmp_path: Path
) -> None:
    found = json.loads((search_run / "find.json").read_text())
    summary = json.loads((search_run / "summary.json").read_text())
    assert summary["find"]["groups"], found
    page = (search_run / "report.html").read_text()
    sections = _sections(page)
    # The answer, the search's path, then what sets the capacity (the server's CPU is
    # sampled in every probe).
    assert sections[:4] == ["headline", "search-path", "what-sets", "what-ran"]
    group = summary["find"]["groups"][0]
    headline = _section_text(page, "headline")
    assert "Capacity " in headline and _capacity_words(group) in headline
    assert group["bottleneck"] is not None
    set_by = f"Capacity {group['bottleneck']['sentence']}"  # its resource's name in bold
    assert re.sub(r"\s", "", set_by) in re.sub(r"\s", "", headline)
    printed = (search_run.parents[1] / PRINTED).read_text()
    assert "\n  set by        " in printed
    if answers.generator_limited(group):
        assert "not the target's capacity" in headline
    # The table lists every probe of find.json, in order, with its rate and decision.
    m = re.search(r'<section id="search-path">.*?(<table>.*?</table>)', page, re.S)
    assert m
    rows = re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S)[1:]
    assert len(rows) == len(found["probes"])
    for row, probe in zip(rows, found["probes"], strict=True):
        cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        assert cells[1] == str(probe["point"])
        assert cells[3] == probe["phase"]
        assert cells[4] == fmt.num(probe["rate_per_s"])
        assert cells[8] == probe["decision"]["capacity"]
    assert "search-path" in figure_ids(page)

    # `knee report` reads find.json again: a copy whose path says something else shows it.
    copy = tmp_path / search_run.name
    shutil.copytree(search_run, copy)
    found["probes"][0]["decision"]["reason"] = "a reason <written> by the test"
    (copy / "find.json").write_text(json.dumps(found))
    res = run_knee("report", str(copy))
    assert res.returncode == 0, res.stderr[-2000:]
    again = (copy / "report.html").read_text()
    assert "a reason &lt;written&gt; by the test" in again  # escaped
    assert "a reason <written>" not in again

    # The page works in a browser, and its headline names the capacity.
    dom = check_in_browser(search_run / "report.html", tmp_path)
    shown = _section_text(dom, "headline")
    assert "Capacity " in shown and _capacity_words(group) in shown


def test_compare_states_the_capacity_difference(
    sweep_run: Path, search_run: Path, tmp_path: Path
) -> None:
    res = run_knee("compare", str(sweep_run), str(search_run), "--out", str(tmp_path / "cmp"))
    assert res.returncode == 0, res.stderr[-2000:]
    page = (tmp_path / "cmp" / "compare.html").read_text()
    text = _section_text(page, "answers")
    assert "bracket difference" in text
    from knee.analysis.answers import from_points

    points = json.loads((sweep_run / "summary.json").read_text())["points"]
    (a,) = from_points(points, "p99<80ms")
    b = json.loads((search_run / "summary.json").read_text())["find"]["groups"][0]
    lo_a, hi_a = a["capacity"]["interval_per_s"]
    lo_b, hi_b = b["capacity"]["interval_per_s"]
    lo_a = 0.0 if lo_a is None and hi_a is not None else lo_a
    lo_b = 0.0 if lo_b is None and hi_b is not None else lo_b
    low = "-inf" if lo_b is None or hi_a is None else f"{lo_b - hi_a:+.4g}"
    high = "+inf" if hi_b is None or lo_a is None else f"{hi_b - lo_a:+.4g}"
    assert f"[{low}, {high}]/s" in text


def test_answers_in_words() -> None:
    closed = {"interval_per_s": [94.0, 99.0], "decided": True}
    assert answers.stated(closed) == "94/s [94, 99]"
    assert answers.stated({"interval_per_s": [24.9, None]}).startswith("at least 24.9/s")
    assert answers.stated({"interval_per_s": [None, 40.0]}).startswith("below 40/s")
    undecided = {"interval_per_s": [50.0, 80.0], "decided": False}
    assert answers.stated(undecided, "budget").startswith("not decided within the budget")
    assert "[50, 80]" in answers.stated(undecided, "budget")
    assert answers.difference([94.0, 99.0], [120.0, 130.0]) == (21.0, 36.0)
    assert answers.difference([94.0, None], [120.0, 130.0]) == (None, 36.0)
    assert answers.difference([None, 40.0], [50.0, 60.0]) == (10.0, 60.0)
    group = {
        "capacity": {"interval_per_s": [96.0, 99.0], "decided": True, "limited_by": "target"},
        "slo_capacity": {"interval_per_s": [80.0, 84.0], "decided": True},
        "knee": {"rate_per_s": 55.0, "interval_per_s": [50.0, 60.0], "method": "power"},
    }
    line = answers.verdict(group, "p99<50ms")
    assert line.startswith("Capacity 96/s [96, 99], set where latency grows without bound")
    assert "p99<50ms holds up to 80/s [80, 84]" in line
    assert "latency bends at 55/s [50, 60] (Kleinrock's power" in line
