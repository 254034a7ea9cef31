"""The shapes of the Plotly JSON the report writes (`knee.report.figures.plotly_spec`): the
keys of plotly.js's figure reference that the report sets, and no other. Values are plain
JSON (lists of numbers, strings, None), as Plotly.newPlot reads them."""

from __future__ import annotations

from typing import Any, TypedDict


class Font(TypedDict, total=False):
    size: int
    color: str


class Title(TypedDict, total=False):
    text: str
    font: Font


class Line(TypedDict, total=False):
    color: str
    dash: str  # "dash", "solid"
    width: float


class MarkerStyle(TypedDict, total=False):
    color: str
    symbol: str
    size: int


class ErrorBars(TypedDict):
    type: str  # "data": the arrays are the bars' lengths
    symmetric: bool
    array: list[float | None]
    arrayminus: list[float | None]
    color: str
    thickness: int


class ColorBar(TypedDict):
    title: Title


class Trace(TypedDict, total=False):
    """One trace of `data`: a scatter (line, points, band), a bar, a box or a heat map."""

    type: str  # "scatter", "bar", "box", "heatmap"
    name: str
    legendgroup: str
    showlegend: bool
    visible: str  # "legendonly"
    mode: str  # "lines", "markers", "lines+markers"
    x: list[Any]  # numbers or categories; None a gap
    y: list[Any] | None  # numbers or categories; a box's outliers: one list per box
    z: list[list[Any] | None]
    line: Line
    marker: MarkerStyle
    text: list[str]
    hovertemplate: str
    hoverinfo: str
    textposition: str
    texttemplate: str
    error_y: ErrorBars
    fill: str
    fillcolor: str
    # a box's precomputed statistics, one per box
    q1: list[float]
    median: list[float]
    q3: list[float]
    lowerfence: list[float]
    upperfence: list[float]
    mean: list[float]
    boxpoints: str
    colorscale: str
    colorbar: ColorBar


class Axis(TypedDict, total=False):
    title: Title
    zeroline: bool
    automargin: bool
    type: str  # "log", "category"
    tick0: float
    dtick: float
    tickvals: list[float]
    ticktext: list[str]


class Shape(TypedDict):
    """A vertical line across the plot (a marker)."""

    type: str
    xref: str
    yref: str
    x0: float
    x1: float
    y0: float
    y1: float
    line: Line


class Annotation(TypedDict):
    """A marker's label."""

    x: float
    xref: str
    y: float
    yref: str
    yanchor: str
    xanchor: str
    text: str
    showarrow: bool
    textangle: int
    font: Font


class Margin(TypedDict):
    l: int  # noqa: E741 (Plotly's name)
    r: int
    t: int
    b: int


class Meta(TypedDict):
    units: dict[str, str]  # a time axis ("x", "y") -> its unit, e.g. "µs"


class Layout(TypedDict, total=False):
    title: Title
    height: int
    margin: Margin
    hovermode: str
    xaxis: Axis
    yaxis: Axis
    legend: dict[str, str]
    barmode: str
    boxmode: str
    shapes: list[Shape]
    annotations: list[Annotation]
    meta: Meta


class Config(TypedDict):
    responsive: bool
    displaylogo: bool


class Spec(TypedDict):
    """What Plotly.newPlot takes."""

    data: list[Trace]
    layout: Layout
    config: Config
