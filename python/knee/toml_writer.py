"""A minimal TOML writer: the resolved spec in the run directory (spec.toml)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from knee.config_values import ConfigValue, TomlValue

#: A table to write: a spec as read (TOML values) or built (config values; None: left out).
Doc = Mapping[str, ConfigValue | TomlValue]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _toml_str(text: str) -> str:
    def escape(c: str) -> str:
        if c in _ESCAPES:
            return _ESCAPES[c]
        return f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c

    return '"' + "".join(escape(c) for c in text) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_str(key)


def _toml_value(value: ConfigValue | TomlValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # also right for inf, -inf and nan
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # inline table, e.g. an element of a list of tables
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"dump_toml cannot write {type(value).__name__} {value!r}")


def _dump_table(table: Doc, header: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if v is not None and not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if header and (scalars or not tables):
        lines += ["", "[" + ".".join(_toml_key(k) for k in header) + "]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for name, sub in tables.items():
        _dump_table(sub, [*header, name], lines)


def dump_toml(data: Doc) -> str:
    """Minimal TOML writer: nested tables, strings, numbers, booleans and (nested) lists.
    None values are left out."""
    lines: list[str] = []
    _dump_table(data, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"
