"""Each system's sample columns under the names its contract declares (docs/samples.md):
a run's frames and its samples.parquet say `epoch`, `attempts`, `http_status`,
`fail_reason`, holding the record's values unchanged, and the statistics are the same
numbers as under the record's names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from knee import contract, results
from knee.results import SAMPLE_DTYPE, RawFile
from knee.stats.point import PointSettings, point_stats

#: Records per file: enough for every statistic to have a value.
N = 500


def _records(seed: int) -> np.ndarray:
    """Records knee-node could write: ok replies with every system-specific field set."""
    rng = np.random.default_rng(seed)
    r = np.zeros(N, dtype=SAMPLE_DTYPE)
    r["request_id"] = np.arange(N)
    r["intended_ns"] = 1_000_000 + np.arange(N) * 1_000_000
    r["sent_ns"] = r["intended_ns"] + rng.integers(0, 1000, N)
    r["server_ns"] = rng.integers(1000, 100_000, N)
    r["received_ns"] = r["sent_ns"] + r["server_ns"] + rng.integers(1000, 10_000, N)
    r["service_ns"] = r["server_ns"] // 2
    r["queue_ns"] = r["server_ns"] // 4
    r["detail_ns"] = rng.integers(0, 50_000, N)
    r["arg"] = rng.integers(0, 20, N)
    r["flags"] = rng.integers(0, 600, N)
    r["status"] = rng.integers(0, 2, N)  # ok and timeout
    r["service"] = rng.integers(0, 3, N)
    return r


def _run_dir(tmp_path: Path, system: str, *, in_manifest: bool) -> tuple[Path, np.ndarray]:
    """A run directory of one point and one recorder of `system` (named in the manifest, or
    only in spec.toml as a manifest written before the rename has it)."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "spec.toml").write_text(f'[experiment]\nsystem = "{system}"\n')
    records = _records(len(system))
    raw = RawFile(0, "s", "load", "raw/p000-load.samples.bin", "", 0, 0, 10)
    records.tofile(tmp_path / raw.samples)
    row = dict(raw.__dict__, system=system)
    if not in_manifest:
        del row["system"]
    (tmp_path / results.MANIFEST).write_text(json.dumps(row) + "\n")
    return tmp_path, records


@pytest.mark.parametrize(
    ("system", "renamed"),
    [
        ("slices", {"detail_ns": "epoch", "flags": "attempts", "arg": "slice"}),
        ("chat", {"arg": "attempts"}),
        ("http", {"flags": "http_status", "arg": "fail_reason", "service_ns": "held_ns"}),
        ("grpc", {"flags": "grpc_status", "arg": "fail_reason", "service_ns": "held_ns"}),
        ("matrix", {}),
    ],
)
@pytest.mark.parametrize("in_manifest", [True, False])
def test_a_run_reads_and_writes_the_columns_its_system_names(
    tmp_path: Path, system: str, renamed: dict[str, str], in_manifest: bool
) -> None:
    assert contract.columns(system) == renamed  # the declaration these names come from
    run_dir, records = _run_dir(tmp_path, system, in_manifest=in_manifest)
    raws = results.read_manifest(run_dir)
    assert [r.system for r in raws] == [system]
    frame = results.point_frame(run_dir, raws)
    plain = results.point_frame(run_dir, [replace(raws[0], system="")])  # the record's names
    assert list(frame.columns) == [renamed.get(c, c) for c in plain.columns]
    for field, name in renamed.items():
        assert field not in frame.columns
        assert np.array_equal(frame[name].to_numpy(), records[field].astype(np.int64))
    # Crashed (read from raw/) and finished (samples.parquet) runs read alike.
    unwritten = results.open_run(run_dir).samples
    assert list(unwritten.columns) == list(frame.columns)
    assert results.write_samples(run_dir, raws) == N
    on_disk = pd.read_parquet(run_dir / results.SAMPLES)
    assert list(on_disk.columns) == list(frame.columns)
    for name in renamed.values():
        assert np.array_equal(on_disk[name].to_numpy(), frame[name].to_numpy())
        read = results.open_run(run_dir).point_samples(0, [name, "status"])
        assert np.array_equal(read[name].to_numpy(), frame[name].to_numpy())
    # The same statistics as under the record's names (the summary's keys stay those).
    hit = {"matrix": 1}.get(system)
    by_name = point_stats(
        frame, PointSettings(cache_hit_flag=hit, system=system, connections=2, timeout_ms=50)
    )
    by_field = point_stats(plain, PointSettings(cache_hit_flag=hit, connections=2, timeout_ms=50))
    assert by_name["detail_ns"] == by_field["detail_ns"] and by_name["detail_ns"]["n"] > 0
    if "service_ns" in renamed:
        # http's service_ns column is the wait for a free stream or connection (held_ns): the
        # summary keeps it as held_ns, and its service_ns is the server's time (docs/http2.md).
        assert by_name.pop("held_ns") == by_field["service_ns"]
        ok = (frame["status"] == "ok") & ~frame["warmup"]
        server = np.maximum(frame.loc[ok, "server_ns"].to_numpy(), 0)
        assert by_name.pop("service_ns")["mean"] == pytest.approx(server.mean())
        by_field.pop("service_ns")
    assert json.dumps(by_name, default=str) == json.dumps(by_field, default=str)
