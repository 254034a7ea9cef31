"""The report kit on fixed data: the axis decisions (the unit a time axis is drawn in,
whole-number ticks on count axes) as Plotly gets them and as matplotlib draws the PNG, and
the tables, notes and findings every report builds its page from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.ticker import MaxNLocator
from PIL import Image

from knee.report.figures import Axis, Figure, Marker, Trace, plotly_spec
from knee.report.kit import (
    Cell,
    Col,
    Finding,
    Html,
    Row,
    findings,
    integer_step,
    lines,
    note,
    table,
    time_unit,
    verdict,
)
from knee.report.png import render, write_png


def _figure(x: Axis, y: Axis, traces: list[Trace], **kw: object) -> Figure:
    return Figure("kit", "kit test", x, y, traces, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ time axes


@pytest.mark.parametrize(
    ("values_ms", "unit"),
    [
        ([0.6, 0.55, 0.7], "µs"),  # the largest reads 700 µs
        ([0.0004, 0.0006], "ns"),  # 600 ns
        ([0.05, 2.5], "ms"),
        ([999.0], "ms"),
        ([1000.0], "s"),
        ([4e6], "s"),  # no unit beyond s
        ([1e-8], "ns"),  # below 1 ns stays ns
        ([0.2, None, float("nan"), -5.0, 0.0], "µs"),  # gaps, NaN, <= 0 do not count
        ([], "ms"),  # nothing to go by: the unit given
        ([None, float("nan")], "ms"),
    ],
)
def test_time_unit_fits_the_largest_value(values_ms: list, unit: str) -> None:
    assert time_unit(values_ms) == unit


def test_time_unit_from_other_given_units() -> None:
    assert time_unit([1500.0], given="ns") == "µs"
    assert time_unit([0.002], given="s") == "ms"
    assert time_unit([30.0], given="s") == "s"
    assert time_unit([], given="s") == "s"


def test_a_log_time_axis_of_sub_millisecond_values_reads_microseconds() -> None:
    """Share's search figure: values near 0.6 ms on a log axis. Every value drawn on the
    axis is scaled (line, error bars, band, boxes), the title names the unit, the spec says
    which unit it drew in; hidden traces are scaled too, but do not choose the unit."""
    box = {"lo": 0.5, "q1": 0.55, "median": 0.6, "q3": 0.65, "hi": 0.7, "mean": 0.61}
    fig = _figure(
        Axis("nodes"),
        Axis("search response time", "log", kind="time"),
        [
            Trace("line", "mean", [1, 2], [0.6, 0.65], lo=[0.5, None], hi=[0.7, 0.8]),
            Trace("band", "band", [1, 2], lo=[0.55, 0.6], hi=[0.66, 0.7], legend=False),
            Trace("box", "boxes", ["a"], boxes=[{**box, "outliers": [0.9]}]),
            Trace("line", "model", [1, 2], [40.0, 80.0], hidden=True),
        ],
    )
    spec = plotly_spec(fig)
    y = spec["layout"]["yaxis"]
    assert y["title"]["text"] == "search response time (µs)" and y["type"] == "log"
    assert spec["layout"]["meta"] == {"units": {"y": "µs"}}
    line, band, boxes, model = spec["data"]
    assert line["y"] == pytest.approx([600.0, 650.0])
    assert line["error_y"]["array"] == pytest.approx([100.0, 150.0])
    assert line["error_y"]["arrayminus"] == pytest.approx([100.0, None])
    assert band["y"] == pytest.approx([660.0, 700.0, 600.0, 550.0])
    assert boxes["median"] == pytest.approx([600.0]) and boxes["y"] == [pytest.approx([900.0])]
    assert model["y"] == pytest.approx([40000.0, 80000.0])  # hidden: did not pick ms
    assert line["x"] == [1, 2]  # the other axis is untouched
    assert fig.y.title == "search response time"  # the figure itself is not changed


def test_a_time_x_axis_scales_its_markers_and_an_undeclared_axis_keeps_its_values() -> None:
    fig = _figure(
        Axis("elapsed", kind="time", time_unit="s"),
        Axis("latency (ms)"),
        [Trace("points", "p", [0.01, 0.2], [0.6, 0.7])],
        markers=[Marker(0.1, "kill")],
    )
    spec = plotly_spec(fig)
    assert spec["layout"]["xaxis"]["title"]["text"] == "elapsed (ms)"
    assert spec["data"][0]["x"] == pytest.approx([10.0, 200.0])
    assert spec["layout"]["shapes"][0]["x0"] == pytest.approx(100.0)
    assert spec["data"][0]["y"] == [0.6, 0.7]  # a value axis: as given, whatever it holds
    assert spec["layout"]["meta"] == {"units": {"x": "ms"}}
    assert "meta" not in plotly_spec(_figure(Axis("x"), Axis("y"), fig.traces))["layout"]


def test_the_png_draws_the_same_unit_with_plain_log_labels() -> None:
    """matplotlib writes "6×10²" between decades: the PNG's log axis gets "600"."""
    fig = _figure(
        Axis("nodes"),
        Axis("search response time", "log", kind="time"),
        [Trace("line", "mean", [1, 2, 3], [0.55, 0.6, 0.68])],
    )
    mfig = render(fig)
    mfig.canvas.draw()
    ax = mfig.axes[0]
    assert ax.get_ylabel() == "search response time (µs)"
    assert ax.lines[0].get_ydata() == pytest.approx([550.0, 600.0, 680.0])
    labels = [t.get_text() for t in ax.yaxis.get_ticklabels(minor=True)]
    labels += [t.get_text() for t in ax.yaxis.get_ticklabels()]
    shown = [s for s in labels if s]
    assert "$\\mathdefault{600}$" in shown, shown
    assert not any("times" in s or "^" in s for s in shown), shown


# ------------------------------------------------------------------ count axes


@pytest.mark.parametrize(
    ("values", "step"),
    [([1, 2], 1), ([5], 1), ([], 1), ([1, 64], 10), ([0, 1000], 200), ([2, 30], 5)],
)
def test_integer_step_is_whole_and_round(values: list, step: int) -> None:
    assert integer_step(values) == step


def test_count_axes_get_whole_ticks_in_the_plotly_spec() -> None:
    ints = [Trace("line", "a", [1, 2], [3.5, 4.5])]
    floats = [Trace("line", "a", [1.0, 2.0], [3.5, 4.5])]
    # Detected: every x given as an int (numpy ints too).
    x = plotly_spec(_figure(Axis("nodes"), Axis("ms"), ints))["layout"]["xaxis"]
    assert (x["tick0"], x["dtick"]) == (0, 1)
    numpy_ints = [Trace("points", "a", list(np.array([1, 4, 9])), [1.0, 2.0, 3.0])]
    x = plotly_spec(_figure(Axis("clients"), Axis("ms"), numpy_ints))["layout"]["xaxis"]
    assert x["dtick"] == 1
    # Declared: whole ticks whatever the values (model curves between the counts).
    x = plotly_spec(_figure(Axis("nodes", kind="count"), Axis("ms"), floats))["layout"]["xaxis"]
    assert x["dtick"] == 1
    # Not a count: floats, a category or log axis, a time axis.
    for axis in (Axis("rate"), Axis("n", "category"), Axis("n", "log"), Axis("t", kind="time")):
        spec = plotly_spec(_figure(axis, Axis("ms"), floats if axis.title == "rate" else ints))
        assert "dtick" not in spec["layout"]["xaxis"], axis
    # y: bars of counts.
    bars = [Trace("bar", "ops", ["a", "b"], [3, 7])]
    y = plotly_spec(_figure(Axis("op", "category"), Axis("operations"), bars))["layout"]["yaxis"]
    assert y["dtick"] == 1


def _x_ticks(fig: Figure) -> tuple[object, np.ndarray]:
    """The PNG's x locator and the major ticks it puts inside the plot."""
    mfig = render(fig)
    mfig.canvas.draw()
    ax = mfig.axes[0]
    lo, hi = ax.get_xlim()
    ticks = np.asarray(ax.get_xticks())
    return ax.xaxis.get_major_locator(), ticks[(ticks >= lo) & (ticks <= hi)]


def test_count_axes_get_whole_ticks_in_the_png(tmp_path: Path) -> None:
    nodes = _figure(
        Axis("nodes (peers, one client each)"),
        Axis("response time", "log", kind="time"),
        [Trace("line", "mean", [1, 2], [0.3, 0.6])],
    )
    locator, ticks = _x_ticks(nodes)
    assert type(locator) is MaxNLocator  # not its subclass AutoLocator, matplotlib's default
    assert len(ticks) >= 2 and np.all(ticks == np.round(ticks)), ticks
    # The same data given as floats, not declared a count: matplotlib's own fractional
    # ticks (what the nodes axis had before).
    floats = _figure(Axis("x"), Axis("y"), [Trace("line", "m", [1.0, 2.0], [0.3, 0.6])])
    locator, ticks = _x_ticks(floats)
    assert type(locator) is not MaxNLocator and np.any(ticks != np.round(ticks)), ticks
    declared = _figure(Axis("x", kind="count"), Axis("y"), floats.traces)
    locator, ticks = _x_ticks(declared)
    assert type(locator) is MaxNLocator and np.all(ticks == np.round(ticks)), ticks
    path = tmp_path / "nodes.png"
    write_png(nodes, path)
    with Image.open(path) as im:
        assert im.format == "PNG" and im.width >= 400


# ------------------------------------------------------------------ tables, notes, findings


def test_table_aligns_escapes_and_marks() -> None:
    html = table(
        [Col("point", left=True), Col("n", tip='a "tip"'), "mean"],
        [
            ["<b>p1</b>", 3, None],
            Row([Html("<i>p2</i>"), Cell(5, "v-fail", "why"), lines("1.5", "[1, 2]")], "unstable"),
        ],
    )
    assert html.startswith('<table><tr><th class="l">point</th><th title="a &quot;tip&quot;">n')
    assert '<td class="l">&lt;b&gt;p1&lt;/b&gt;</td><td>3</td><td>-</td>' in html
    assert '<tr class="unstable"><td class="l"><i>p2</i></td>' in html
    assert '<td class="v-fail" title="why">5</td>' in html
    assert '<td>1.5<span class="ci">[1, 2]</span></td>' in html
    folded = table(["a"], [[1]], details="more <rows>", scroll=True, heading="Per op")
    assert folded.startswith("<h3>Per op</h3><details><summary>more &lt;rows&gt;</summary>")
    assert '<div style="overflow-x:auto"><table>' in folded
    with pytest.raises(ValueError, match="2 cells in a table of 1 columns"):
        table(["a"], [[1, 2]])


def test_verdicts_notes_and_findings() -> None:
    assert verdict("pass") == Cell("pass", "v-pass")
    assert verdict("unstable", "grew").css == "v-fail"
    assert verdict("odd").css == verdict(None).css == "v-na"
    assert note("no <samples>") == '<p class="note">no &lt;samples&gt;</p>'
    items = [Finding("Rate.", "x < y"), Finding("Cache.", Html("<sup>2</sup>"))]
    assert findings(items, "none") == (
        '<ul><li class="finding"><b>Rate.</b> x &lt; y</li>'
        '<li class="finding"><b>Cache.</b> <sup>2</sup></li></ul>'
    )
    assert findings([], "nothing to compare") == (
        '<ul><li class="finding">nothing to compare</li></ul>'
    )
