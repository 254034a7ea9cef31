"""Is this a run directory the report can read? `check(path)` answers before `knee report`
or `knee compare` reads or writes anything: a directory that is not a run, or one whose
files are missing, cut short or garbage, is refused with one line saying which file and
what is wrong, and is left as it was.

The checks are cheap (each JSON and TOML file parsed, each Parquet file's footer read, not
its data), so they cost nothing beside the report. A run that was killed is still a run:
its samples may be only in raw/ (no samples.parquet), the last record of a raw sample file
may be partial (knee.results ignores it), and it may have fewer points than planned.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from knee.results import EVENTS, MANIFEST, SAMPLES, SUMMARY, TIMESERIES, RawFile

#: What a run directory holds, for the message that refuses one.
LAYOUT = (
    "a run directory, as `knee run` writes it, holds spec.toml, summary.json, env.json "
    "and its samples (samples.parquet or raw/)"
)
#: Columns of samples.parquet without which no figure can be drawn.
SAMPLE_COLUMNS = ("point", "latency_ns", "status", "warmup")
_MANIFEST_KEYS = {"point", "series", "node", "samples", "run_start_ns", "warmup_end_ns"}


class RunDirError(Exception):
    """A directory the report cannot read. ``str(err)`` is one line: the path, then why."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {' '.join(message.splitlines())}")


def check(run_dir: Path) -> None:
    """Raises RunDirError unless `run_dir` is a run directory whose files can be read."""
    if not run_dir.exists():
        raise RunDirError(run_dir, "no such directory")
    if not run_dir.is_dir():
        raise RunDirError(run_dir, f"not a directory; {LAYOUT}")
    spec, summary = run_dir / "spec.toml", run_dir / SUMMARY
    if not spec.exists() and not summary.exists():
        empty = not any(run_dir.iterdir())
        what = "an empty directory" if empty else "not a run directory"
        raise RunDirError(run_dir, f"{what}: no spec.toml and no summary.json; {LAYOUT}")
    if not spec.exists():
        raise RunDirError(run_dir, f"spec.toml is missing; {LAYOUT}")
    if not summary.exists():
        raise RunDirError(
            run_dir, "summary.json is missing (the run stopped before its first point ended)"
        )
    _check_spec(run_dir, spec)
    points = _check_summary(run_dir, summary)
    for name in ("env.json", "plan.json"):
        if (run_dir / name).exists():
            _object(run_dir, name, _json(run_dir, name))
    for path in sorted((run_dir / "points").glob("p*.json")):
        _object(run_dir, f"points/{path.name}", _json(run_dir, f"points/{path.name}"))
    for name in (TIMESERIES, EVENTS):
        if (run_dir / name).exists():
            _parquet(run_dir, name)
    raws = _check_manifest(run_dir)
    if (run_dir / SAMPLES).exists():
        schema = _parquet(run_dir, SAMPLES)
        missing = [c for c in SAMPLE_COLUMNS if c not in schema.names]
        if missing:
            raise RunDirError(run_dir, f"{SAMPLES}: no column {', '.join(missing)}")
    elif points and not any((run_dir / r.samples).is_file() for r in raws):
        raise RunDirError(
            run_dir,
            f"summary.json lists {len(points)} points but the samples are missing "
            f"(no {SAMPLES}, and no sample file that {MANIFEST} lists)",
        )


def _check_spec(run_dir: Path, path: Path) -> None:
    try:
        spec = tomllib.loads(path.read_text())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise RunDirError(run_dir, f"spec.toml is not TOML ({e})") from None
    if not isinstance(spec.get("experiment", {}), dict):
        raise RunDirError(run_dir, "spec.toml: [experiment] is not a table")


def _check_summary(run_dir: Path, path: Path) -> list[dict[str, Any]]:
    summary = _object(run_dir, SUMMARY, _json(run_dir, SUMMARY))
    points = summary.get("points", [])
    if not isinstance(points, list):
        raise RunDirError(run_dir, f"{SUMMARY}: 'points' is not a list")
    for i, point in enumerate(points):
        if not isinstance(point, dict) or not _is_int(point.get("point")):
            raise RunDirError(run_dir, f"{SUMMARY}: points[{i}] has no point number")
        for key, kind in (("label", str), ("series", str), ("swept", dict)):
            if key in point and not isinstance(point[key], kind):
                raise RunDirError(run_dir, f"{SUMMARY}: points[{i}].{key} is not a {kind.__name__}")
    return points


def _check_manifest(run_dir: Path) -> list[RawFile]:
    path = run_dir / MANIFEST
    if not path.exists():
        return []
    raws = []
    for n, line in enumerate(_text(run_dir, MANIFEST).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RunDirError(run_dir, f"{MANIFEST} line {n} is not JSON ({e})") from None
        if not isinstance(row, dict) or not _MANIFEST_KEYS <= set(row):
            raise RunDirError(run_dir, f"{MANIFEST} line {n} is not a sample file's entry")
        samples = row["samples"]
        inside = isinstance(samples, str) and not Path(samples).is_absolute()
        if not _is_int(row["point"]) or not inside or ".." in Path(samples).parts:
            raise RunDirError(run_dir, f"{MANIFEST} line {n} names no sample file of this run")
        try:
            raws.append(RawFile(**row))
        except TypeError as e:
            raise RunDirError(run_dir, f"{MANIFEST} line {n}: {e}") from None
    return raws


def _text(run_dir: Path, name: str) -> str:
    try:
        return (run_dir / name).read_text()
    except UnicodeDecodeError:
        raise RunDirError(run_dir, f"{name} is not text") from None
    except OSError as e:
        raise RunDirError(run_dir, f"{name} cannot be read ({e.strerror or e})") from None


def _json(run_dir: Path, name: str) -> Any:
    try:
        return json.loads(_text(run_dir, name))
    except json.JSONDecodeError as e:
        raise RunDirError(run_dir, f"{name} is not JSON ({e})") from None


def _object(run_dir: Path, name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RunDirError(run_dir, f"{name} is not a JSON object")
    return value


def _parquet(run_dir: Path, name: str) -> pa.Schema:
    """The file's schema, read from its footer (which a cut-short file lacks)."""
    try:
        return pq.ParquetFile(run_dir / name).schema_arrow
    except (pa.ArrowException, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RunDirError(run_dir, f"{name} is damaged or cut short ({first})") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
