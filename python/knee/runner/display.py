"""What the runner shows while it works: a progress bar per point, a line per finished
point, and the summary table at the end."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from knee.stats.summary import Distribution, PointStats

if TYPE_CHECKING:  # params reads the SLO rules, and with them scipy: not for a display
    from knee.params import Point


def fmt_ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def fmt_percentile(dist: Distribution, key: str) -> str:
    """A headline percentile in ms, or what it landed on when that was a failure."""
    failed = dist.get("failed", {}).get(key)
    if failed is not None:
        return "> timeout" if failed == "timeout" else "failed"
    value = dist.get(key)
    return fmt_ms(value if isinstance(value, int | float) else None)


def warnings_of(point: PointStats) -> list[str]:
    """Short words for what qualifies a point: unstable, a failing sender, interference."""
    out = []
    if point.get("stability") and point["stability"].get("verdict") == "unstable":
        out.append("UNSTABLE")
    for c in point.get("checks") or []:
        if c.get("name") in ("sender", "interference") and c.get("verdict") in ("warn", "fail"):
            out.append(f"{c['name']} {c['verdict']}")
    return out


class Display:
    """The console's view of the run; each event also goes to `observers` (the live page,
    knee.live.observer.Observer: the same methods, plus node_lines, sampled and search)."""

    def __init__(
        self, console: Console, enabled: bool = True, observers: Sequence[Any] = ()
    ) -> None:
        self.console = console
        self.enabled = enabled
        self.observers = list(observers)
        self._progress: Progress | None = None
        self._task: Any = None
        self._n_points = 0

    def _tell(self, event: str, *args: Any) -> None:
        for observer in self.observers:
            getattr(observer, event)(*args)

    def node_lines(self, lines: dict[str, dict[str, Any]]) -> None:
        """Each recorder's newest progress line, as read (about one a second each)."""
        self._tell("node_lines", lines)

    def sampled(self, rows: list[dict[str, Any]]) -> None:
        """The time-series rows of one sampling interval (knee.monitor)."""
        self._tell("sampled", rows)

    def search(self, doc: dict[str, Any]) -> None:
        """`knee find`'s find.json as just written: its path and answers so far."""
        self._tell("search", doc)

    def run_started(self, run_dir: Path, n_points: int) -> None:
        self._tell("run_started", run_dir, n_points)
        self._n_points = n_points
        shown = f"{n_points} points" if n_points else "a search: probes as it decides them"
        self.console.print(f"run directory: [bold]{run_dir}[/]  ({shown})")
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>9} req/s  p99 {task.fields[p99]:>9} ms"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()

    def point_started(self, point: Point, expected_requests: int | None) -> None:
        self._tell("point_started", point, expected_requests)
        if self._progress is None:
            return
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(
            f"{self._tag(point)} {point.label}",
            total=expected_requests,
            rate="-",
            p99="-",
        )

    def progress(self, ev: dict[str, Any]) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(
            self._task,
            completed=ev.get("completed", 0),
            rate=f"{ev.get('rate_per_s', 0):.1f}",
            p99=fmt_ms(ev.get("p99_ns") or None),
        )

    def point_finished(self, point: Point, stats: PointStats) -> None:
        self._tell("point_finished", point, stats)
        lat = stats["latency_ns"]
        flags = warnings_of(stats)
        self.console.print(
            f"  {self._tag(point)} {point.label}: {stats['count']} requests, "
            f"sent {stats['achieved_rate_per_s']:.1f}/s, done {stats['throughput_per_s']:.1f}/s, "
            f"p50 {fmt_percentile(lat, 'p50')} ms, p99 {fmt_percentile(lat, 'p99')} ms, "
            f"ok {stats['status_rates']['ok']:.1%}"
            + (f"  [bold red]{', '.join(flags)}[/]" if flags else ""),
            highlight=False,
        )

    def _tag(self, point: Point) -> str:
        """[i/n]; a search's probes, whose number is not known ahead: [probe i]."""
        if self._n_points:
            return f"[{point.index + 1}/{self._n_points}]"
        return f"[probe {point.index + 1}]"

    def run_finished(self) -> None:
        self._tell("run_finished")
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None


def summary_table(points: list[PointStats]) -> Table:
    """The end-of-run table: one row per point."""
    t = Table(
        title="summary (warm-up excluded; latency in ms from the intended send time; "
        "percentiles over every request, failures ranked last; mean over OK replies)"
    )
    for col in (
        "point",
        "target/s",
        "sent/s",
        "done/s",
        "late",
        "ok %",
        "p50",
        "p99",
        "p99.9",
        "mean ok",
        "server",
        "network",
        "cpu % srv",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("point", "verdict") else "right")
    for p in points:
        lat = p["latency_ns"]
        ok = p.get("latency_ok_ns") or lat
        target = p.get("target_rate_per_s")
        cpu = p.get("resources", {}).get("server", {}).get("cpu_percent")
        late = p.get("late_sends")
        stable = p["stability"].get("verdict", "-") if p.get("stability") else "-"
        verdict = ", ".join(warnings_of(p)) or stable
        t.add_row(
            p["label"],
            "-" if target is None else f"{target:g}",
            f"{p['achieved_rate_per_s']:.1f}",
            f"{p['throughput_per_s']:.1f}",
            "-" if late is None else str(late),
            f"{100 * (p['status_rates']['ok'] or 0.0):.1f}",
            fmt_percentile(lat, "p50"),
            fmt_percentile(lat, "p99"),
            fmt_percentile(lat, "p999"),
            fmt_ms(ok["mean"]),
            fmt_ms(p["server_ns"]["mean"]),
            fmt_ms(p["network_ns"]["mean"]),
            "-" if cpu is None else f"{cpu:.0f}",
            verdict,
        )
    return t


def point_notes(points: list[PointStats]) -> list[str]:
    """One line per qualified point under the table: why it is unstable, what the sender
    or the machine did, and its checker's verdict when the system has one."""
    lines = []
    for p in points:
        if p.get("stability") and p["stability"].get("verdict") == "unstable":
            lines.append(f"{p['label']}: {p['stability'].get('detail')}")
        for c in p.get("checks") or []:
            if c.get("name") in ("sender", "interference") and c.get("verdict") in ("warn", "fail"):
                lines.append(f"{p['label']}: {c['name']} {c['verdict']}: {c.get('detail')}")
        for g in p.get("generators") or []:  # a generator that could not keep up
            sender = g.get("sender") or {}
            if sender.get("verdict") in ("warn", "fail"):
                lines.append(
                    f"{p['label']}: {g['node']} sender {sender['verdict']}: {sender.get('detail')}"
                )
        if v := p.get("check"):  # the system's checker (knee.analysis.chaos)
            why = f": {v['detail']}" if v.get("detail") else ""
            lines.append(f"{p['label']}: check {v.get('verdict')} ({v.get('name', '')}){why}")
    return lines
