"""The value types of configuration tables: a spec's TOML, a point's resolved sections and a
node's JSON config. Which keys a node reads is the contract's (knee-node describe,
knee/contract.json), not repeated here: these name only what a value may be, so each use
narrows it (isinstance, or the Param type the spec validated it against)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import TypeVar

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
T = TypeVar("T")


# Reads of one key that narrow its value. A spec's values were checked against their Param
# types (knee.params) and a node config is built from them, so a mismatch here is a bug in
# knee, raised as TypeError naming the key.


def _wrong(key: str, expected: str, value: object) -> TypeError:
    return TypeError(f"{key}: expected {expected}, got {value!r}")


#: A read of one key of a table (a point's section, a node config).
Read = Callable[[Mapping[str, ConfigValue], str], T]


def _reader(kind: type[T] | tuple[type[T], ...], expected: str) -> Read[T]:
    """A read of table[key] that narrows it to `kind` (`expected` names it in the error)."""

    def read(table: Mapping[str, ConfigValue], key: str) -> T:
        value = table[key]
        if not isinstance(value, kind):
            raise _wrong(key, expected, value)
        return value

    return read


def _optional(read: Read[T]) -> Read[T | None]:
    """`read`'s value when the key is there and not None; else None."""

    def read_optional(table: Mapping[str, ConfigValue], key: str) -> T | None:
        return None if table.get(key) is None else read(table, key)

    return read_optional


#: table[key], a number (an int is one).
number: Read[float] = _reader((int, float), "a number")
#: table[key], an integer.
integer: Read[int] = _reader(int, "an integer")
#: table[key], a string.
text: Read[str] = _reader(str, "a string")
#: table[key], a list.
items: Read[list[ConfigValue]] = _reader(list, "a list")
#: table[key] when it is there and not None, of that type; else None.
opt_number: Read[float | None] = _optional(number)
opt_integer: Read[int | None] = _optional(integer)
opt_text: Read[str | None] = _optional(text)


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
