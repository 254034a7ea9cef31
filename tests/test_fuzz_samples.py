"""The samples reader (knee.results) on bytes it was not meant to get: arbitrary files, and
a real knee-node sample file truncated or with bytes changed. Each read either gives the
file's own records, exactly as its bytes say (a partial last record left out), or raises
SamplesError naming the file and the record; it never crashes, and never turns a value it
cannot represent into another one (a u64 that would go negative in samples.parquet)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import RunLoad, Server, StartServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knee import results
from knee.results import SAMPLE_DTYPE, STATUS_NAMES, RawFile, SamplesError

RECORD_BYTES = SAMPLE_DTYPE.itemsize
NO_SERVER_TIME = 2**64 - 1
#: Examples per property: the reader is vectorized, so each costs a file write and a frame.
EXAMPLES = 100
#: The file is rewritten in place by every example, so a function-scoped tmp_path is fine.
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def read_or_refuse(path: Path, data: bytes) -> np.ndarray | None:
    """The records read from a file of `data`, checked to be its bytes; None if refused."""
    path.write_bytes(data)
    try:
        records = results.read_sample_records(path)
    except SamplesError as e:
        assert str(path) in str(e) and "record" in str(e)
        return None
    whole = len(data) - len(data) % RECORD_BYTES
    assert records.tobytes() == data[:whole], "the records are not the file's bytes"
    return records


def check_frame(records: np.ndarray) -> None:
    """An accepted file's frame: one row a record, every value as the record says."""
    frame = results.samples_frame(
        records, point=0, series="s", node="n", run_start_ns=0, warmup_end_ns=0
    )
    assert len(frame) == len(records)
    for name in ("intended_ns", "queue_ns", "service_ns", "detail_ns", "bytes_out", "bytes_in"):
        assert np.array_equal(frame[name].to_numpy(), records[name].astype(np.int64)), name
        assert (frame[name] >= 0).all(), name
    no_time = records["server_ns"] == np.uint64(NO_SERVER_TIME)
    assert np.array_equal(frame["server_ns"].to_numpy() == -1, no_time)
    assert frame["status"].notna().all()
    assert np.array_equal(frame["status"].cat.codes.to_numpy(), records["status"])


@pytest.fixture
def real_samples(start_server: StartServer, run_load: RunLoad) -> bytes:
    """A sample file written by a real knee-node (echo, 200 requests)."""
    server: Server = start_server("echo", {"threads": 0})
    schedule = {"kind": "poisson", "rate_per_s": 2000.0}
    run = run_load("echo", server.addr, schedule, requests=200, seed=3)
    data = run.samples_path.read_bytes()
    assert len(data) == 200 * RECORD_BYTES
    return data


@FUZZ
@given(data=st.binary(max_size=8 * RECORD_BYTES))
def test_arbitrary_bytes_are_read_as_they_are_or_refused(tmp_path: Path, data: bytes) -> None:
    records = read_or_refuse(tmp_path / "x.samples.bin", data)
    if records is not None:
        assert len(records) == len(data) // RECORD_BYTES
        check_frame(records)


def valid_record() -> st.SearchStrategy[tuple[int, ...]]:
    """One record's fields as knee-node can write them (SAMPLE_DTYPE order, pad 0)."""
    ns = st.integers(0, 2**63 - 1)
    return st.tuples(
        st.integers(0, 2**64 - 1),  # request_id: any u64
        ns,
        ns,
        ns,
        st.one_of(ns, st.just(NO_SERVER_TIME)),
        ns,
        ns,
        ns,
        ns,
        ns,
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**16 - 1),
        st.integers(0, 2**16 - 1),
        st.integers(0, len(STATUS_NAMES) - 1),
        st.integers(0, 255),
        st.just(0),
    )


@FUZZ
@given(rows=st.lists(valid_record(), max_size=20))
def test_every_record_knee_node_can_write_is_read_back(
    tmp_path: Path, rows: list[tuple[int, ...]]
) -> None:
    data = np.array(rows, dtype=SAMPLE_DTYPE).tobytes()
    records = read_or_refuse(tmp_path / "x.samples.bin", data)
    assert records is not None, "a valid file was refused"
    check_frame(records)


def test_a_real_file_truncated_or_changed(tmp_path: Path, real_samples: bytes) -> None:
    path = tmp_path / "x.samples.bin"
    assert read_or_refuse(path, real_samples) is not None

    @FUZZ
    @given(
        cut=st.integers(0, len(real_samples)),
        changes=st.lists(
            st.tuples(st.integers(0, len(real_samples) - 1), st.integers(1, 255)), max_size=6
        ),
    )
    def mutated(cut: int, changes: list[tuple[int, int]]) -> None:
        data = bytearray(real_samples)
        for at, xor in changes:
            data[at] ^= xor
        records = read_or_refuse(path, bytes(data[:cut]))
        if records is not None:
            check_frame(records)

    mutated()


def test_a_corrupt_raw_file_stops_write_samples_and_leaves_no_parquet(
    tmp_path: Path, real_samples: bytes
) -> None:
    """The run directory's path (raw/ to samples.parquet) refuses a corrupt raw file with
    SamplesError and writes no samples.parquet; an intact one converts every record."""
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    raw = RawFile(
        point=0,
        series="s",
        node="n",
        samples="raw/p000-n.samples.bin",
        histogram="raw/p000-n.histogram.csv",
        run_start_ns=0,
        warmup_end_ns=0,
    )
    (tmp_path / raw.samples).write_bytes(real_samples)
    assert results.write_samples(tmp_path, [raw]) == 200
    assert len(pd.read_parquet(tmp_path / results.SAMPLES)) == 200
    (tmp_path / results.SAMPLES).unlink()

    corrupt = bytearray(real_samples)
    corrupt[150 * RECORD_BYTES + 94] = 1  # record 150's pad
    (tmp_path / raw.samples).write_bytes(bytes(corrupt))
    with pytest.raises(SamplesError, match=r"record 150 \(byte 14400\) has pad = 1"):
        results.write_samples(tmp_path, [raw])
    assert not (tmp_path / results.SAMPLES).exists()
    assert not (tmp_path / (results.SAMPLES + ".tmp")).exists()
    corrupt[150 * RECORD_BYTES + 94] = 0
    corrupt[7 * RECORD_BYTES + 23] = 0x80  # record 7's sent_ns >= 2^63
    (tmp_path / raw.samples).write_bytes(bytes(corrupt))
    with pytest.raises(SamplesError, match="record 7 .* sent_ns"):
        results.read_sample_records(tmp_path / raw.samples)
