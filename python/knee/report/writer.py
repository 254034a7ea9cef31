"""`knee report RUN`: writes RUN/report.html (self-contained) and RUN/figures/*.png."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from knee.report import data
from knee.report.figures import Figure, Trace
from knee.report.html import Section, page
from knee.report.png import write_png
from knee.report.sections import STANDARD

REPORT = "report.html"
FIGURES = "figures"
#: Points drawn in one figure at most (markers, line vertices and box outliers together):
#: a report must open in a browser, and a figure of every sample of a long run would embed
#: millions. Sections draw aggregates well below this; beyond it a figure shows a subset.
MAX_DRAWN = 50_000
#: Standard sections left out when they have nothing to show (the search path of a sweep;
#: what sets the knee, for a run that measured no resource's utilization).
OPTIONAL = ("search-path", "what-sets")


@dataclass
class Written:
    html: Path
    figures: list[Path]
    seconds: float
    warnings: list[str] = field(default_factory=list)  # shown in the page too


def system_sections(rr: data.ReportRun) -> list[Section]:
    """The system's own sections, when knee.report.systems.<system> exists."""
    if not rr.system.isidentifier():
        return []
    try:
        module = importlib.import_module(f"knee.report.systems.{rr.system}")
    except ModuleNotFoundError as e:
        if e.name != f"knee.report.systems.{rr.system}":
            raise  # the module exists but imports something missing: a real error
        return []
    return list(module.sections(rr, rr.models))


def write(path: Path, title: str, subtitle: str, sections: list[Section]) -> Written:
    """Writes the page at `path` and every figure as `figures/<id>.png` beside it."""
    t0 = time.monotonic()
    figures = [f for s in sections for f in s.figures]
    _check_ids(figures)
    for fig in figures:
        bound(fig)
    fig_dir = path.parent / FIGURES
    fig_dir.mkdir(parents=True, exist_ok=True)
    pngs = []
    for fig in figures:
        png = fig_dir / f"{fig.id}.png"
        write_png(fig, png)
        pngs.append(png)
    for old in set(fig_dir.glob("*.png")) - set(pngs):
        old.unlink()  # a figure an earlier report had and this one has not
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(page(title, subtitle, sections), encoding="utf-8")
    tmp.replace(path)
    return Written(path, pngs, time.monotonic() - t0)


def build(run_dir: Path, out_dir: Path | None = None) -> Written:
    """The report of one run directory (into the run directory unless `out_dir`)."""
    t0 = time.monotonic()
    rr = data.load(run_dir)
    sections = [s for s in (make(rr) for make in STANDARD) if s.blocks or s.id not in OPTIONAL]
    sections += system_sections(rr)
    summary = rr.run.summary
    title = f"knee report: {summary.get('experiment') or run_dir.name}"
    subtitle = (
        f"{run_dir.name} — system {rr.system}, {len(rr.points)} points, "
        f"status {summary.get('status', 'unknown')}"
    )
    target = (out_dir or run_dir) / REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    written = write(target, title, subtitle, sections)
    written.seconds = time.monotonic() - t0
    if rr.models_error:
        written.warnings.append(rr.models_error)
    return written


def bound(fig: Figure, limit: int = MAX_DRAWN) -> None:
    """Thins a figure in place to at most `limit` drawn points, saying so in its caption.
    Each line/points trace and box's outliers gets a share (the small ones are kept whole);
    a thinned trace keeps evenly spaced points and its largest values (the tail), in their
    order, and a box keeps its most extreme outliers on both sides."""
    sizes = [_drawn(t) for t in fig.traces]
    total = sum(sizes)
    if total <= limit:
        return
    cap = _share(sizes, limit)
    for t, n in zip(fig.traces, sizes, strict=True):
        if n > cap:
            _thin(t, cap)
    fig.caption = (
        f"{fig.caption} Drawn: {sum(_drawn(t) for t in fig.traces):,} of {total:,} points "
        "(evenly spaced, with the largest values and the extreme outliers kept)."
    ).strip()


def _drawn(t: Trace) -> int:
    if t.kind in ("line", "points"):
        return len(t.x)
    if t.kind == "box":
        return sum(len(b.get("outliers") or []) for b in t.boxes or [])
    return 0


def _share(sizes: list[int], limit: int) -> int:
    """The largest cap c with sum(min(n, c)) <= limit: small traces whole, the rest equal."""
    left, rest = limit, sorted(sizes)
    while rest and rest[0] * len(rest) <= left:
        left -= rest.pop(0)
    return left // len(rest) if rest else limit


def _thin(t: Trace, cap: int) -> None:
    if t.kind == "box":
        per_box = cap // max(1, len(t.boxes or []))
        for b in t.boxes or []:
            out = sorted(b.get("outliers") or [])
            if len(out) > per_box:  # the lowest and the highest, half each
                b["outliers"] = out[: per_box // 2] + out[len(out) - (per_box - per_box // 2) :]
        return
    n = len(t.x)
    y = _numbers(t.y, n)
    top = cap // 2 if y is not None else 0
    keep = np.zeros(n, dtype=bool)
    if top:
        keep[np.argpartition(-y, top)[:top]] = True  # type: ignore[operator]
    rest = np.flatnonzero(~keep)  # the others, evenly spaced (first and last included)
    keep[rest[np.linspace(0, len(rest) - 1, cap - top).astype(np.int64)]] = True
    index = np.flatnonzero(keep).tolist()
    t.x = [t.x[i] for i in index]
    t.y = [t.y[i] for i in index]
    for name in ("lo", "hi", "hover"):
        values = getattr(t, name)
        if values is not None and len(values) == n:
            setattr(t, name, [values[i] for i in index])


def _numbers(values: list, n: int) -> np.ndarray | None:
    """`values` as floats (a gap ranks lowest), or None when they are not numbers."""
    try:
        y = np.array([-np.inf if v is None else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return np.where(np.isnan(y), -np.inf, y) if len(y) == n else None


def _check_ids(figures: list[Figure]) -> None:
    seen: set[str] = set()
    for f in figures:
        if f.id in seen or not f.id.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"figure id {f.id!r} is repeated or not a safe file name")
        seen.add(f.id)
