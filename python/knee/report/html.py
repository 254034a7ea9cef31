"""Page assembly: one self-contained HTML file.

The chart library (plotly.js from the installed `plotly` package) is embedded inline, so the
page opens with no network. The page checks itself: a script that runs before anything
else collects uncaught errors and `console.error` calls into `#knee-errors`, and each chart
gets `data-drawn="1"` once Plotly has drawn it; `<body data-report-done>` is set when every
chart has been tried. A headless browser's dumped DOM thus shows whether the page works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from knee.report.figures import Figure, plotly_spec
from knee.report.kit.text import esc

#: Runs first: records errors in the DOM so a dumped DOM proves a clean page.
_ERROR_PROBE = """
window.kneeErrors = [];
function kneeRecord(msg) {
  window.kneeErrors.push(String(msg));
  var box = document.getElementById('knee-errors');
  if (box) { box.textContent = window.kneeErrors.join('\\n');
             box.setAttribute('data-count', window.kneeErrors.length); }
}
window.addEventListener('error', function (e) { kneeRecord('error: ' + e.message); });
window.addEventListener('unhandledrejection', function (e) {
  kneeRecord('unhandled rejection: ' + e.reason);
});
(function () {
  var original = console.error;
  console.error = function () {
    kneeRecord('console.error: ' + Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
})();
"""

#: Runs last: draws every chart from its JSON and marks it drawn.
_DRAW = """
(function () {
  var box = document.getElementById('knee-errors');
  box.textContent = window.kneeErrors.join('\\n');
  box.setAttribute('data-count', window.kneeErrors.length);
  var divs = document.querySelectorAll('div.chart[data-figure]');
  var jobs = Array.prototype.map.call(divs, function (div) {
    try {
      var spec = JSON.parse(document.getElementById('data-' + div.id).textContent);
      return Plotly.newPlot(div, spec.data, spec.layout, spec.config).then(function () {
        div.setAttribute('data-drawn', '1');
      }, function (e) { kneeRecord('plot ' + div.id + ': ' + e); });
    } catch (e) {
      kneeRecord('plot ' + div.id + ': ' + e);
      return Promise.resolve();
    }
  });
  Promise.all(jobs).then(function () {
    document.body.setAttribute('data-figures', divs.length);
    document.body.setAttribute('data-drawn',
      document.querySelectorAll('div.chart[data-drawn="1"]').length);
    document.body.setAttribute('data-report-done', '1');
  });
})();
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1300px;
       padding: 0 24px 48px; color: #222; line-height: 1.45; }
h1 { margin-top: 24px; } h2 { border-bottom: 1px solid #ccc; margin-top: 40px; }
nav ol { columns: 2; }
table { border-collapse: collapse; font-size: 13px; margin: 12px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.ci { color: #777; font-size: 11px; display: block; }
.v-pass { background: #e3f5e1; } .v-warn { background: #fff4d6; }
.v-fail { background: #fbdcdc; } .v-na { color: #999; }
tr.unstable td { font-style: italic; }
tr.unstable td.l::after { content: " (unstable)"; color: #b00; }
tr.bottleneck td { font-weight: bold; }
.chart { width: 100%; min-height: 300px; }
.caption { color: #555; font-size: 13px; margin: 4px 0 18px; }
.note { background: #f6f8fa; border-left: 4px solid #8aa; padding: 8px 12px; }
.finding { background: #f3f7ff; border-left: 4px solid #36c; padding: 8px 12px; margin: 8px 0; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
#knee-errors { color: #b00; }
#knee-errors[data-count="0"] { display: none; }
"""


@dataclass
class Section:
    """A part of the report: a title and its blocks, in order. A block is HTML (built with
    `esc` for anything that came from data) or a Figure."""

    id: str
    title: str
    blocks: list[str | Figure] = field(default_factory=list)

    @property
    def figures(self) -> list[Figure]:
        return [b for b in self.blocks if isinstance(b, Figure)]


@cache
def plotly_js() -> str:
    """plotly.min.js as shipped inside the installed plotly package."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _script_json(data: Any) -> str:
    # No "<" at all inside a <script> ("</script>" or "<!--" from data would break out of
    # it); "\u003c" is the same character to JSON.
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _figure_html(fig: Figure) -> str:
    div_id = f"fig-{fig.id}"
    caption = f'<p class="caption">{esc(fig.caption)}</p>' if fig.caption else ""
    return (
        f'<div class="chart" id="{esc(div_id)}" data-figure="{esc(fig.id)}"></div>\n'
        f'<script type="application/json" id="data-{esc(div_id)}">'
        f"{_script_json(plotly_spec(fig))}</script>\n{caption}"
    )


def page(title: str, subtitle: str, sections: list[Section]) -> str:
    """The whole HTML document."""
    toc = "".join(f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a></li>' for s in sections)
    body: list[str] = []
    for s in sections:
        body.append(f'<section id="{esc(s.id)}"><h2>{esc(s.title)}</h2>')
        for block in s.blocks:
            body.append(_figure_html(block) if isinstance(block, Figure) else block)
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n"
        f"<script>{_ERROR_PROBE}</script>\n"
        f"<script>{plotly_js()}</script>\n</head><body>\n"
        f"<h1>{esc(title)}</h1><p>{esc(subtitle)}</p>\n"
        '<pre id="knee-errors" data-count="0"></pre>\n'
        f"<nav><ol>{toc}</ol></nav>\n"
        + "\n".join(body)
        + f"\n<script>{_DRAW}</script>\n</body></html>\n"
    )
