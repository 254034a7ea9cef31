"""Spec fuzzing: whatever TOML a user gives `knee run`, it either starts or exits 2 with one
line on stderr, never a traceback.

Hypothesis generates specs (random tables, keys and values: wrong types, huge and negative
numbers, NaN and infinities, unknown keys, bad presets, events and hosts) and mutates the
shipped experiments/*.toml (a key deleted, a value's type changed, the text truncated, bytes
flipped). The validation `knee run` does (`knee.spec.load_spec`, whose SpecError the CLI
prints as its one line and exit 2) runs in-process for speed; a spec it accepts must also
survive what `knee run` computes from it before the first node starts, and each of its
nodes' configs is given to a real `knee-node`, which must get past it (print its first
line, or reach a peer) rather than refuse it. A few real CLI runs prove the exit code and
the single line.

The suite runs a fixed, derandomized budget; a longer hunt:
    KNEE_SPEC_FUZZ_EXAMPLES=20000 python3 -m pytest -q tests/test_spec_fuzz.py
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import Processes
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from knee import run_params
from knee.hosts.spec import HOST, LIMITS
from knee.params import EXPERIMENT, LOAD
from knee.runner.node import node_binary
from knee.spec import EVENT, SpecError, load_spec
from knee.systems import SYSTEMS, plan_nodes
from knee.toml_writer import dump_toml

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "experiments").glob("*.toml"))

_EXAMPLES = int(os.environ.get("KNEE_SPEC_FUZZ_EXAMPLES", "0"))
#: The suite's budget is fixed and derandomized (the same cases every run, no flakes);
#: KNEE_SPEC_FUZZ_EXAMPLES asks for a longer, random hunt.
FUZZ = settings(
    max_examples=_EXAMPLES or 150,
    derandomize=not _EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ------------------------------------------------------------------ what the fuzzer draws

_SCHEMAS = [EXPERIMENT, LOAD, EVENT, LIMITS, *HOST.values()]
_SCHEMAS += [s.server for s in SYSTEMS.values()] + [s.driver for s in SYSTEMS.values()]
#: Every key the spec knows, so that generated tables reach past "unknown key".
KNOWN_KEYS = sorted({k for schema in _SCHEMAS for k in schema})
SECTION_NAMES = ["experiment", "server", "load", "driver", "sweep", "series", "events"]
SECTION_NAMES += ["hosts", "placement", "limits", "presets"]
NODES = ["server", "client", "load", "load-0", "replica-0", "replica-1", "peer-*", "service-0"]
CHOICES = sorted(
    {str(c) for schema in _SCHEMAS for p in schema.values() for c in p.choices or ()} | set(SYSTEMS)
)

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
keys = st.one_of(st.sampled_from(KNOWN_KEYS + SECTION_NAMES), _text)
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-3, 3000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 0.0, -0.0, 1e-300, 1e300, 2**63, 2**64, -(2**63) - 1]),
)
scalars = st.one_of(
    numbers,
    st.booleans(),
    _text,
    st.sampled_from(CHOICES + NODES),
    st.dates(),
    st.datetimes(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


def table_of(schema_keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """A table of mostly known keys, each any value."""
    key = st.one_of(st.sampled_from(schema_keys), keys) if schema_keys else keys
    return st.dictionaries(key, values, max_size=5)


@st.composite
def spec_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec as a TOML document: the shape of a real one, every part of it suspect."""
    system = draw(st.one_of(st.sampled_from(sorted(SYSTEMS)), _text))
    experiment = {"name": draw(st.one_of(_text, values)), "system": system}
    experiment |= draw(table_of(list(EXPERIMENT)))
    doc: dict[str, Any] = {"experiment": experiment}
    sys_ = SYSTEMS.get(system) if isinstance(system, str) else None
    sections = {
        "server": list(sys_.server) if sys_ else [],
        "load": list(LOAD),
        "driver": list(sys_.driver) if sys_ else [],
    }
    for name, known in sections.items():
        if draw(st.booleans()):
            doc[name] = draw(table_of(known))
    swept = st.sampled_from([f"{s}.{k}" for s, ks in sections.items() for k in ks] or ["x.y"])
    sweep = st.dictionaries(st.one_of(swept, keys), st.one_of(st.lists(values, max_size=4), values))
    shape = draw(st.sampled_from(["plain", "sweep", "series"]))
    if shape == "sweep":
        doc["sweep"] = draw(sweep)
    elif shape == "series":
        series = st.fixed_dictionaries({}, optional={"sweep": sweep, "load": table_of(list(LOAD))})
        doc["series"] = draw(st.dictionaries(st.one_of(st.just("a"), _text), series, max_size=3))
    if draw(st.booleans()):
        event = st.fixed_dictionaries(
            {},
            optional={
                "at_s": numbers,
                "action": st.sampled_from(["kill", "stop", "start", "freeze", ""]),
                "node": st.sampled_from(NODES),
                "extra": values,
            },
        )
        doc["events"] = draw(st.one_of(st.lists(event, max_size=3), values))
    if draw(st.booleans()):
        host = st.fixed_dictionaries(
            {"kind": st.one_of(st.sampled_from(["local", "netns", "ssh"]), values)},
            optional={k: values for k in sorted({k for h in HOST.values() for k in h} - {"kind"})},
        )
        doc["hosts"] = draw(st.dictionaries(st.one_of(st.just("h1"), _text), host, max_size=2))
        doc["placement"] = draw(st.dictionaries(st.sampled_from(NODES), values, max_size=2))
        doc["limits"] = draw(st.dictionaries(st.sampled_from(NODES), table_of(list(LIMITS))))
    if draw(st.booleans()):
        preset = st.dictionaries(st.sampled_from(SECTION_NAMES), values, max_size=3)
        doc["presets"] = draw(st.dictionaries(st.sampled_from(["quick", "smoke", ""]), preset))
    if draw(st.booleans()):  # a top-level key of its own, or a section that is not a table
        doc[draw(keys)] = draw(values)
    return doc


# ------------------------------------------------------------------ TOML text of a document


def toml_text(doc: dict[str, Any]) -> str:
    """The document as TOML, every table inline (any value TOML has: dates, NaN, inf)."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in doc.items())


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)  # inf and -inf as TOML has them
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    return value.isoformat()  # dates and datetimes


# ------------------------------------------------------------------ the property


def check_spec(path: Path, data: bytes, preset: str | None) -> None:
    """`knee run`'s contract: the spec is refused with one SpecError line naming the file, or
    it is a spec that `knee run` can start."""
    path.write_bytes(data)
    try:
        spec = load_spec(path, preset)
    except SpecError as err:
        assert "\n" not in str(err) and "\r" not in str(err), str(err)
        assert str(err).startswith(f"{path}: "), str(err)
        return
    startable(spec, path.parent)


def startable(spec: Any, tmp: Path) -> None:
    """What `knee run` computes from an accepted spec before its first node starts (the
    runner, knee.runner.local): spec.toml written back, the plan, each point's nodes and
    their JSON configs, and the run directory's name; then each node's config given to a
    real knee-node, which must not refuse it."""
    assert tomllib.loads(dump_toml(spec.resolved)) == _no_none(spec.resolved), "spec.toml"
    plan_dir = tmp / "plan"
    plan_dir.mkdir(exist_ok=True)
    run_params.write_plan(plan_dir, spec.experiment, spec.events, spec.points)
    system = SYSTEMS[spec.experiment["system"]]
    for point in spec.points:
        for plan in plan_nodes(system, point):
            json.dumps(plan.config, allow_nan=False)  # knee-node reads its config as JSON
            node_accepts(system.name, plan, tmp)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.experiment["name"])
    assert len(f"{name}-20260101T000000Z-99".encode()) <= 255, "the run directory's name"


#: Seconds a node gets to start: to print its first line or to reach a peer.
NODE_START_S = 10.0
#: Verdicts already reached, by (system, role, config): mutated specs repeat most nodes.
_JUDGED: dict[str, str | None] = {}


class _Peer:
    """What every "{addr:NAME}" of a judged node names: a TCP listener (the kernel completes
    connections into its backlog) and a UDP socket on the same port (stream's services).
    Nothing is answered: a node that connects or sends here has accepted its config."""

    def __init__(self) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(1024)
        self.tcp.setblocking(False)
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.udp.setblocking(False)

    def drain(self) -> None:
        """Closes the connections and drops the datagrams of the nodes judged before."""
        for sock, take in ((self.tcp, self.tcp.accept), (self.udp, self.udp.recv)):
            while select.select([sock], [], [], 0)[0]:
                try:
                    got = take(65536) if sock is self.udp else take()  # type: ignore[operator]
                except OSError:
                    break
                if isinstance(got, tuple):
                    got[0].close()


_PEER: list[_Peer] = []


def _peer() -> _Peer:
    if not _PEER:
        _PEER.append(_Peer())
    return _PEER[0]


_ADDR = re.compile(r"\{addr:([A-Za-z0-9_-]+)\}")
#: The address each server printed on its `ready` line, by (system, node): later nodes are
#: given its form ("IP:PORT", or zenoh's "tcp/IP:PORT") with the peer's port.
_ADDRESSES: dict[tuple[str, str], str] = {}


def _address(system: str, node: str, port: int) -> str:
    """The peer's address in the form NODE printed (or another server of the system, for
    one that reached the peer before it was ready)."""
    same = [a for (sys_, _), a in _ADDRESSES.items() if sys_ == system] + ["127.0.0.1:0"]
    printed = _ADDRESSES.get((system, node), same[0])
    return re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", printed)


def node_accepts(system: str, plan: Any, tmp: Path) -> None:
    """Starts `knee-node ROLE SYSTEM` with the node's config as the runner completes it
    ("{addr:NAME}" and "{scratch}" filled in, output paths added). It must get past its
    config: print its first line (`ready`, `start`), or connect or send to a peer. Exiting
    first is a refusal of a config the spec accepted, and fails the test."""
    key = json.dumps([system, plan.role, plan.config], sort_keys=True)
    if key not in _JUDGED:
        _JUDGED[key] = _start_node(system, plan, tmp)
    refusal = _JUDGED[key]
    assert refusal is None, f"the spec was accepted, knee-node refused {plan.name}: {refusal}"


def _start_node(system: str, plan: Any, tmp: Path) -> str | None:
    """None if the node got past its config (or had not ended within NODE_START_S); else
    how it ended and its log."""
    peer = _peer()
    peer.drain()
    scratch = tmp / f"scratch-{plan.name}"
    scratch.mkdir(exist_ok=True)
    text = re.sub(_ADDR, lambda m: _address(system, m.group(1), peer.port), json.dumps(plan.config))
    config = json.loads(text.replace("{scratch}", json.dumps(str(scratch))[1:-1]))
    if plan.records:
        config["samples_path"] = str(scratch / "samples.bin")
        config["histogram_path"] = str(scratch / "histogram.csv")
    for dotted, file_name in plan.outputs.items():
        *tables, last = dotted.split(".")
        table = config
        for name in tables:
            table = table.setdefault(name, {})
        table[last] = str(scratch / file_name)
    (scratch / "config.json").write_text(json.dumps(config))
    argv = [node_binary(), plan.role, system, "--name", plan.name]
    with open(scratch / "stderr.log", "wb") as err:
        proc = subprocess.Popen(
            [*argv, "--config", f"@{scratch / 'config.json'}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=scratch,
        )
    assert proc.stdout is not None
    first = b"-"  # not read: the node reached the peer first, or the wait ended
    try:
        ready, _, _ = select.select([proc.stdout, peer.tcp, peer.udp], [], [], NODE_START_S)
        first = proc.stdout.readline() if ready == [proc.stdout] else first
        refused = not first  # EOF: it ended
        if first.startswith(b"{") and (addr := json.loads(first).get("addr")):
            _ADDRESSES[(system, plan.name)] = str(addr)  # its form: "tcp/IP:PORT" for zenoh
    finally:
        if first != b"-" and plan.role == "serve":
            Processes.stop(proc)  # SIGTERM by pid: a server's children (nginx) end with it
        elif proc.poll() is None:
            # A client has no children, and one stopped by SIGTERM waits 1 s for the
            # replies of its requests in flight, which the peer never answers.
            os.kill(proc.pid, signal.SIGKILL)  # or a server mid-connect: no children yet
            proc.wait(timeout=NODE_START_S)
        proc.stdout.close()
    if not refused:
        return None
    log = (scratch / "stderr.log").read_text(errors="replace").strip()
    return f"exit {proc.returncode}: {log}"


def _no_none(value: Any) -> Any:
    """A value as dump_toml writes it: None (an absent key) left out."""
    if isinstance(value, dict):
        return {k: _no_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_none(v) for v in value]
    return value


presets = st.one_of(st.none(), st.sampled_from(["quick", "smoke", "full", ""]), _text)


def _echo(**load: Any) -> dict[str, Any]:
    """A valid echo spec; `load` replaces keys of its [load]."""
    doc = {"experiment": {"name": "e", "system": "echo"}}
    return doc | {"load": {"rate_per_s": 10, "duration_s": 1, **load}}


@FUZZ
@given(doc=spec_docs(), preset=presets)
# Specs once accepted that failed only after the run had started (the property fails on
# each without its fix): a name too long for a file name (the run directory cannot be made)...
@example(doc=_echo() | {"experiment": {"name": "n" * 300, "system": "echo"}}, preset=None)
# ...integers beyond 64 bits (knee-node's u64 and i64 fields refuse them)...
@example(doc=_echo() | {"experiment": {"name": "e", "system": "echo", "seed": 2**64}}, preset=None)
@example(doc=_echo(warmup_requests=2**70), preset=None)
# ...and waits no Duration holds (share's client made one of timeout_ms, and panicked).
@example(doc=_echo(timeout_ms=1e300), preset=None)
@example(doc=_echo(late_ms=1e300), preset=None)
@example(doc=_echo(schedule="closed", think_ms=1e300, requests=10), preset=None)
# Found by the fuzzer: a host's kind that is not a string (a TypeError in validation).
@example(doc=_echo() | {"hosts": {"h1": {"kind": []}}}, preset=None)
def test_generated_specs_start_or_are_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, doc: dict[str, Any], preset: str | None
) -> None:
    tmp = tmp_path_factory.mktemp("gen")
    check_spec(tmp / "spec.toml", toml_text(doc).encode(), preset)


# ------------------------------------------------------------------ the shipped specs, mutated


def _shipped_docs() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, tomllib.loads(p.read_text())) for p in SHIPPED]


def _paths(doc: Any, stem: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a document (tables and lists), the root excluded."""
    out: list[tuple[Any, ...]] = []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for k, v in items:
        out.append((*stem, k))
        out += _paths(v, (*stem, k))
    return out


@st.composite
def mutated_docs(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """A shipped spec with one to three of its keys deleted, replaced or added to."""
    name, doc = draw(st.sampled_from(_shipped_docs()))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        *parents, last = draw(st.sampled_from(paths))
        parent: Any = doc
        for k in parents:
            parent = parent[k]
        how = draw(st.sampled_from(["delete", "replace", "add"]))
        if how == "delete":
            del parent[last]
        elif how == "replace":
            parent[last] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        else:
            parent.append(draw(values))
    known = list(doc.get("presets", {})) if isinstance(doc.get("presets"), dict) else []
    preset = draw(st.one_of(st.none(), st.sampled_from(known or ["smoke"]), presets))
    return doc, preset


@FUZZ
@given(case=mutated_docs())
def test_mutated_shipped_specs_start_or_are_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[dict[str, Any], str | None]
) -> None:
    doc, preset = case
    check_spec(tmp_path_factory.mktemp("mut") / "spec.toml", toml_text(doc).encode(), preset)


@st.composite
def damaged_texts(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A shipped spec's bytes truncated, with bytes flipped, inserted or lines repeated."""
    path = draw(st.sampled_from(SHIPPED))
    data = bytearray(path.read_bytes())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["truncate", "flip", "insert", "repeat"]))
        if how == "truncate":
            del data[at:]
        elif how == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            line = data[:at].rsplit(b"\n", 1)[-1] + b"\n"
            data[at:at] = line
    preset = draw(st.one_of(st.none(), st.sampled_from(["smoke", "quick", "full"])))
    return bytes(data), preset


@FUZZ
@given(case=damaged_texts())
def test_damaged_shipped_specs_start_or_are_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[bytes, str | None]
) -> None:
    data, preset = case
    check_spec(tmp_path_factory.mktemp("dmg") / "spec.toml", data, preset)


#: Bounds the spec once let past and a node then refused, so the run failed after it had
#: started (found by setting each parameter of the shipped specs to its schema's bounds and
#: starting the nodes; the node's own limit is in its config.rs or client.rs): experiment,
#: section, key, the largest value the node takes.
NODE_BOUNDS = [
    ("stream", "load", "timeout_ms", 60_000),  # systems/stream/config.rs, MAX_TIMEOUT_MS
    ("slices-balance", "driver", "retries", 100),  # systems/slices/client.rs, MAX_RETRIES
    ("slices-balance", "load", "max_outstanding", 1_000_000),  # the same, MAX_OUTSTANDING
]


@pytest.mark.parametrize("name, section, key, most", NODE_BOUNDS)
def test_the_spec_takes_no_more_than_the_node(
    name: str, section: str, key: str, most: int, tmp_path: Path
) -> None:
    doc = tomllib.loads((ROOT / "experiments" / f"{name}.toml").read_text())
    for value, accepted in ((most, True), (most + 1, False)):
        doc["presets"]["smoke"].setdefault(section, {})[key] = value
        path = tmp_path / f"{key}-{value}.toml"
        path.write_text(toml_text(doc))
        if accepted:
            assert getattr(load_spec(path, "smoke").points[0], section)[key] == value
        else:
            with pytest.raises(SpecError, match=rf"{section}\.{key}: .*(at most|<=)") as info:
                load_spec(path, "smoke")
            assert str(most) in info.value.message.replace(",", ""), info.value.message


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_spec_and_preset_is_startable(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzzer's baseline: unmutated, every shipped spec passes `startable` (chat-chaos's
    PostgreSQL series reads its URL from $KNEE_PG_URL: the judging peer, which its server
    reaches, and nothing answers)."""
    monkeypatch.setenv("KNEE_PG_URL", f"postgresql://knee@127.0.0.1:{_peer().port}/knee")
    for preset in [None, *tomllib.loads(path.read_text()).get("presets", {})]:
        startable(load_spec(path, preset), tmp_path)


# ------------------------------------------------------------------ the real command

_ECHO = '[experiment]\nname = "x"\nsystem = "echo"\n[load]\nrate_per_s = 10\nduration_s = 1\n'
#: Specs `knee run` must refuse (file, preset): unreadable bytes, an event naming no node,
#: an unknown preset.
REFUSED = {
    "binary": (b"\x00\xff\xfe garbage \x80\x81", None),
    "bad-event": ((_ECHO + '[[events]]\nat_s = 0.5\naction = "kill"\nnode = "x"\n').encode(), None),
    "preset": (_ECHO.encode(), "nope"),
}


def test_knee_run_refuses_bad_specs_with_exit_2_and_one_line(tmp_path: Path) -> None:
    """The real command, once per kind (started together: each is mostly Python's start)."""
    procs = {}
    for kind, (data, preset) in REFUSED.items():
        spec = tmp_path / f"{kind}.toml"
        spec.write_bytes(data)
        args = ["run", str(spec), "--out", str(tmp_path / "runs"), "--no-progress"]
        procs[kind] = subprocess.Popen(
            [sys.executable, "-m", "knee.cli", *args, *(["--preset", preset] if preset else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
        )
    said = {}
    for kind, proc in procs.items():
        _, stderr = proc.communicate(timeout=120)
        lines = stderr.splitlines()
        assert proc.returncode == 2, (kind, stderr)
        assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / kind}.toml: "), stderr
        said[kind] = lines[0].split(": ", 1)[1]
    assert said["binary"].startswith(("(syntax)", "(file)")), said
    assert said["bad-event"].startswith("events[0].node: 'x' is not a node"), said
    assert said["preset"].startswith("presets: unknown preset 'nope'"), said
    assert not (tmp_path / "runs").exists(), "a refused spec made a run directory"
