"""A stop asked for by a signal (SIGINT, SIGTERM), remembered as well as raised.

Python raises KeyboardInterrupt wherever the main thread happens to be when the handler
runs. If that is a finalizer (an object's ``__del__``, a garbage-collector callback), the
exception is printed to stderr and dropped, and the run would go on to its end as if never
interrupted (seen once in CI: an interrupted run finished all its points and exited 0). So
the handler also sets a flag, and the runner calls `check` at every tick of a point and
between points, which raises again.
"""

from __future__ import annotations

import signal
from typing import NoReturn

_requested = False


def _on_signal(signum: int, frame: object) -> NoReturn:
    global _requested
    _requested = True
    raise KeyboardInterrupt


def install() -> None:
    """SIGINT and SIGTERM stop the run (from the main thread; a fresh run, no stop asked)."""
    global _requested
    _requested = False
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def check() -> None:
    """Raises KeyboardInterrupt if a signal asked for a stop, even if its first raise was
    dropped."""
    if _requested:
        raise KeyboardInterrupt
