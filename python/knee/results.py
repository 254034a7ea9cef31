"""The run directory: writing it during a run, and reading it back (`knee.open_run`).

Layout (see DESIGN.md, "Run directory"):

    spec.toml  env.json  summary.json  samples.parquet  timeseries.parquet  events.parquet
    plan.json  points/pNNN.json   what each point was planned to run and ran (knee.run_params)
    raw/manifest.jsonl   one line per sample file written by a node (point, node, start)
    raw/pNNN-<node>.samples.bin   96-byte records appended by knee-node (docs/samples.md)
    raw/pNNN-<node>.histogram.csv HDR histogram of post-warm-up latency (value_ns,count)
    nodes/<node>.pNNN.json / .stderr.log   each node's config and its log

A run that crashed before writing `samples.parquet` is still readable: `open_run` rebuilds
the samples from `raw/`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from knee import contract
from knee.stats.summary import PointStats, RunAnswers, Summary, SweepAnswers

#: The sample record as knee-node describes it (`sample_layout`; recorder.rs).
SAMPLE_DTYPE = np.dtype(contract.SAMPLE_LAYOUT)
assert SAMPLE_DTYPE.itemsize == contract.SAMPLE_BYTES, "must match the record"

#: Sample statuses in code order, as knee-node describes them.
STATUS_NAMES = contract.STATUSES

SAMPLES = "samples.parquet"
#: Every Parquet file knee writes has a CRC per page, and every read checks them: a damaged
#: page is an error, not silently wrong samples (files without them are read as before).
VERIFY = {"page_checksum_verification": True}
TIMESERIES = "timeseries.parquet"
EVENTS = "events.parquet"
SUMMARY = "summary.json"
MANIFEST = "raw/manifest.jsonl"


class SamplesError(ValueError):
    """A sample file that is not knee-node's records (corrupt, or another layout)."""


#: Fields that are ns or byte counts, signed 64-bit in samples.parquet: a value from 2^63
#: up cannot be one knee-node wrote (server_ns may also be u64::MAX, "no server time").
_SIGNED_FIELDS = (
    "intended_ns",
    "sent_ns",
    "received_ns",
    "queue_ns",
    "service_ns",
    "detail_ns",
    "bytes_out",
    "bytes_in",
)
_NO_SERVER_TIME = np.uint64(2**64 - 1)
_SIGNED_LIMIT = np.uint64(2**63)


def check_records(records: np.ndarray, path: str | os.PathLike[str]) -> np.ndarray:
    """Returns `records` if every one could have been written by knee-node; raises
    SamplesError naming the first record and field that could not (a value that would turn
    negative in samples.parquet, a status code out of range, a pad that is not zero: the
    marks of a corrupt file or of another record layout)."""
    bad = records["pad"] != 0
    why = np.where(bad, "pad", "")
    server = records["server_ns"]
    over = (server >= _SIGNED_LIMIT) & (server != _NO_SERVER_TIME)
    why = np.where(~bad & over, "server_ns", why)
    bad |= over
    for name in _SIGNED_FIELDS:
        over = records[name] >= _SIGNED_LIMIT
        why = np.where(~bad & over, name, why)
        bad |= over
    over = records["status"] >= len(STATUS_NAMES)
    why = np.where(~bad & over, "status", why)
    bad |= over
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        field_name = str(why[first])
        raise SamplesError(
            f"{path}: record {first} (byte {first * SAMPLE_DTYPE.itemsize}) has "
            f"{field_name} = {records[field_name][first]}, which knee-node never writes; "
            f"{int(bad.sum())} of {len(records)} records are like it: not a knee-node "
            "sample file, or a corrupt one"
        )
    return records


def read_sample_records(path: str | os.PathLike[str]) -> np.ndarray:
    """The records of one node's sample file; a partial last record (killed mid-write) is
    ignored. Raises SamplesError on records knee-node cannot have written (`check_records`)."""
    data = np.fromfile(path, dtype=np.uint8)
    whole = len(data) - len(data) % SAMPLE_DTYPE.itemsize
    return check_records(data[:whole].view(SAMPLE_DTYPE), path)


def samples_frame(
    records: np.ndarray,
    *,
    point: int,
    series: str,
    node: str,
    run_start_ns: int,
    warmup_end_ns: int,
    system: str | None = None,
) -> pd.DataFrame:
    """One node's records as a DataFrame: times in ns since the run's start (-1 when the
    event did not happen), latency from the intended send time, and the network/middleware
    share (round trip minus the server's residence). A request is warm-up if it was meant to
    leave before `warmup_end_ns` (`point_frame` adds the point's first requests). The
    fields `system` gives a meaning of its own (`arg`, `flags`, `detail_ns`) are named as
    its contract declares them (`knee.contract.columns`: slices' `detail_ns` is `epoch`);
    None keeps the record's names."""
    intended = records["intended_ns"].astype(np.int64)
    sent = records["sent_ns"].astype(np.int64)
    received = records["received_ns"].astype(np.int64)
    # u64::MAX (no server time in the reply: -1 here) leaves the split unknown.
    server = records["server_ns"].astype(np.int64)
    split = server >= 0
    answered = received > 0
    was_sent = sent > 0
    n = len(records)
    warmup = intended < warmup_end_ns

    def since_start(t: np.ndarray, present: np.ndarray) -> np.ndarray:
        return np.where(present, t - run_start_ns, -1)

    frame = pd.DataFrame(
        {
            "point": np.full(n, point, dtype=np.int32),
            "series": pd.Categorical([series] * n) if n else pd.Categorical([]),
            "node": pd.Categorical([node] * n) if n else pd.Categorical([]),
            "client": records["client"].astype(np.int32),
            "op": records["op"].astype(np.int16),
            "arg": records["arg"].astype(np.int64),
            "service": records["service"].astype(np.int16),
            "request_id": records["request_id"].astype(np.int64),
            "intended_ns": intended - run_start_ns,
            "sent_ns": since_start(sent, was_sent),
            "received_ns": since_start(received, answered),
            "latency_ns": np.where(answered, received - intended, -1),
            "server_ns": server,
            "queue_ns": records["queue_ns"].astype(np.int64),
            "service_ns": records["service_ns"].astype(np.int64),
            "detail_ns": records["detail_ns"].astype(np.int64),
            "network_ns": np.where(answered & was_sent & split, received - sent - server, -1),
            "bytes_out": records["bytes_out"].astype(np.int64),
            "bytes_in": records["bytes_in"].astype(np.int64),
            "status": pd.Categorical.from_codes(
                # A code this reader does not know is an error, never a valid outcome.
                np.where(
                    records["status"] < len(STATUS_NAMES),
                    records["status"],
                    STATUS_NAMES.index("error"),
                ).astype(np.int8),
                categories=list(STATUS_NAMES),
            ),
            "flags": records["flags"].astype(np.int32),
            "warmup": warmup,
        }
    )
    names = contract.columns(system) if system else {}
    frame.columns = [names.get(c, c) for c in frame.columns]  # renamed in place, no copy
    return frame


def read_histogram(path: str | os.PathLike[str]) -> pd.DataFrame:
    """An HDR histogram written by knee-node: columns value_ns, count."""
    return pd.read_csv(path, dtype={"value_ns": np.int64, "count": np.int64})


@dataclass
class RawFile:
    """One node's sample file in one point, as listed in raw/manifest.jsonl."""

    point: int
    series: str
    node: str
    samples: str  # relative to the run directory
    histogram: str
    run_start_ns: int
    warmup_end_ns: int
    warmup_requests: int = 0
    #: The system that wrote it: names the frame's columns (`samples_frame`). "" in a
    #: manifest written before issue 31: `read_manifest` takes it from spec.toml.
    system: str = ""

    def frame(self, run_dir: Path) -> pd.DataFrame:
        return self.frame_of(read_sample_records(run_dir / self.samples))

    def frame_of(self, records: np.ndarray) -> pd.DataFrame:
        """Some of this file's records as a frame (`samples_frame` with this file's ids)."""
        return samples_frame(
            records,
            point=self.point,
            series=self.series,
            node=self.node,
            run_start_ns=self.run_start_ns,
            warmup_end_ns=self.warmup_end_ns,
            system=self.system or None,
        )


def point_frame(run_dir: Path, raws: list[RawFile]) -> pd.DataFrame:
    """The samples of one point: every recorder's file pooled, with the point's first
    `warmup_requests` requests (by intended send time, over all its recorders) marked as
    warm-up besides those meant to leave during the warm-up time."""
    frames = [r.frame(run_dir) for r in raws if (run_dir / r.samples).exists()]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    first_n = max(r.warmup_requests for r in raws)
    if first_n > 0 and len(df):
        df["warmup"] = df["warmup"].to_numpy() | first_rows(df["intended_ns"].to_numpy(), first_n)
    return df


def by_point(raws: list[RawFile]) -> dict[int, list[RawFile]]:
    """The raw files grouped by point, in point order."""
    out: dict[int, list[RawFile]] = {}
    for raw in raws:
        out.setdefault(raw.point, []).append(raw)
    return dict(sorted(out.items()))


def read_manifest(run_dir: Path) -> list[RawFile]:
    path = run_dir / MANIFEST
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    raws = [RawFile(**row) for row in rows]
    if any(not r.system for r in raws):  # an older manifest: the run's one system
        system = _spec_system(run_dir)
        for raw in raws:
            raw.system = raw.system or system
    return raws


def _spec_system(run_dir: Path) -> str:
    """The system spec.toml names ("" without one)."""
    import tomllib

    path = run_dir / "spec.toml"
    spec = tomllib.loads(path.read_text()) if path.exists() else {}
    system = spec.get("experiment", {}).get("system", "")
    return system if system in contract.SYSTEMS else ""


def write_manifest(run_dir: Path, raws: list[RawFile]) -> None:
    """Lists the raw sample files (atomically rewritten as each one starts and ends)."""
    path = run_dir / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r.__dict__) + "\n" for r in raws))
    os.replace(tmp, path)


#: Records converted at a time when writing samples.parquet: the writer's memory (a few
#: hundred bytes a record while converting) is bounded by this, not by the largest point.
WRITE_CHUNK = 1_000_000


def write_samples(run_dir: Path, raws: list[RawFile]) -> int:
    """Converts every raw sample file into samples.parquet, a point at a time and within a
    point WRITE_CHUNK records at a time (the rows and warm-up marks of `point_frame`), so
    memory stays bounded whatever the size of a point (plus 8 bytes a request of the point
    when it has warm-up requests to mark). Each row group holds one point. Returns the
    number of rows."""
    tmp = run_dir / (SAMPLES + ".tmp")
    writer: pq.ParquetWriter | None = None
    rows = 0
    try:
        for point_raws in by_point(raws).values():
            for table in _point_tables(run_dir, point_raws):
                if writer is None:
                    writer = pq.ParquetWriter(
                        tmp, _unify_dictionaries(table.schema), write_page_checksum=True
                    )
                writer.write_table(table.cast(writer.schema))
                rows += table.num_rows
    except SamplesError:
        tmp.unlink(missing_ok=True)  # no half-written samples.parquet.tmp is left behind
        raise
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        os.replace(tmp, run_dir / SAMPLES)
    return rows


def _point_tables(run_dir: Path, raws: list[RawFile]) -> Iterator[pa.Table]:
    """One point's samples as tables of at most WRITE_CHUNK rows: `point_frame`'s rows in
    its order, each raw file read a chunk at a time instead of whole."""
    present = [r for r in raws if (run_dir / r.samples).exists()]
    counts = [(run_dir / r.samples).stat().st_size // SAMPLE_DTYPE.itemsize for r in present]
    first_n = max((r.warmup_requests for r in raws), default=0)
    early = None
    if first_n > 0:  # the point's first requests over all its recorders, as point_frame
        intended = [_intended(run_dir, r, n) for r, n in zip(present, counts, strict=True)]
        early = first_rows(np.concatenate([np.zeros(0, np.int64), *intended]), first_n)
    offset = 0
    for raw, n in zip(present, counts, strict=True):
        for start, part in zip(range(0, n, WRITE_CHUNK), _chunks(run_dir, raw, n), strict=True):
            df = raw.frame_of(part)
            if early is not None:
                rows = slice(offset + start, offset + start + len(part))
                df["warmup"] = df["warmup"].to_numpy() | early[rows]
            yield pa.Table.from_pandas(df, preserve_index=False)
        offset += n


def _intended(run_dir: Path, raw: RawFile, n: int) -> np.ndarray:
    """A raw file's intended send times since the run's start, as in its frame."""
    parts = [c["intended_ns"].astype(np.int64) - raw.run_start_ns for c in _chunks(run_dir, raw, n)]
    return np.concatenate([np.zeros(0, np.int64), *parts])


def _chunks(run_dir: Path, raw: RawFile, n: int) -> Iterator[np.ndarray]:
    """The first n records of a raw file, WRITE_CHUNK at a time (read, not memory-mapped:
    mapped pages would stay resident as the file is walked)."""
    for start in range(0, n, WRITE_CHUNK):
        count = min(WRITE_CHUNK, n - start)
        offset = start * SAMPLE_DTYPE.itemsize
        path = run_dir / raw.samples
        yield check_records(np.fromfile(path, dtype=SAMPLE_DTYPE, count=count, offset=offset), path)


def first_rows(values: np.ndarray, n: int) -> np.ndarray:
    """Mask of the n rows that a stable sort of `values` puts first (of equal values, the
    earlier rows), found by selection rather than by sorting."""
    mask = np.zeros(len(values), dtype=bool)
    if n <= 0 or len(values) == 0:
        return mask
    if n >= len(values):
        mask[:] = True
        return mask
    nth = np.partition(values, n - 1)[n - 1]
    mask = values < nth
    ties = np.flatnonzero(values == nth)
    mask[ties[: n - int(mask.sum())]] = True
    return mask


def _unify_dictionaries(schema: pa.Schema) -> pa.Schema:
    """Categorical columns as plain strings in the file: each point's categories differ."""
    fields = [
        pa.field(f.name, pa.string()) if pa.types.is_dictionary(f.type) else f for f in schema
    ]
    return pa.schema(fields)


class RunEvent(TypedDict):
    """One row of events.parquet (knee.runner.state.RunState.event): what the runner did
    or saw, when, in which point (-1: none) and to which node."""

    t_s: float
    point: int
    node: str
    kind: str
    detail: str


def write_table(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    """Writes rows (dicts) as Parquet, atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False, write_page_checksum=True)
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


#: Rows of one piece of `Run.point_batches` at most (about 30 MB in three columns).
BATCH_ROWS = 1 << 20
#: String columns read as dictionaries (pandas categories): a few distinct values each.
CATEGORY_COLUMNS = ("series", "node", "status")


@dataclass
class Run:
    """A run directory opened for analysis.

    Its samples are read on demand: `samples` is every sample of the run at once (read on
    first use and kept; for small runs), while `point_samples` and `iter_points` read one
    point at a time, only the columns asked for and only the rows a filter keeps, so their
    memory is bounded by the largest point, not by the run."""

    path: Path
    spec: dict[str, Any]
    env: dict[str, Any]
    summary: Summary
    timeseries: pd.DataFrame = field(repr=False)
    events: pd.DataFrame = field(repr=False)
    _samples: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def points(self) -> list[PointStats]:
        return list(self.summary.get("points", []))

    @property
    def answers(self) -> RunAnswers | SweepAnswers | None:
        """The run's answers per group of rates (capacity, SLO capacity, knee, what sets
        them: docs/find.md, "The answers"): a search's summary.json `find`, a sweep's
        `answers` (written at the end of `knee run`), or None (a run before either, or one
        with no rate to answer for)."""
        found = self.summary.get("find")
        if isinstance(found, dict):
            return found
        swept = self.summary.get("answers")
        return swept if isinstance(swept, dict) else None

    @property
    def samples(self) -> pd.DataFrame:
        """Every sample of the run in one DataFrame, read whole on first use (a 10-minute
        point at 80,000 requests/s is tens of GB this way: prefer `iter_points`)."""
        if self._samples is None:
            self._samples = _all_samples(self.path)
        return self._samples

    def sample_points(self) -> list[int]:
        """The points that have samples, in the order samples.parquet holds them."""
        if (self.path / SAMPLES).exists():
            return _parquet_points(self.path / SAMPLES)
        return [
            p for p, raws in by_point(read_manifest(self.path)).items() if _has_raw(self.path, raws)
        ]

    def point_samples(
        self,
        point: int,
        columns: Sequence[str] | None = None,
        where: pc.Expression | None = None,
    ) -> pd.DataFrame:
        """One point's samples: `columns` only (all when None), the rows `where` keeps (a
        pyarrow expression such as ``pc.field("status") == "ok"``). Reads samples.parquet
        with the point as a filter, so pyarrow skips the other points' row groups; a run
        without samples.parquet is read from raw/."""
        if self._samples is not None:  # already in memory: no need to read again
            return _select(self._samples[self._samples["point"] == point], columns, where)
        if (self.path / SAMPLES).exists():
            dataset = _dataset(self.path / SAMPLES)
            cond = pc.field("point") == point
            table = dataset.to_table(
                columns=None
                if columns is None
                else [c for c in columns if c in dataset.schema.names],
                filter=cond if where is None else cond & where,
            )
            # Columns convert one by one, each freed as it goes (half the peak of a copy).
            frame = table.to_pandas(split_blocks=True, self_destruct=True)
            del table
            pa.default_memory_pool().release_unused()  # the scan's buffers, back to the OS
            return frame
        raws = by_point(read_manifest(self.path)).get(point, [])
        return _select(point_frame(self.path, raws), columns, where)

    def point_batches(
        self,
        point: int,
        columns: Sequence[str] | None = None,
        where: pc.Expression | None = None,
    ) -> Iterator[pd.DataFrame]:
        """`point_samples` in pieces of at most BATCH_ROWS rows, in the file's order, as
        pyarrow's scanner streams them: for aggregates that add up piece by piece, in the
        memory of a piece however large the point. (From memory or raw/: one piece.)"""
        if self._samples is not None or not (self.path / SAMPLES).exists():
            yield self.point_samples(point, columns, where)
            return
        dataset = _dataset(self.path / SAMPLES)
        cond = pc.field("point") == point
        for batch in dataset.to_batches(
            columns=None if columns is None else [c for c in columns if c in dataset.schema.names],
            filter=cond if where is None else cond & where,
            batch_size=BATCH_ROWS,
        ):
            if batch.num_rows:
                yield batch.to_pandas()

    def iter_points(
        self, columns: Sequence[str] | None = None, where: pc.Expression | None = None
    ) -> Iterator[tuple[int, pd.DataFrame]]:
        """(point, its samples) for every point with samples, one point in memory at a time
        (see `point_samples`)."""
        for point in self.sample_points():
            yield point, self.point_samples(point, columns, where)


def _dataset(path: Path) -> ds.Dataset:
    fmt = ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(dictionary_columns=set(CATEGORY_COLUMNS)),
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(**VERIFY),
    )
    return ds.dataset(path, format=fmt)


def _parquet_points(path: Path) -> list[int]:
    """The points of samples.parquet from its row groups' statistics (each row group holds
    one point as write_samples writes it), else from its point column."""
    meta = pq.ParquetFile(path).metadata
    if meta.num_rows == 0:
        return []
    index = meta.schema.to_arrow_schema().get_field_index("point")
    if index < 0:
        return []
    points: list[int] = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(index).statistics
        if stats is None or not stats.has_min_max or stats.min != stats.max:
            column = pq.read_table(path, columns=["point"], **VERIFY)["point"].to_numpy()
            return list(dict.fromkeys(column.tolist()))  # first-seen order, no sort needed
        if stats.min not in points:
            points.append(int(stats.min))
    return points


def _has_raw(run_dir: Path, raws: list[RawFile]) -> bool:
    return any((run_dir / r.samples).exists() for r in raws)


def _select(
    df: pd.DataFrame, columns: Sequence[str] | None, where: pc.Expression | None
) -> pd.DataFrame:
    """An in-memory frame's `where` rows and `columns`, as `Run.point_samples` reads them."""
    if where is not None and len(df):
        table = pa.Table.from_pandas(df, preserve_index=False).filter(where)
        df = table.to_pandas()
    if columns is not None and len(df.columns) == 0:  # a point without samples
        return pd.DataFrame(columns=list(columns))
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    return df.reset_index(drop=True)


def _all_samples(run_dir: Path) -> pd.DataFrame:
    """Every sample of a run: samples.parquet, else rebuilt from raw/ (a crashed run)."""
    if (run_dir / SAMPLES).exists():
        samples = pd.read_parquet(run_dir / SAMPLES, **VERIFY)
        for col in CATEGORY_COLUMNS:
            if col in samples:
                samples[col] = samples[col].astype("category")
        return samples
    frames = [point_frame(run_dir, rs) for rs in by_point(read_manifest(run_dir)).values()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def node_lines(run_dir: Path, node: str, point: int) -> list[dict[str, Any]]:
    """A node's stdout lines (JSON events) of one point, every life of it (a restarted node
    appends), from nodes/<node>.pNNN.events.jsonl: [] when the run did not keep them."""
    path = run_dir / "nodes" / f"{node}.p{point:03d}.events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
        if isinstance(event, dict):
            out.append(event)
    return out


def open_run(path: str | os.PathLike[str]) -> Run:
    """Opens a run directory: summary, spec and environment, time series and events as
    DataFrames; the samples are read when asked for (`Run.samples`, `Run.iter_points`).

    Works on a run that crashed or was interrupted: missing samples.parquet is rebuilt from
    raw/, and missing tables come back empty.
    """
    import tomllib

    run_dir = Path(path)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: not a run directory")
    spec_path = run_dir / "spec.toml"
    spec = tomllib.loads(spec_path.read_text()) if spec_path.exists() else {}
    return Run(
        path=run_dir,
        spec=spec,
        env=_read_json(run_dir / "env.json"),
        summary=_read_summary(run_dir / SUMMARY),
        timeseries=_read_parquet(run_dir / TIMESERIES),
        events=_read_parquet(run_dir / EVENTS),
    )


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _read_summary(path: Path) -> Summary:
    """summary.json as the runner wrote it (knee.stats.summary.Summary), or empty."""
    return json.loads(path.read_text()) if path.exists() else {}


def _read_parquet(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path, **VERIFY) if path.exists() else pd.DataFrame()
