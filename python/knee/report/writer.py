"""`knee report RUN`: writes RUN/report.html (self-contained) and RUN/figures/*.png."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from knee.report import data
from knee.report.figures import Figure
from knee.report.html import Section, page
from knee.report.png import write_png
from knee.report.sections import STANDARD

REPORT = "report.html"
FIGURES = "figures"


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
    sections = [make(rr) for make in STANDARD] + system_sections(rr)
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


def _check_ids(figures: list[Figure]) -> None:
    seen: set[str] = set()
    for f in figures:
        if f.id in seen or not f.id.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"figure id {f.id!r} is repeated or not a safe file name")
        seen.add(f.id)
