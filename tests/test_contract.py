"""The contract between the planes, held together: `python/knee/contract.json` is what the
built knee-node describes (`knee-node describe`), and every spec key that a node reads takes
its type, default and bounds from it. A constant changed on one side fails here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from knee import contract
from knee.params import LOAD, Param
from knee.results import SAMPLE_DTYPE, STATUS_NAMES
from knee.systems import SYSTEMS

CONTRACT_JSON = Path(contract.__file__).parent / "contract.json"

#: The only fields a spec sets apart from the node key it is passed to, and why: a planning
#: default the node has none of (it requires the key, or a bare node means something else),
#: or a narrower range the spec plans within. Adding one fails this test until listed here.
SPEC_OWN: dict[tuple[str, str], tuple[str, ...]] = {
    ("load", "load.schedule.kind"): ("default",),  # the node requires a schedule
    ("load", "load.schedule.clients"): ("default",),  # required by a closed schedule only
    ("load", "load.warmup_s"): ("default",),  # a spec measures after a warm-up
    ("share", "server.index"): ("choices", "default"),  # a peer's "none" is the topology's
    ("share", "server.files"): ("default", "min"),  # the central index's node has none
    ("share", "server.file_bytes"): ("default", "min"),
    ("share", "client.ops"): ("default",),  # the node requires it
    ("slices", "server.slices"): ("default",),  # every node requires it
    ("stream", "server.streams"): ("default",),  # the report's catalog of streams
    ("http", "driver.requests"): ("default",),  # the node requires a request table
}


@pytest.fixture(scope="module")
def described(knee_node: str) -> str:
    out = subprocess.run([knee_node, "describe"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_contract_json_is_what_knee_node_describes(described: str) -> None:
    """Regenerate with `knee-node describe > python/knee/contract.json`."""
    assert json.loads(described) == json.loads(CONTRACT_JSON.read_text())
    assert described == CONTRACT_JSON.read_text(), "same content, other layout: regenerate it"


def test_statuses_sample_size_and_systems_agree() -> None:
    assert contract.DESCRIBED["statuses"] == list(STATUS_NAMES)
    assert contract.SAMPLE_BYTES == SAMPLE_DTYPE.itemsize
    assert sorted(contract.SYSTEMS) == sorted(SYSTEMS)


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_every_declared_column_is_a_record_field(system: str) -> None:
    fields = set(SAMPLE_DTYPE.names or ())
    columns = contract.SYSTEMS[system]["columns"]
    assert set(columns) <= fields, set(columns) - fields
    renamed = [c["name"] for c in columns.values()]
    assert len(set(renamed)) == len(renamed), "two fields read as one column"
    assert not (set(contract.columns(system).values()) & fields), "a new name hides a field"


def _schemas() -> list[tuple[str, str, str, Param]]:
    """Every spec key: (system or "load", section, name, its Param)."""
    out = [("load", "load", name, p) for name, p in LOAD.items()]
    for system, s in SYSTEMS.items():
        for section in ("server", "driver"):
            out += [(system, section, name, p) for name, p in getattr(s, section).items()]
    return out


def _node_keys(system: str) -> dict[str, Any]:
    if system == "load":
        return contract.LOAD["keys"]
    return contract.SYSTEMS[system]["keys"]


def test_no_spec_key_declares_its_own_bound_or_default() -> None:
    """A spec key passed to a node key takes the node's type, default, bounds and choices
    (apart from SPEC_OWN); a spec key declared in Python is one no node reads under its
    name (a planning key: how many replicas, which design)."""
    own: dict[tuple[str, str], tuple[str, ...]] = {}
    for system, section, name, p in _schemas():
        keys = _node_keys(system)
        where = f"{system} {section}.{name}"
        if p.node is None:
            # (A node's table of the same name is another thing: http's server.nginx.)
            same = keys.get(f"{section}.{name}", {"type": "object"})
            assert same["type"] == "object", f"{where}: a node reads it; use from_node"
            assert f"load.schedule.{name}" not in keys or system != "load", where
            continue
        k = keys[p.node]
        if p.own:
            own[(system, p.node)] = p.own
        expected = {
            "type": k["type"],
            "min": 0 if k.get("derived") else k["min"],
            "max": None if k["type"] == "list" else k["max"],
            "min_exclusive": bool(k.get("min_exclusive")),
            "choices": tuple(k["choices"]) if k.get("choices") else None,
        }
        if not k["required"]:
            expected["default"] = 0 if k.get("derived") else k["default"]
        for field, value in expected.items():
            if field not in p.own:
                assert getattr(p, field) == value, f"{where}: {field}"
    assert own == SPEC_OWN


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_a_derived_default_says_its_rule(system: str) -> None:
    """A key whose spec default 0 applies a rule says which, and the rule's numbers are the
    system's constants."""
    for name, k in contract.SYSTEMS[system]["keys"].items():
        if k.get("derived"):
            assert k["derived"].startswith("0 in a spec: "), name
            assert not k["required"], name


def test_a_node_refuses_a_value_outside_its_contract(knee_node: str, tmp_path: Path) -> None:
    """The advertised range is the one nodes keep: one past the bound is refused before the
    node starts."""
    config = {"server": {"threads": contract.key("matrix", "server.threads")["max"] + 1}}
    out = subprocess.run(
        [knee_node, "serve", "matrix", "--config", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode != 0
    assert "server.threads" in out.stderr


def columns_table(system: str) -> str:
    """The markdown table of what `system`'s samples hold, as docs/samples.md shows it."""
    rows = [f"**{system}**", "", "| field | column | holds |", "|---|---|---|"]
    for field, c in contract.SYSTEMS[system]["columns"].items():
        rows.append(f"| {field} | {c['name']} | {c['meaning']} |")
    return "\n".join(rows) + "\n"


def test_docs_show_each_systems_columns() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "samples.md").read_text()
    for system in sorted(contract.SYSTEMS):
        assert columns_table(system) in doc, f"docs/samples.md: {system}'s table is stale"
