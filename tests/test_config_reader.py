"""The strict config reader: keys, value types and allowed values, one error format
(``<file>:<key.path>: expected <what>, found <value>``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from edge.config_reader import Where, optional_key, read_config
from edge.errors import ConfigError, EdgeError


class _FormatError(ConfigError):
    """Stands for a format's own error class."""


@dataclass(frozen=True)
class _Item:
    mode: Literal["a", "b"]
    count: int = 1


@dataclass(frozen=True)
class _Doc:
    flag: bool
    rate: float
    items: tuple[_Item, ...]
    pair: tuple[int, int] = (0, 0)
    label: str | None = None
    scale: float | tuple[float, ...] = 1.0
    table: Mapping[str, float] = field(default_factory=dict)
    free: Mapping[str, Any] = field(default_factory=dict)
    rule: _Item | None = optional_key()


def _doc(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"flag": True, "rate": 2.5, "items": [{"mode": "a"}, {"mode": "b",
                                                                           "count": 3}]}
    d.update(over)
    return d


def _refused(data: Any) -> _FormatError:
    with pytest.raises(_FormatError) as info:
        read_config(_Doc, data, Where("f.json", error=_FormatError))
    return info.value


def test_a_good_document_is_built_with_its_types_and_defaults() -> None:
    doc = read_config(_Doc, _doc(pair=[1, 2], table={"x": 3}, free={"any": [1, None]},
                                 label=None, scale=[1, 2.5]), Where("f.json"))
    assert doc == _Doc(True, 2.5, (_Item("a"), _Item("b", 3)), (1, 2), None, (1, 2.5),
                       {"x": 3}, {"any": [1, None]}, None)
    assert isinstance(doc.items, tuple) and isinstance(doc.pair, tuple)


def test_an_int_is_a_number_and_is_kept_as_written() -> None:
    doc = read_config(_Doc, _doc(rate=3), Where("f.json"))
    assert doc.rate == 3 and type(doc.rate) is int


@pytest.mark.parametrize("over, message", [
    (dict(flag="no"), "f.json:flag: expected true or false, found 'no'"),
    (dict(flag=1), "f.json:flag: expected true or false, found 1"),
    (dict(rate="4"), "f.json:rate: expected a finite number, found '4'"),
    (dict(rate=True), "f.json:rate: expected a finite number, found True"),
    (dict(rate=float("nan")), "f.json:rate: expected a finite number, found nan"),
    (dict(items=[{"mode": "a", "count": True}]),
     "f.json:items[0].count: expected an integer, found True"),
    (dict(items=[{"mode": "a", "count": "4"}]),
     "f.json:items[0].count: expected an integer, found '4'"),
    (dict(items=[{"mode": "a", "count": 2.0}]),
     "f.json:items[0].count: expected an integer, found 2.0"),
    (dict(items={"mode": "a"}), "f.json:items: expected a list of mappings, found {'mode': 'a'}"),
    (dict(items=[{"mode": "a"}, 3]), "f.json:items[1]: expected a mapping, found 3"),
    (dict(pair=[1]), "f.json:pair: expected a list of 2 integers, found [1]"),
    (dict(label=5), "f.json:label: expected a string or null, found 5"),
    (dict(scale="x"), "f.json:scale: expected a finite number or a list of finite numbers, "
                      "found 'x'"),
    (dict(scale=[1, "x"]), "f.json:scale[1]: expected a finite number, found 'x'"),
    (dict(table={"x": "1"}), "f.json:table.x: expected a finite number, found '1'"),
    (dict(rule=None), "f.json:rule: expected a mapping, found null"),
])
def test_a_wrong_type_names_the_key_path_what_was_expected_and_found(over, message) -> None:
    err = _refused(_doc(**over))
    assert str(err) == message
    assert isinstance(err, ConfigError) and isinstance(err, EdgeError)
    assert isinstance(err, ValueError)
    assert err.file == "f.json" and message.startswith(f"f.json:{err.key_path}: ")


def test_a_value_outside_the_literal_is_refused_with_the_allowed_values() -> None:
    err = _refused(_doc(items=[{"mode": "c"}]))
    assert str(err) == "f.json:items[0].mode: expected one of ['a', 'b'], found 'c'"


def test_a_literal_is_matched_by_type_too() -> None:
    @dataclass(frozen=True)
    class Flags:
        level: Literal[1, 2]

    with pytest.raises(ConfigError, match=r"level: expected one of \[1, 2\], found True"):
        read_config(Flags, {"level": True}, Where("f.json"))


def test_unknown_and_missing_keys_name_the_key_path() -> None:
    err = _refused(_doc(items=[{"mode": "a", "colour": "red"}]))
    assert str(err) == "f.json:items[0].colour: unknown key; expected one of ['count', 'mode']"
    d = _doc()
    del d["rate"]
    err = _refused(d)
    assert str(err) == "f.json:rate: missing key; expected a finite number"


def test_the_document_itself_must_be_a_mapping() -> None:
    assert str(_refused([1, 2])) == "f.json: expected a mapping, found [1, 2]"


def test_a_key_path_prefix_is_kept() -> None:
    with pytest.raises(ConfigError) as info:
        read_config(_Item, {"mode": "z"}, Where("m.json", "contract.rule"))
    assert str(info.value) == "m.json:contract.rule.mode: expected one of ['a', 'b'], found 'z'"
    assert info.value.key_path == "contract.rule.mode"


def test_a_long_value_is_shortened_in_the_message() -> None:
    err = _refused(_doc(flag="x" * 500))
    assert len(str(err)) < 150 and str(err).endswith("...")


def test_where_builds_key_paths_and_fails_with_the_format_error() -> None:
    w = Where("r.yaml", error=_FormatError).key("keep_out").key("regions").index(2)
    assert (w.path, str(w)) == ("keep_out.regions[2]", "r.yaml:keep_out.regions[2]")
    with pytest.raises(_FormatError, match=r"^r.yaml:keep_out.regions\[2\]: too small$"):
        w.fail("too small")
