"""The live page (page.html, shipped in the package) and its chart library: plotly.js from
the installed plotly package, as the report embeds it (knee.report.html), served from
memory: no CDN, nothing fetched from the network."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

PAGE = Path(__file__).with_name("page.html")


@functools.cache
def page_html() -> str:
    return PAGE.read_text(encoding="utf-8")


@functools.cache
def plotly_js() -> bytes:
    """The file plotly.offline.get_plotlyjs() reads, read without importing plotly (whose
    import costs the runner 0.4 s of CPU; bench/live_cost.py)."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path.read_bytes()
    from knee.report.html import plotly_js as report_plotly_js

    return report_plotly_js().encode()
