"""The live page of one run: its state and its server, and the runner's observer
(knee.runner.display.Display tells it what the runner reads, in the runner's thread).

A hook that fails never fails the run: the page says so (a warning on the console, once)
and stops following, and the run goes on.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from knee.live.server import LiveServer
from knee.live.state import LiveState
from knee.live.types import MonitorRow, ProgressLine
from knee.report.types import FindDoc
from knee.stats.summary import PointStats

log = logging.getLogger(__name__)

#: After the report is written, the page's server waits up to this long for a page that
#: polled recently to fetch the last state (its link to the report), then stops.
LINGER_S = 2.0
#: A page that polled within this many seconds is open.
OPEN_WITHIN_S = 3.0

F = TypeVar("F", bound=Callable[..., None])


def _guarded(method: F) -> F:
    @functools.wraps(method)
    def hook(self: Live, *args: Any) -> None:
        if self.broken:
            return
        try:
            method(self, *args)
        except Exception as e:  # the page is an aid: the run goes on without it
            self.broken = f"{type(e).__name__}: {e}"
            log.warning("knee live: the page stopped following the run: %s", self.broken)

    return hook  # type: ignore[return-value]


class Live:
    """`--live`: serves the page at `address` from `start()` until `stop()`."""

    def __init__(
        self,
        address: tuple[str, int],
        experiment: str,
        system: str,
        kind: str,
        link_bytes_per_s: dict[str, float] | None = None,
    ) -> None:
        self.state = LiveState(experiment, system, kind, link_bytes_per_s)
        self.server = LiveServer(address, self.state)
        self.broken: str | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> str:
        self.server.start()
        return self.url

    def stop(self) -> None:
        """Stops serving: at once, or after the page that is open fetched the last state
        (LINGER_S at most)."""
        self.state.run_finished()
        server = self.server
        if time.monotonic() - server.last_poll < OPEN_WITHIN_S:
            deadline = time.monotonic() + LINGER_S
            while server.served_version < self.state.version and time.monotonic() < deadline:
                time.sleep(0.05)
        server.stop()

    # ---------------------------------------------------------------- the runner's hooks

    @_guarded
    def run_started(self, run_dir: Path, n_points: int) -> None:
        self.state.run_started(run_dir, n_points)

    @_guarded
    def point_started(self, point: Any, expected_requests: int | None) -> None:
        self.state.point_started(point, expected_requests)

    @_guarded
    def node_lines(self, lines: dict[str, ProgressLine]) -> None:
        self.state.node_lines(lines)

    @_guarded
    def sampled(self, rows: list[MonitorRow]) -> None:
        self.state.sampled(rows)

    @_guarded
    def point_finished(self, point: Any, stats: PointStats) -> None:
        self.state.point_finished(point, stats)

    @_guarded
    def search(self, doc: FindDoc) -> None:
        self.state.search(doc)

    @_guarded
    def run_finished(self) -> None:
        pass  # the run's tables are written; the report may follow: stop() ends the page

    @_guarded
    def report_written(self, path: Path) -> None:
        self.state.report_written(path)
