"""knee: a laboratory for measuring distributed systems.

knee run experiments/matrix.toml --preset quick
run = knee.open_run("runs/matrix-...")   # samples, timeseries, events as DataFrames
"""

from importlib import metadata

try:
    __version__ = metadata.version("knee")
except metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"

from knee.results import Run, open_run  # noqa: E402

__all__ = ["Run", "open_run", "__version__"]
