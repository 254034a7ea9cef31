"""The contract between the planes, held together: what knee-node says it writes and accepts
(`knee-node describe`) is what the Python side reads and plans with. Each side writes its
constants once; this test is what keeps the two copies equal."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from knee import contract
from knee.params import LOAD, Schema
from knee.results import SAMPLE_DTYPE, STATUS_NAMES
from knee.systems import SYSTEMS


@pytest.fixture(scope="module")
def described(knee_node: str) -> dict[str, Any]:
    out = subprocess.run([knee_node, "describe"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_statuses_sample_size_and_systems_agree(described: dict[str, Any]) -> None:
    assert described["statuses"] == list(STATUS_NAMES)
    assert described["sample_bytes"] == SAMPLE_DTYPE.itemsize
    assert sorted(described["systems"]) == sorted(SYSTEMS)


def _constants(prefix: str) -> dict[str, Any]:
    """knee.contract's constants whose names start with `prefix`, by the rest of the name in
    lower case (e.g. SHARE_FLAG_REPLICA -> "replica")."""
    return {
        name.removeprefix(prefix).lower(): value
        for name, value in vars(contract).items()
        if name.startswith(prefix) and name.isupper()
    }


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_op_codes_flags_and_sizes_agree(described: dict[str, Any], system: str) -> None:
    d = described["systems"][system]
    prefix = system.upper() + "_"
    ops = getattr(contract, prefix + "OPS", {})
    assert {name: code for code, name in ops.items()} == d["ops"]
    assert _constants(prefix + "FLAG_") == d["flags"]
    for name, size in d["sizes"].items():
        assert getattr(contract, prefix + name.upper()) == size, name


def _schema(system: str, section: str) -> Schema:
    if section == "load":
        return LOAD
    return getattr(SYSTEMS[system], section)


def _check_keys(described: dict[str, Any], system: str) -> None:
    for key, largest in described["max"].items():
        section, _, name = key.partition(".")
        param = _schema(system, section)[name]
        # A list's limit is its length, checked by the system's rule with knee.contract's
        # <SYSTEM>_MAX_<NAME>.
        allowed = (
            getattr(contract, f"{system.upper()}_MAX_{name.upper()}")
            if param.type == "list"
            else param.max
        )
        assert allowed == largest, f"{system} {key}: the spec allows {allowed}, the node {largest}"
    for key, value in described["defaults"].items():
        section, _, name = key.partition(".")
        param = _schema(system, section)[name]
        assert param.default == value, f"{system} {key}: spec default {param.default}, node {value}"


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_limits_and_defaults_agree_with_the_schemas(described: dict[str, Any], system: str) -> None:
    _check_keys(described["systems"][system], system)


def test_load_limits_and_defaults_agree(described: dict[str, Any]) -> None:
    _check_keys(described["load"], "load")
