"""Tests of knee.spec: loading, defaults, presets, sweeps, series and error messages."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from knee.spec import SpecError, load_spec
from knee.systems import SYSTEMS
from knee.systems.base import plan_nodes
from knee.toml_writer import dump_toml

HEAD = """
[experiment]
name = "m"
system = "matrix"
"""

# A complete, valid matrix spec; tests append tables or replace lines.
BASE = (
    HEAD
    + """
[server]
threads = 1

[load]
schedule = "poisson"
rate_per_s = 10
duration_s = 20

[driver]
p_min = 500
p_max = 1000
"""
)


def write(tmp_path: Path, text: str, name: str = "m.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error(tmp_path: Path, text: str, preset: str | None = None) -> SpecError:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path, preset)
    err = info.value
    assert err.path == str(path)
    assert str(err) == f"{path}: {err.key}: {err.message}"
    assert "\n" not in str(err)
    return err


def check(err: SpecError, key: str, message: str) -> None:
    """The key exactly, and the message exactly (or its start, when message ends with '...')."""
    assert err.key == key, str(err)
    if message.endswith("..."):
        assert err.message.startswith(message[:-3]), str(err)
    else:
        assert err.message == message, str(err)


# ---------------------------------------------------------------- valid specs


def test_defaults_filled(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, BASE))
    assert spec.path == str(tmp_path / "m.toml")
    assert spec.preset is None and spec.presets == []
    assert spec.experiment == {
        "name": "m",
        "system": "matrix",
        "description": "",
        "seed": 1,
        "slo": None,
    }
    assert len(spec.points) == 1
    point = spec.points[0]
    assert point.index == 0 and point.series == "main" and point.swept == {}
    assert point.label == "main"
    assert point.experiment == spec.experiment
    assert point.server == {"algorithm": "naive", "threads": 1, "cache": 0, "max_queue": 100_000}
    assert point.load["rate_per_s"] == 10.0 and isinstance(point.load["rate_per_s"], float)
    assert point.load["duration_s"] == 20.0
    assert point.load["clients"] == 1 and point.load["timeout_ms"] == 5000.0
    assert point.load["warmup_s"] == 1.0 and point.load["warmup_requests"] == 0
    assert point.load["requests"] is None and point.load["steps"] is None
    assert point.driver == {"n": 50, "same_matrix": True, "p": None, "p_min": 500, "p_max": 1000}
    # resolved: every default, no None values
    assert spec.resolved["driver"] == {"n": 50, "same_matrix": True, "p_min": 500, "p_max": 1000}
    assert "requests" not in spec.resolved["load"]
    assert spec.resolved["load"]["max_outstanding"] == 100_000
    assert set(spec.resolved) == {"experiment", "server", "load", "driver"}


def test_echo_system_and_optional_sections(tmp_path: Path) -> None:
    text = '[experiment]\nname = "e"\nsystem = "echo"\n[load]\nrate_per_s = 1.5\nrequests = 100\n'
    spec = load_spec(write(tmp_path, text))
    point = spec.points[0]
    assert point.server == {"threads": 0}
    assert point.driver == {"request_bytes": 16, "reply_bytes": 16}
    assert point.load["requests"] == 100 and point.load["duration_s"] is None


def test_steps_default_duration(tmp_path: Path) -> None:
    text = BASE.replace('schedule = "poisson"', 'schedule = "steps"\nsteps = [[10, 5], [20, 2.5]]')
    text = text.replace("duration_s = 20\n", "")
    point = load_spec(write(tmp_path, text)).points[0]
    assert point.load["steps"] == [[10.0, 5.0], [20.0, 2.5]]
    assert point.load["duration_s"] == 7.5


def test_closed_loop_with_requests(tmp_path: Path) -> None:
    text = BASE.replace('schedule = "poisson"', 'schedule = "closed"\nclients = 8')
    text = text.replace("duration_s = 20", "requests = 1000").replace("rate_per_s = 10\n", "")
    point = load_spec(write(tmp_path, text)).points[0]
    assert point.load["schedule"] == "closed" and point.load["clients"] == 8


def test_sweep_cartesian_product_in_written_order(tmp_path: Path) -> None:
    text = BASE + '[sweep]\n"load.rate_per_s" = [5, 10, 20]\n"server.threads" = [1, 2]\n'
    spec = load_spec(write(tmp_path, text))
    assert [p.index for p in spec.points] == list(range(6))
    assert [(p.load["rate_per_s"], p.server["threads"]) for p in spec.points] == [
        (5.0, 1),
        (5.0, 2),
        (10.0, 1),
        (10.0, 2),
        (20.0, 1),
        (20.0, 2),
    ]
    assert spec.points[3].swept == {"load.rate_per_s": 10.0, "server.threads": 2}
    assert spec.points[3].label == "main rate_per_s=10 threads=2"
    assert spec.resolved["sweep"] == {
        "load.rate_per_s": [5.0, 10.0, 20.0],
        "server.threads": [1, 2],
    }


def test_sweep_accepts_dotted_keys(tmp_path: Path) -> None:
    text = BASE + "[sweep]\nload.rate_per_s = [5, 10]\ndriver.n = [10, 20]\n"
    spec = load_spec(write(tmp_path, text))
    assert [p.label for p in spec.points] == [
        "main rate_per_s=5 n=10",
        "main rate_per_s=5 n=20",
        "main rate_per_s=10 n=10",
        "main rate_per_s=10 n=20",
    ]


def test_series_inherit_and_sweep(tmp_path: Path) -> None:
    text = (
        BASE
        + """
[series.rate]
description = "rate only"
sweep = { "load.rate_per_s" = [1, 2] }

[series.cached]
server = { cache = 200 }
load = { duration_s = 5 }
sweep = { "server.threads" = [1, 2, 4] }

[series.single]
driver = { p_min = 7, p_max = 7 }
"""
    )
    spec = load_spec(write(tmp_path, text))
    assert [(p.index, p.series) for p in spec.points] == [
        (0, "rate"),
        (1, "rate"),
        (2, "cached"),
        (3, "cached"),
        (4, "cached"),
        (5, "single"),
    ]
    rate, cached, single = spec.points[1], spec.points[4], spec.points[5]
    assert rate.load["rate_per_s"] == 2.0 and rate.load["duration_s"] == 20.0
    assert rate.server["cache"] == 0 and rate.driver["p_min"] == 500
    assert rate.label == "rate rate_per_s=2"
    assert cached.server == {"algorithm": "naive", "threads": 4, "cache": 200, "max_queue": 100_000}
    assert cached.load["duration_s"] == 5.0 and cached.load["rate_per_s"] == 10.0
    assert cached.label == "cached threads=4"
    assert single.swept == {} and single.label == "single"
    assert (single.driver["p_min"], single.driver["p_max"]) == (7, 7)
    assert spec.resolved["series"]["rate"] == {
        "description": "rate only",
        "sweep": {"load.rate_per_s": [1.0, 2.0]},
    }
    assert spec.resolved["series"]["cached"]["server"] == {"cache": 200}
    assert "sweep" not in spec.resolved


def test_series_rule_errors_name_the_series(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "[series.a]\n[series.b]\ndriver = { p = 3 }\n")
    check(err, "series.b.driver.p", "give either p or both p_min and p_max, not both forms")


def test_series_does_not_inherit_top_level_sweep(tmp_path: Path) -> None:
    text = BASE + '[sweep]\n"load.rate_per_s" = [5, 10]\n[series.a]\n'
    check(error(tmp_path, text), "sweep", "a top-level [sweep] cannot be used with [series]; ...")
    assert "sweeps belong in each series" in error(tmp_path, text).message


def test_preset_deep_merge(tmp_path: Path) -> None:
    text = (
        BASE
        + """
[series.rate]
server = { cache = 10, threads = 2 }
sweep = { "load.rate_per_s" = [1, 2, 3, 4] }

[presets.quick.load]
duration_s = 5

[presets.quick.series.rate.server]
cache = 20

[presets.quick.series.rate.sweep]
"load.rate_per_s" = [10, 20]

[presets.other]
experiment = { seed = 9 }
"""
    )
    plain = load_spec(write(tmp_path, text))
    assert len(plain.points) == 4 and plain.presets == ["quick", "other"]
    assert plain.points[0].load["duration_s"] == 20.0

    quick = load_spec(tmp_path / "m.toml", "quick")
    assert quick.preset == "quick"
    assert [p.load["rate_per_s"] for p in quick.points] == [10.0, 20.0]  # lists replace
    assert quick.points[0].load["duration_s"] == 5.0
    assert quick.points[0].load["schedule"] == "poisson"  # tables merge
    assert quick.points[0].server["cache"] == 20 and quick.points[0].server["threads"] == 2
    assert "presets" not in quick.resolved
    assert quick.resolved["series"]["rate"]["sweep"] == {"load.rate_per_s": [10.0, 20.0]}

    assert load_spec(tmp_path / "m.toml", "other").experiment["seed"] == 9


def test_unknown_preset(tmp_path: Path) -> None:
    text = BASE + "[presets.quick]\nload = { duration_s = 5 }\n[presets.long]\n"
    err = error(tmp_path, text, preset="fast")
    check(err, "presets", "unknown preset 'fast'; available: quick, long")
    check(error(tmp_path, BASE, preset="fast"), "presets", "unknown preset 'fast'; ...")


def test_preset_errors(tmp_path: Path) -> None:
    text = BASE + "[presets.quick.load]\nrate_per_s = -1\n"
    err = error(tmp_path, text, preset="quick")
    check(err, "load.rate_per_s", "expected a number > 0 ...")
    assert err.message.endswith("got -1 (integer) (from preset 'quick')")
    load_spec(tmp_path / "m.toml")  # the bad preset is not used

    text = BASE + "[presets.quick.presets.x]\n"
    check(error(tmp_path, text), "presets.quick.presets", "a preset cannot contain presets")
    check(error(tmp_path, "presets = 3\n" + BASE), "presets", "expected a table, got 3 (integer)")


# ---------------------------------------------------------------- errors


def test_unknown_key(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace("rate_per_s = 10", "rat_per_s = 10"))
    check(err, "load.rat_per_s", "unknown key; expected one of: schedule, rate_per_s, steps, ...")
    assert err.message.endswith("(did you mean 'rate_per_s'?)")


def test_unknown_section(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "[lod]\nrate_per_s = 3\n")
    check(
        err,
        "lod",
        "unknown section; expected one of: experiment, server, load, driver, sweep, series, "
        "events, hosts, placement, limits, presets (did you mean 'load'?)",
    )
    check(error(tmp_path, "load2 = 3\n" + BASE), "load2", "unknown section; ...")


def test_section_not_a_table(tmp_path: Path) -> None:
    check(
        error(tmp_path, "server = 3\n" + BASE[: BASE.index("[server]")]),
        "server",
        "expected a table, got 3 (integer)",
    )


@pytest.mark.parametrize(
    ("old", "new", "key", "message"),
    [
        (
            "rate_per_s = 10",
            'rate_per_s = "fast"',
            "load.rate_per_s",
            "expected a number > 0 and <= 1e+07, got 'fast' (string)",
        ),
        (
            "threads = 1",
            "threads = 1.5",
            "server.threads",
            "expected an integer >= 1 and <= 256, got 1.5 (float)",
        ),
        (
            "threads = 1",
            "threads = true",
            "server.threads",
            "expected an integer >= 1 and <= 256, got true (boolean)",
        ),
        (
            "threads = 1",
            "threads = 0",
            "server.threads",
            "expected an integer >= 1 and <= 256, got 0 (integer)",
        ),
        (
            "threads = 1",
            "threads = 300",
            "server.threads",
            "expected an integer >= 1 and <= 256, got 300 (integer)",
        ),
        (
            "rate_per_s = 10",
            "rate_per_s = 0",
            "load.rate_per_s",
            "expected a number > 0 and <= 1e+07, got 0 (integer)",
        ),
        (
            "rate_per_s = 10",
            "rate_per_s = inf",
            "load.rate_per_s",
            "expected a number > 0 and <= 1e+07, got inf (float)",
        ),
        (
            "duration_s = 20",
            "duration_s = [20]",
            "load.duration_s",
            "expected a number > 0 and <= 86400, got [20] (array)",
        ),
        ('name = "m"', "name = 3", "experiment.name", "expected a string, got 3 (integer)"),
        (
            "threads = 1",
            'threads = 1\nalgorithm = "fast"',
            "server.algorithm",
            "expected one of 'naive', 'squaring', got 'fast' (string)",
        ),
        (
            'schedule = "poisson"',
            'schedule = "posson"',
            "load.schedule",
            "expected one of 'poisson', 'constant', 'steps', 'closed', got 'posson' (string)",
        ),
        (
            "p_max = 1000",
            "p_max = 1000\nsame_matrix = 1",
            "driver.same_matrix",
            "expected true or false, got 1 (integer)",
        ),
        ('schedule = "poisson"', "steps = 5", "load.steps", "expected a list, got 5 (integer)"),
        (
            'name = "m"',
            "name = 1979-05-27",
            "experiment.name",
            "expected a string, got 1979-05-27 (date)",
        ),
    ],
)
def test_wrong_value(tmp_path: Path, old: str, new: str, key: str, message: str) -> None:
    assert old in BASE
    check(error(tmp_path, BASE.replace(old, new, 1)), key, message)


def test_missing_required(tmp_path: Path) -> None:
    check(error(tmp_path, BASE.replace('name = "m"', "")), "experiment.name", "missing (a string)")
    no_experiment = BASE.replace(HEAD, "")
    check(error(tmp_path, no_experiment), "experiment.name", "missing (a string)")


def test_unknown_system(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace('system = "matrix"', 'system = "kv"'))
    # Every registered system is listed (systems are added in parallel branches).
    names = ", ".join(SYSTEMS)
    check(err, "experiment.system", f"unknown system 'kv'; expected one of: {names}")


def test_rate_needed(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace("rate_per_s = 10\n", ""))
    check(err, "load.rate_per_s", "missing (schedule 'poisson' needs a number > 0 and <= 1e+07)")
    text = BASE.replace("rate_per_s = 10\n", "").replace('"poisson"', '"constant"')
    check(error(tmp_path, text), "load.rate_per_s", "missing (schedule 'constant' needs ...")


def test_duration_or_requests_needed(tmp_path: Path) -> None:
    err = error(tmp_path, BASE.replace("duration_s = 20\n", ""))
    check(err, "load.duration_s", "missing: give duration_s or requests (schedule 'poisson')")
    text = BASE.replace("duration_s = 20\n", "").replace('"poisson"', '"closed"')
    check(error(tmp_path, text), "load.duration_s", "missing: give duration_s or requests ...")


@pytest.mark.parametrize(
    ("steps", "key", "message"),
    [
        (None, "load.steps", "missing (schedule 'steps' needs a non-empty list of ..."),
        (
            "[]",
            "load.steps",
            "expected a non-empty list of [rate_per_s, duration_s] pairs, got [] (array)",
        ),
        (
            "[[10, 5], [20]]",
            "load.steps[1]",
            "expected a [rate_per_s, duration_s] pair, got [20] (array)",
        ),
        (
            "[[10, 5], 3]",
            "load.steps[1]",
            "expected a [rate_per_s, duration_s] pair, got 3 (integer)",
        ),
        ("[[0, 5]]", "load.steps[0][0]", "expected a number > 0 and <= 1e+07, got 0 (integer)"),
        (
            '[[10, "5s"]]',
            "load.steps[0][1]",
            "expected a number > 0 and <= 86400, got '5s' (string)",
        ),
        (
            "[[10, 50000], [10, 50000]]",
            "load.steps",
            "steps last 100000 s; expected a number > 0 and <= 86400",
        ),
    ],
)
def test_bad_steps(tmp_path: Path, steps: str | None, key: str, message: str) -> None:
    new = 'schedule = "steps"' + ("" if steps is None else f"\nsteps = {steps}")
    text = BASE.replace('schedule = "poisson"', new).replace("duration_s = 20\n", "")
    check(error(tmp_path, text), key, message)


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        (
            BASE + '[sweep]\n"load.foo" = [1, 2]\n',
            "sweep.load.foo",
            "sweep over unknown parameter 'load.foo'",
        ),
        (
            BASE + '[sweep]\n"load.rate" = [1, 2]\n',
            "sweep.load.rate",
            "sweep over unknown parameter 'load.rate' (did you mean 'load.rate_per_s'?)",
        ),
        (
            BASE + '[sweep]\n"experiment.seed" = [1, 2]\n',
            "sweep.experiment.seed",
            "sweep over unknown parameter 'experiment.seed'; "
            "keys are server.KEY, load.KEY or driver.KEY",
        ),
        (
            BASE + "[sweep]\nrate_per_s = [1, 2]\n",
            "sweep.rate_per_s",
            "sweep over unknown parameter 'rate_per_s'; ...",
        ),
        (
            BASE + '[sweep]\n"load.rate_per_s" = [1, 2, "x"]\n',
            "sweep.load.rate_per_s[2]",
            "expected a number > 0 and <= 1e+07, got 'x' (string)",
        ),
        (
            BASE + '[series.rate]\nsweep = { "load.rate_per_s" = [1, 2, -3] }\n',
            "series.rate.sweep.load.rate_per_s[2]",
            "expected a number > 0 and <= 1e+07, got -3 (integer)",
        ),
        (
            BASE + '[sweep]\n"server.threads" = [1, 2, 1]\n',
            "sweep.server.threads[2]",
            "1 is swept twice",
        ),
        (
            BASE + '[sweep]\n"load.rate_per_s" = 5\n',
            "sweep.load.rate_per_s",
            "expected a non-empty list of values, got 5 (integer)",
        ),
        (
            BASE + '[sweep]\n"load.rate_per_s" = []\n',
            "sweep.load.rate_per_s",
            "expected a non-empty list of values, got [] (array)",
        ),
        ("sweep = 3\n" + BASE, "sweep", "expected a table, got 3 (integer)"),
    ],
    ids=[
        "unknown",
        "unknown-did-you-mean",
        "unknown-section",
        "unknown-no-section",
        "bad-element",
        "bad-element-in-series",
        "swept-twice",
        "not-a-list",
        "empty",
        "not-a-table",
    ],
)
def test_bad_sweep(tmp_path: Path, text: str, key: str, message: str) -> None:
    check(error(tmp_path, text), key, message)


def test_sweep_points_get_cross_field_rules(tmp_path: Path) -> None:
    text = (
        BASE.replace("duration_s = 20\n", "") + '[sweep]\n"load.schedule" = ["steps", "poisson"]\n'
    )
    err = error(tmp_path, text)
    check(
        err,
        "load.steps",
        "missing (schedule 'steps' needs a non-empty list of [rate_per_s, duration_s] pairs) "
        "(in sweep point load.schedule='steps')",
    )
    text = BASE + '[series.s]\nsweep = { "driver.p_min" = [500, 2000] }\n'
    err = error(tmp_path, text)
    check(
        err,
        "series.s.driver.p_min",
        "p_min (2000) must be <= p_max (1000) (in sweep point driver.p_min=2000)",
    )


def test_series_errors(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "[series.rate]\nserver = { threads = 0 }\n")
    check(err, "series.rate.server.threads", "expected an integer >= 1 and <= 256, got 0 (integer)")
    err = error(tmp_path, BASE + "[series.rate]\nserver = { thread = 2 }\n")
    check(err, "series.rate.server.thread", "unknown key; expected one of: algorithm, threads, ...")
    err = error(tmp_path, BASE + "[series.rate]\nsweeps = {}\n")
    check(
        err,
        "series.rate.sweeps",
        "unknown key; expected one of: description, server, load, driver, sweep, placement "
        "(did you mean 'sweep'?)",
    )
    err = error(tmp_path, BASE + "[series.rate]\nload = 3\n")
    check(err, "series.rate.load", "expected a table, got 3 (integer)")
    err = error(tmp_path, BASE + '[series."a b"]\n')
    check(err, "series.a b", "a series name may only contain letters, digits, '-' and '_'")
    check(
        error(tmp_path, BASE + "[series]\n"), "series", "expected at least one [series.NAME] table"
    )


@pytest.mark.parametrize(
    ("driver", "key", "message"),
    [
        (
            "p = 5\np_min = 1\np_max = 2",
            "driver.p",
            "give either p or both p_min and p_max, not both forms",
        ),
        ("p = 5\np_max = 2", "driver.p", "give either p or both p_min and p_max, not both forms"),
        ("", "driver.p", "missing: give either p or both p_min and p_max"),
        ("p_min = 3", "driver.p_max", "missing: p_min needs p_max (or give p alone)"),
        ("p_max = 3", "driver.p_min", "missing: p_max needs p_min (or give p alone)"),
        ("p_min = 4\np_max = 3", "driver.p_min", "p_min (4) must be <= p_max (3)"),
        ("p = 0", "driver.p", "expected an integer >= 1 and <= 1e+06, got 0 (integer)"),
    ],
)
def test_matrix_p_rules(tmp_path: Path, driver: str, key: str, message: str) -> None:
    text = BASE.replace("p_min = 500\np_max = 1000", driver)
    check(error(tmp_path, text), key, message)


def test_matrix_p_forms_accepted(tmp_path: Path) -> None:
    text = BASE.replace("p_min = 500\np_max = 1000", "p = 5")
    assert load_spec(write(tmp_path, text)).points[0].driver["p"] == 5
    text = BASE.replace("p_min = 500\np_max = 1000", "p_min = 5\np_max = 5")
    assert load_spec(write(tmp_path, text)).points[0].driver["p_max"] == 5


def test_toml_syntax_error(tmp_path: Path) -> None:
    err = error(tmp_path, BASE + "[load\n")
    assert err.key == "(syntax)"
    assert "line" in err.message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}: (file): no such file"
    assert info.value.key == "(file)" and info.value.path == str(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b"name = '\xff'\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.key == "(file)"


def test_spec_error_is_one_line() -> None:
    err = SpecError("a.toml", "k", "two\nlines")
    assert str(err) == "a.toml: k: two lines"


# ---------------------------------------------------------------- dump_toml


def test_dump_toml_round_trip(tmp_path: Path) -> None:
    text = (
        BASE.replace('schedule = "poisson"', 'schedule = "steps"\nsteps = [[10, 5], [20, 2.5]]')
        + '[series.rate]\ndescription = "quote \\" and \\\\ and \\t"\n'
        + 'load = { schedule = "poisson" }\nsweep = { "load.rate_per_s" = [1, 2.5] }\n'
        + '[series.n]\nsweep = { "driver.same_matrix" = [true, false] }\n'
    )
    spec = load_spec(write(tmp_path, text))
    dumped = dump_toml(spec.resolved)
    assert tomllib.loads(dumped) == spec.resolved
    assert '"load.rate_per_s" = [1.0, 2.5]' in dumped
    # writing it back and loading it again gives the same points
    again = load_spec(write(tmp_path, dumped, "spec.toml"))
    assert again.points == spec.points
    assert again.resolved == spec.resolved


def test_dump_toml_values() -> None:
    data = {
        "top": 1,
        "a": {"s": "x\ny\u0001", "f": -0.5, "big": 1e300, "none": None, "b": False},
        "b": {"c": {"d": [[1, 2], ["x"]], "e": []}, "empty": {}},
        "weird key": {"k.k": 1, "": 2},
    }
    dumped = dump_toml(data)
    expected = {**data, "a": {k: v for k, v in data["a"].items() if v is not None}}
    assert tomllib.loads(dumped) == expected
    with pytest.raises(TypeError):
        dump_toml({"x": {1, 2}})


SLICES = """
[experiment]
name = "s"
system = "slices"

[server]
heartbeat_ms = 100
failure_timeout_ms = {failure_timeout_ms}

[driver]
ack_ms = {ack_ms}

[load]
schedule = "constant"
rate_per_s = 10
duration_s = 1
"""


def test_slices_acks_must_come_before_a_crash_takeover(tmp_path: Path) -> None:
    """A takeover comes failure_timeout_ms - heartbeat_ms (400 ms) after a dead PN's last
    reply at the least: the client's acks must be out within half of that."""
    spec = SLICES.format(ack_ms=200, failure_timeout_ms=500)
    assert load_spec(write(tmp_path, spec)).points[0].driver["ack_ms"] == 200
    check(
        error(tmp_path, SLICES.format(ack_ms=201, failure_timeout_ms=500)),
        "driver.ack_ms",
        "at most half of failure_timeout_ms - heartbeat_ms (400 ms)...",
    )


def _beats_and_acks(tmp_path: Path, spec_text: str) -> tuple[set[int], int]:
    """The heartbeat period every LB and PN is given, and the client's ack interval."""
    plans = plan_nodes(SYSTEMS["slices"], load_spec(write(tmp_path, spec_text)).points[0])
    beats = {p.config["server"]["heartbeat_ms"] for p in plans if p.name != "client"}
    (client,) = [p for p in plans if p.name == "client"]
    return beats, client.config["driver"]["ack_ms"]


def test_slices_heartbeats_are_a_fifth_of_the_failure_timeout_unless_set(tmp_path: Path) -> None:
    """server.heartbeat_ms = 0 (the default): the LB and every PN get a fifth of
    failure_timeout_ms (four beats may be lost or late before a PN is called crashed; a
    beat more often costs the PNs CPU and buys nothing), and the client's acks follow from
    it; a value set is passed as it is, and must stay under the timeout."""
    assert SYSTEMS["slices"].server["heartbeat_ms"].default == 0
    default_beat = SLICES.replace("heartbeat_ms = 100\n", "")
    assert _beats_and_acks(tmp_path, default_beat.format(ack_ms=0, failure_timeout_ms=500)) == (
        {100},
        100,
    )
    assert _beats_and_acks(tmp_path, default_beat.format(ack_ms=0, failure_timeout_ms=2000)) == (
        {400},
        400,
    )
    assert _beats_and_acks(tmp_path, default_beat.format(ack_ms=0, failure_timeout_ms=4)) == (
        {1},
        1,
    )
    assert _beats_and_acks(tmp_path, SLICES.format(ack_ms=0, failure_timeout_ms=2000)) == (
        {100},
        475,
    )
    check(
        error(tmp_path, SLICES.format(ack_ms=0, failure_timeout_ms=100)),
        "server.failure_timeout_ms",
        "must exceed heartbeat_ms (100)...",
    )


def _client_ack_ms(tmp_path: Path, ack_ms: int, failure_timeout_ms: int) -> int:
    spec = load_spec(
        write(tmp_path, SLICES.format(ack_ms=ack_ms, failure_timeout_ms=failure_timeout_ms))
    )
    (client,) = [p for p in plan_nodes(SYSTEMS["slices"], spec.points[0]) if p.name == "client"]
    return client.config["driver"]["ack_ms"]


def test_slices_ack_interval_is_a_quarter_of_the_takeover_room_unless_set(tmp_path: Path) -> None:
    """driver.ack_ms = 0 (the default): the client acks every (failure_timeout_ms -
    heartbeat_ms) / 4, within the rule with a margin and with as few messages as it allows;
    a value set is passed as it is."""
    assert SYSTEMS["slices"].driver["ack_ms"].default == 0
    assert _client_ack_ms(tmp_path, 0, 500) == 100
    assert _client_ack_ms(tmp_path, 0, 2000) == 475
    assert _client_ack_ms(tmp_path, 0, 102) == 1  # a room of 2 ms: 2 x 1 <= 2
    assert _client_ack_ms(tmp_path, 0, 600_000) == 10_000  # the client's largest
    assert _client_ack_ms(tmp_path, 30, 500) == 30
    check(
        error(tmp_path, SLICES.format(ack_ms=0, failure_timeout_ms=101)),
        "driver.ack_ms",
        "at most half of failure_timeout_ms - heartbeat_ms (1 ms)...",
    )
