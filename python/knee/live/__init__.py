"""`--live`: a local page that draws a run or a search as it happens, and /metrics in the
Prometheus text format (docs/live.md).

- state.py: what the page shows, collected from what the runner already reads;
- samples.py: a recorder's samples file read as it grows (counts, latency histogram);
- server.py: the HTTP server, its connections and memory bounded;
- page.py, page.html: the page (plotly.js from the installed plotly package, no CDN);
- metrics.py: the Prometheus exposition;
- observer.py: the runner's observer that feeds the state, and the server's lifetime;
- options.py: `--live [ADDR]`, `--no-live`, and when the page is on by default.
"""

from typing import TYPE_CHECKING

from knee import lazy

if TYPE_CHECKING:
    from knee.live.observer import Live

#: Where each name lives (imported on first use: knee.lazy), so that `--live`'s options
#: (every command's parser) do not load the page's server and state (and through them the
#: report's stack).
_LAZY = {
    "Live": "knee.live.observer",
}

__getattr__ = lazy.attributes(__name__, _LAZY)

__all__ = ["Live"]
