"""The live page (page.html, shipped in the package) and its chart library: plotly.js from
the installed plotly package, as the report embeds it (knee.report.html), served from
memory: no CDN, nothing fetched from the network."""

from __future__ import annotations

import functools
from pathlib import Path

PAGE = Path(__file__).with_name("page.html")


@functools.cache
def page_html() -> str:
    return PAGE.read_text(encoding="utf-8")


@functools.cache
def plotly_js() -> bytes:
    from knee.report.html import plotly_js as report_plotly_js

    return report_plotly_js().encode()
