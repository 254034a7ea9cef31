"""The value types of configuration tables: a spec's TOML, a point's resolved sections and a
node's JSON config. Which keys a node reads is the contract's (knee-node describe,
knee/contract.json), not repeated here: these name only what a value may be, so each use
narrows it (isinstance, or the Param type the spec validated it against)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

#: Any value tomllib reads.
TomlValue = (
    str
    | int
    | float
    | bool
    | datetime.datetime
    | datetime.date
    | datetime.time
    | list["TomlValue"]
    | dict[str, "TomlValue"]
)
TomlTable = dict[str, TomlValue]

#: A value of a point's section or a node's JSON config: what a spec gives (no dates: no
#: schema takes one), or None for an optional key left out.
ConfigValue = str | int | float | bool | None | list["ConfigValue"] | dict[str, "ConfigValue"]
ConfigTable = dict[str, ConfigValue]


# Reads of one key that narrow its value. A spec's values were checked against their Param
# types (knee.params) and a node config is built from them, so a mismatch here is a bug in
# knee, raised as TypeError naming the key.


def _wrong(key: str, expected: str, value: object) -> TypeError:
    return TypeError(f"{key}: expected {expected}, got {value!r}")


def number(table: Mapping[str, ConfigValue], key: str) -> float:
    """table[key], a number (an int is one)."""
    value = table[key]
    if not isinstance(value, int | float):
        raise _wrong(key, "a number", value)
    return value


def opt_number(table: Mapping[str, ConfigValue], key: str) -> float | None:
    """table[key] when it is there and not None, a number; else None."""
    return None if table.get(key) is None else number(table, key)


def integer(table: Mapping[str, ConfigValue], key: str) -> int:
    """table[key], an integer."""
    value = table[key]
    if not isinstance(value, int):
        raise _wrong(key, "an integer", value)
    return value


def opt_integer(table: Mapping[str, ConfigValue], key: str) -> int | None:
    """table[key] when it is there and not None, an integer; else None."""
    return None if table.get(key) is None else integer(table, key)


def text(table: Mapping[str, ConfigValue], key: str) -> str:
    """table[key], a string."""
    value = table[key]
    if not isinstance(value, str):
        raise _wrong(key, "a string", value)
    return value


def opt_text(table: Mapping[str, ConfigValue], key: str) -> str | None:
    """table[key] when it is there and not None, a string; else None."""
    return None if table.get(key) is None else text(table, key)


def items(table: Mapping[str, ConfigValue], key: str) -> list[ConfigValue]:
    """table[key], a list."""
    value = table[key]
    if not isinstance(value, list):
        raise _wrong(key, "a list", value)
    return value


def subtable(table: Mapping[str, ConfigValue], key: str) -> ConfigTable:
    """table[key], a table (an empty one when absent)."""
    return as_table(table.get(key, {}), key)


def as_table(value: ConfigValue, key: str) -> ConfigTable:
    """`value` (named `key` in errors), a table."""
    if not isinstance(value, dict):
        raise _wrong(key, "a table", value)
    return value


def pairs(table: Mapping[str, ConfigValue], key: str) -> list[tuple[float, float]]:
    """table[key], a list of [number, number] pairs (a schedule's steps)."""
    return [as_pair(pair, key) for pair in items(table, key)]


def as_pair(value: ConfigValue, key: str) -> tuple[float, float]:
    """`value` (named `key` in errors), a [number, number] pair."""
    match value:
        case [int() | float() as first, int() | float() as second]:
            return first, second
    raise _wrong(key, "a [number, number] pair", value)
