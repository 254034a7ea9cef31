"""`knee report` and `knee compare` on what is not a readable run: a directory that is not a
run, an empty one, a run with files missing, cut short or garbage, and two runs with no point
in common. Each is refused with exit 2 and a clear message (one line, or for compare one line
per run saying what it has), and nothing in the directory changes: every file is hashed before
and after.

The runs are real (two small echo runs); the damage is done to copies of them. Most cases call
the command's entry point (`knee.cli.main`) in this process, to keep the suite fast; a few run
the real command."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from report_helpers import run_knee, run_specs_at_once

import knee
from knee import cli
from knee.report.rundir import RunDirError, check

# One closed-loop point of 300 requests: a real run in a few seconds. B's series has another
# name, so A and B have no point in common.
SPEC = """
[experiment]
name = "echo-{tag}"
system = "echo"

[load]
schedule = "closed"
clients = 2
think_ms = 0.2
requests = 300
warmup_s = 0
warmup_requests = 20

[series.{series}]
"""
#: Each run's series.
TAGS = {"a": "closed", "b": "other"}


#: The runs by name: A and B, made at the same time.
Runs = dict[str, Path]


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    specs = {tag: SPEC.format(tag=tag, series=series) for tag, series in TAGS.items()}
    return run_specs_at_once(tmp_path_factory.mktemp("refused-runs"), specs, "--no-report")


def hashes(root: Path) -> dict[str, str]:
    """Every file under root (and every directory, as an empty entry) by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(root.rglob("*"))
    }


def report(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`knee report RUN` in this process: its exit code and its stderr lines."""
    capsys.readouterr()
    code = cli.main(["report", str(run_dir)])
    return code, capsys.readouterr().err.splitlines()


# ------------------------------------------------------------------ damage, one kind each


def _cut(name: str, keep: float) -> Callable[[Path], None]:
    def cut(run_dir: Path) -> None:
        path = run_dir / name
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return cut


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda run_dir: (run_dir / name).write_bytes(data)


def _remove(*names: str) -> Callable[[Path], None]:
    def remove(run_dir: Path) -> None:
        for name in names:
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    return remove


def _bin_files(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "raw").glob("*.samples.bin"))


#: Damage -> (what it does to a copy of run A, what the one line must say).
DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "no-spec": (_remove("spec.toml"), "spec.toml is missing"),
    "no-summary": (_remove("summary.json"), "summary.json is missing"),
    "no-samples": (_remove("samples.parquet", "raw"), "the samples are missing"),
    "samples-cut-short": (_cut("samples.parquet", 0.5), "samples.parquet is damaged or cut short"),
    "samples-garbage": (_write("samples.parquet", b"PAR1" + b"\xff" * 64), "samples.parquet"),
    "summary-cut-short": (_cut("summary.json", 0.5), "summary.json is not JSON"),
    "summary-garbage": (_write("summary.json", b"\x89PNG\r\n\x1a\n"), "summary.json is not"),
    "summary-not-object": (_write("summary.json", b"[1, 2]"), "summary.json is not a JSON object"),
    "summary-bad-points": (
        _write("summary.json", b'{"points": [{"label": "x"}]}'),
        "points[0] has no point number",
    ),
    "env-garbage": (_write("env.json", b"{not json"), "env.json is not JSON"),
    "plan-garbage": (_write("plan.json", b"\x00\x01"), "plan.json is not"),
    "spec-garbage": (_write("spec.toml", b"[experiment\n"), "spec.toml is not TOML"),
    "timeseries-cut-short": (_cut("timeseries.parquet", 0.3), "timeseries.parquet is damaged"),
    "manifest-garbage": (_write("raw/manifest.jsonl", b"{]\n"), "manifest.jsonl line 1 is not"),
    "manifest-escapes": (
        _write(
            "raw/manifest.jsonl",
            json.dumps(
                {
                    "point": 0,
                    "series": "s",
                    "node": "n",
                    "samples": "../../etc/passwd",
                    "histogram": "h",
                    "run_start_ns": 0,
                    "warmup_end_ns": 0,
                }
            ).encode()
            + b"\n",
        ),
        "names no sample file of this run",
    ),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_run_is_refused_in_one_line_and_left_unchanged(
    kind: str, runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(runs["a"], run_dir)
    damage, message = DAMAGE[kind]
    damage(run_dir)
    before = hashes(run_dir)
    code, lines = report(run_dir, capsys)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(f"knee: {run_dir}: "), lines
    assert message in lines[0], lines
    assert hashes(run_dir) == before, "a refused run directory was changed"


def test_a_damaged_page_of_the_samples_is_refused_not_read_as_samples(
    runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One byte of the latency column of samples.parquet changed so that it still decodes,
    as other latencies: the footer is intact and nothing but the page's checksum (written by
    knee.results, checked on every read) tells. The report must refuse it, not draw it."""
    run_dir = tmp_path / "run"
    shutil.copytree(runs["a"], run_dir)
    path = run_dir / "samples.parquet"
    original = pq.read_table(path, columns=["latency_ns"])
    meta = pq.ParquetFile(path).metadata
    names = [meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)]
    chunk = meta.row_group(0).column(names.index("latency_ns"))
    clean = path.read_bytes()
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    for at in reversed(range(first, first + chunk.total_compressed_size)):  # the values last
        data = bytearray(clean)
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        try:  # read as a reader without checksums would
            damaged = pq.read_table(path, columns=["latency_ns"], page_checksum_verification=False)
        except OSError:
            continue
        if not damaged.equals(original):
            break
    else:
        pytest.fail("no byte of the column decodes to other latencies")
    before = hashes(run_dir)
    code, lines = report(run_dir, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"knee: {run_dir}: a run's data cannot be read, a file is damaged")
    assert "CRC checksum verification failed" in lines[0], lines
    assert hashes(run_dir) == before


def test_not_a_run_and_an_empty_directory_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Today's bug: `knee report /tmp` wrote /tmp/report.html with 0 figures.
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "notes.txt").write_text("not a run\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for path, what in ((other, "not a run directory"), (empty, "an empty directory")):
        before = hashes(path)
        code, lines = report(path, capsys)
        assert code == 2 and len(lines) == 1, lines
        assert lines[0].startswith(f"knee: {path}: {what}: no spec.toml and no summary.json")
        assert "holds spec.toml, summary.json" in lines[0], "say what a run directory holds"
        assert hashes(path) == before
    code, lines = report(tmp_path / "missing", capsys)
    assert code == 2 and lines == [f"knee: {tmp_path / 'missing'}: no such directory"]


def test_a_killed_runs_partial_record_is_still_a_run(runs: Runs, tmp_path: Path) -> None:
    """A run killed mid-write has no samples.parquet and a raw file ending in part of a
    record: it is a run (the partial record left out when read), not refused."""
    run_dir = tmp_path / "run"
    shutil.copytree(runs["a"], run_dir)
    (run_dir / "samples.parquet").unlink()
    raw = _bin_files(run_dir)[0]
    whole = raw.stat().st_size // 96
    raw.write_bytes(raw.read_bytes()[: whole * 96 - 40])  # the last record cut in two
    check(run_dir)
    assert len(knee.open_run(run_dir).samples) == whole - 1


# ------------------------------------------------------------------ damage drawn at random

#: Files the report reads, each a target of random damage.
READ = ("spec.toml", "summary.json", "env.json", "plan.json", "samples.parquet")


@settings(
    max_examples=int(os.environ.get("KNEE_RUNDIR_FUZZ_EXAMPLES", "8")),
    derandomize=not os.environ.get("KNEE_RUNDIR_FUZZ_EXAMPLES"),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(READ),
    at=st.floats(0, 1),
    how=st.sampled_from(["truncate", "flip", "zero"]),
    xor=st.integers(1, 255),
)
# Found by this test: the first bytes of samples.parquet zeroed (the footer intact) made
# pyarrow raise an OSError, which the report took for a bug of its own (exit 4).
@example(name="samples.parquet", at=0.0, how="zero", xor=1)
def test_random_damage_is_reported_or_refused_never_a_traceback(
    runs: Runs,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    name: str,
    at: float,
    how: str,
    xor: int,
) -> None:
    """Damage anywhere in a file the report reads: the report is written (the damage did not
    matter to it) or refused with exit 2 in one line with the directory unchanged; never a
    failed report (exit 4, a traceback)."""
    run_dir = tmp_path_factory.mktemp("fuzz") / "run"
    shutil.copytree(runs["a"], run_dir)
    path = run_dir / name
    data = bytearray(path.read_bytes())
    i = min(int(at * len(data)), len(data) - 1)
    if how == "truncate":
        del data[i:]
    elif how == "flip":
        data[i] ^= xor
    else:
        data[i : i + 64] = bytes(len(data[i : i + 64]))
    path.write_bytes(bytes(data))
    before = hashes(run_dir)
    code, lines = report(run_dir, capsys)
    assert code in (0, 2), lines
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith(f"knee: {run_dir}: "), lines
        assert hashes(run_dir) == before
    else:
        changed = {k for k, v in hashes(run_dir).items() if before.get(k) != v}
        assert changed and all(k == "report.html" or k.startswith("figures") for k in changed)


# ------------------------------------------------------------------ compare, and the real command


def test_compare_with_nothing_in_common_says_so_and_shows_each_runs_points(
    runs: Runs, tmp_path: Path
) -> None:
    """The real command. Today's bug: exit 0 and an empty page."""
    out = tmp_path / "cmp"
    before = {run: hashes(run) for run in (runs["a"], runs["b"])}
    res = run_knee("compare", str(runs["a"]), str(runs["b"]), "--out", str(out))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert lines == [
        "knee: nothing to compare: no point of A has the label of a point of B",
        f"knee: A ({runs['a']}) has 1 points: 'closed'",
        f"knee: B ({runs['b']}) has 1 points: 'other'",
    ], res.stderr
    assert not out.exists(), "an empty comparison was written"
    assert {run: hashes(run) for run in before} == before


def test_the_real_command_refuses_a_damaged_run_in_one_line(runs: Runs, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(runs["a"], run_dir)
    _cut("samples.parquet", 0.5)(run_dir)
    before = hashes(run_dir)
    res = run_knee("report", str(run_dir))
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"knee: {run_dir}: samples.parquet is damaged or cut short")
    assert hashes(run_dir) == before


def test_compare_refuses_a_damaged_run_in_one_line(
    runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(runs["a"], run_dir)
    (run_dir / "summary.json").write_bytes(b'{"points": [')
    before = hashes(run_dir)
    capsys.readouterr()
    code = cli.main(["compare", str(runs["b"]), str(run_dir), "--out", str(tmp_path / "cmp")])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"knee: {run_dir}: summary.json is not JSON")
    assert hashes(run_dir) == before and not (tmp_path / "cmp").exists()


def test_the_check_names_the_first_problem(runs: Runs, tmp_path: Path) -> None:
    """In-process: the check itself, on an intact run and on a copy with two problems."""
    check(runs["a"])
    run_dir = tmp_path / "run"
    shutil.copytree(runs["a"], run_dir)
    (run_dir / "summary.json").write_text("{")
    (run_dir / "env.json").write_text("{")
    with pytest.raises(RunDirError, match=r"summary\.json is not JSON"):
        check(run_dir)
