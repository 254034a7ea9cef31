"""knee: a laboratory for measuring distributed systems.

knee run experiments/matrix.toml --preset quick
run = knee.open_run("runs/matrix-...")   # samples, timeseries, events as DataFrames
"""

from importlib import metadata

try:
    __version__ = metadata.version("knee")
except metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"

from typing import TYPE_CHECKING  # noqa: E402

from knee import lazy  # noqa: E402

if TYPE_CHECKING:
    from knee.results import Run, open_run

#: Where each name lives (imported on first use: knee.lazy), so that `import knee` (every
#: command, and each of the package's modules) does not load pandas and pyarrow before a run
#: is opened.
_LAZY = {"Run": "knee.results", "open_run": "knee.results"}

__getattr__ = lazy.attributes(__name__, _LAZY)

__all__ = ["Run", "open_run", "__version__"]
