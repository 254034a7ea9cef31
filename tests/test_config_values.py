"""knee.config_values: each read gives the value narrowed to its type, and a value of
another type is a TypeError naming its key (a bug in knee: the spec checked the value)."""

from __future__ import annotations

import re

import pytest

from knee import config_values as cv
from knee.config_values import ConfigTable

TABLE: ConfigTable = {
    "rate": 2.5,
    "n": 3,
    "name": "x",
    "none": None,
    "list": [1, "a"],
    "sub": {"k": 1},
    "steps": [[10, 1.5], [20.0, 2]],
}


def test_each_read_narrows_its_value() -> None:
    assert cv.number(TABLE, "rate") == 2.5 and cv.number(TABLE, "n") == 3
    assert cv.integer(TABLE, "n") == 3 and cv.text(TABLE, "name") == "x"
    assert cv.opt_number(TABLE, "none") is None and cv.opt_number(TABLE, "absent") is None
    assert cv.opt_integer(TABLE, "n") == 3 and cv.opt_text(TABLE, "none") is None
    assert cv.items(TABLE, "list") == [1, "a"]
    assert cv.subtable(TABLE, "sub") == {"k": 1} and cv.subtable(TABLE, "absent") == {}
    assert cv.pairs(TABLE, "steps") == [(10, 1.5), (20.0, 2)]


@pytest.mark.parametrize(
    ("read", "key", "expected"),
    [
        (cv.number, "name", "a number"),
        (cv.opt_number, "list", "a number"),
        (cv.integer, "rate", "an integer"),
        (cv.opt_integer, "name", "an integer"),
        (cv.text, "n", "a string"),
        (cv.opt_text, "sub", "a string"),
        (cv.items, "sub", "a list"),
        (cv.subtable, "list", "a table"),
        (cv.pairs, "list", "a [number, number] pair"),
    ],
)
def test_a_value_of_another_type_is_a_type_error_naming_its_key(
    read: object, key: str, expected: str
) -> None:
    assert callable(read)
    with pytest.raises(TypeError, match=rf"^{key}: expected {re.escape(expected)}, got "):
        read(TABLE, key)
