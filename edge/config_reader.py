"""One strict reader for every config and manifest file.

``model.json`` (:mod:`edge.manifest`), ``bundle.json`` and ``bundle.sig``
(:mod:`edge.bundle.format`), pre-check rules (:mod:`edge.precheck.rules`), robot specs
(:mod:`edge.calibrate.spec`) and episode metadata (:mod:`edge.episode`) are all checked by
:func:`read_config`. A format is a frozen dataclass whose field annotations say what each
key holds; the reader checks the parsed JSON/YAML against them and builds the dataclass:

- keys: a key that is not a field is an error; a field without a default is a required
  key. A field whose default is :func:`optional_key` may be left out (it is then ``None``)
  but may not be given as null.
- ``bool``: ``true`` or ``false`` only (never ``1``, never ``"no"``).
- ``int``: an integer, never a boolean.
- ``float``: a finite number; an integer is accepted and kept as written, so a file read
  and written again keeps its bytes.
- ``str``; ``Literal[...]``: one of the listed values, of the same type (``True`` is not
  ``1``).
- ``tuple[X, ...]`` (or ``list[X]``): a list; ``tuple[X, Y]``: a list of exactly that length.
- ``Mapping[str, X]`` (or ``dict[str, X]``): a mapping with string keys; ``Any``: any value.
- a nested dataclass: a mapping, checked the same way.
- ``X | Y``: the alternative whose kind (number, string, list, mapping, ...) fits the
  value; ``X | None`` also accepts null.

Every refusal raises the format's :class:`~edge.errors.ConfigError` subclass (carried by
:class:`Where`) with one message form, ``<file>:<key.path>: expected <what>, found
<value>``, and for keys ``<file>:<key.path>: unknown key; expected one of [...]`` or
``<file>:<key.path>: missing key; expected <what>`` (episode metadata keeps the episode
file's form, ``<file>: field 'metadata.<key>': ...``). Range and cross-field checks
(``> 0``, ``lower <= upper``) belong to each format and raise through :meth:`Where.fail`,
so their messages have the same form.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeVar, Union, get_args, get_origin, get_type_hints

from edge.errors import ConfigError

__all__ = ["Where", "load_yaml", "no_duplicate_keys", "optional_key", "read_config"]

T = TypeVar("T")

_NOT_NULL = "edge.config_reader.not_null"
_FOUND_CHARS = 60  # a longer value is shortened in messages
_NONE = type(None)


@dataclass(frozen=True)
class Where:
    """A place in a config file, and the error to raise there.

    Attributes:
        file: the file (a path, or ``archive:member``), or ``None`` for a document that did
            not come from a file.
        path: the key path inside it, dotted, with ``[i]`` for list items
            (``"keep_out.regions[0].polygon"``); ``""`` for the whole document.
        error: the format's :class:`~edge.errors.ConfigError` subclass.
    """

    file: object = None
    path: str = ""
    error: type[ConfigError] = ConfigError

    def key(self, name: object) -> Where:
        """The place of key ``name`` of the mapping here."""
        return dataclasses.replace(self, path=f"{self.path}.{name}" if self.path else str(name))

    def index(self, i: int) -> Where:
        """The place of item ``i`` of the list here."""
        return dataclasses.replace(self, path=f"{self.path}[{i}]")

    def fail(self, problem: str) -> NoReturn:
        """Raise :attr:`error` with ``<file>:<key.path>: <problem>``."""
        raise self.error.at(self.file, self.path, problem)

    def __str__(self) -> str:
        return ":".join(s for s in (None if self.file is None else str(self.file), self.path)
                        if s)


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads(..., object_pairs_hook=no_duplicate_keys)``: a JSON object that gives
    the same key twice is refused (the standard library keeps the last silently).

    Raises:
        ValueError: naming the key given twice.
    """
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} is given twice in one object; expected each "
                             "key once (the first would be ignored)")
        out[k] = v
    return out


def load_yaml(text: str) -> Any:
    """YAML (or JSON) text parsed as ``yaml.safe_load`` does, except that a mapping that
    gives the same key twice is refused (PyYAML keeps the last one silently, so a rules file
    with two ``max_step_action:`` lines would run with the second).

    Raises:
        yaml.YAMLError: bad syntax, or (``yaml.constructor.ConstructorError``) a key given
            twice, its ``problem_mark`` at the second and its ``problem`` naming the line
            of the first.
    """
    import yaml

    class _Strict(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        first_text: dict[Any, Any] = {}
        for key_node, _ in node.value:  # its own keys (a merged ``<<`` key may be overridden)
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: construct_mapping names it
                break
            if first is not None:
                # "1" and "true", "~" and "null": other text, the same key once read
                same = "" if first_text[key] == key_node.value else \
                    f" as {first_text[key]!r}, equal as a value"
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first at line "
                    f"{first.line + 1}{same}); expected each key once", key_node.start_mark)
            seen[key] = key_node.start_mark
            first_text[key] = key_node.value
        loader.flatten_mapping(node)
        return loader.construct_mapping(node, deep=True)

    _Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=_Strict)  # noqa: S506 - a SafeLoader subclass


def optional_key() -> Any:
    """Default of a dataclass field whose key may be left out (the field is then ``None``)
    but may not be given as null: a rules file's ``keep_out:`` with nothing under it is an
    error, not a missing rule. Annotate the field ``X | None``."""
    return dataclasses.field(default=None, metadata={_NOT_NULL: True})


def read_config(schema: type[T], data: Any, where: Where) -> T:
    """Check parsed JSON/YAML ``data`` against the dataclass ``schema`` and build it.

    Args:
        schema: a dataclass whose field annotations use the types listed in the module
            docstring (nested dataclasses included).
        data: the parsed document (or part of one), normally a mapping.
        where: the file, the key path of ``data`` inside it and the error class.
    Returns:
        A ``schema`` instance: lists become tuples where the annotation says ``tuple``,
        mappings become ``dict``; numbers, strings and booleans are kept as given.
    Raises:
        ConfigError: ``where.error``, naming the file and the key path, for an unknown or
            missing key, a value of the wrong type or one outside a ``Literal``.
        TypeError: ``schema`` is not a dataclass or uses a type the reader does not know
            (a mistake in the code, not in the file).
    """
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        raise TypeError(f"read_config: expected a dataclass, found {schema!r}")
    return _read_fields(schema, data, where)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _found(v: Any) -> str:
    r = "null" if v is None else repr(v)  # YAML and JSON both write it so
    return r if len(r) <= _FOUND_CHARS else r[:_FOUND_CHARS - 3] + "..."


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _is_mapping(tp: Any) -> bool:
    return get_origin(tp) in (Mapping, dict) or tp is dict or dataclasses.is_dataclass(tp)


def _in_literal(tp: Any, v: Any) -> bool:
    return any(v == a and type(v) is type(a) for a in get_args(tp))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _describe(tp: Any, plural: bool = False) -> str:
    """What a value of type ``tp`` looks like in a file (``"a list of 3 integers"``)."""
    origin = get_origin(tp)
    if tp is Any:
        return "values" if plural else "any value"
    if origin is Literal:
        return f"{'values from' if plural else 'one of'} {list(get_args(tp))}"
    if _is_union(tp):
        args = get_args(tp)
        text = " or ".join(_describe(a, plural) for a in args if a is not _NONE)
        return text + (" or null" if _NONE in args else "")
    simple = {bool: ("true or false", "true/false values"), int: ("an integer", "integers"),
              float: ("a finite number", "finite numbers"), str: ("a string", "strings")}
    if tp in simple:
        return simple[tp][plural]
    if origin in (tuple, list):
        args = get_args(tp)
        lists = "lists" if plural else "a list"
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):
            return f"{lists} of {_describe(args[0], True)}"
        if len(set(args)) == 1:
            return f"{lists} of {len(args)} {_describe(args[0], True)}"
        return f"{lists} [{', '.join(_describe(a) for a in args)}]"
    if _is_mapping(tp):
        args = get_args(tp)
        of = f" of {_describe(args[1], True)}" if len(args) == 2 and args[1] is not Any else ""
        return ("mappings" if plural else "a mapping") + of
    raise TypeError(f"config_reader: unsupported field type {tp!r}")


def _fits(tp: Any, v: Any) -> bool:
    """Whether ``v`` has the kind of value ``tp`` describes (one union alternative)."""
    origin = get_origin(tp)
    if tp is Any:
        return True
    if origin is Literal:
        return _in_literal(tp, v)
    if tp is bool:
        return isinstance(v, bool)
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if tp is float:
        return _is_number(v)
    if tp is str:
        return isinstance(v, str)
    if origin in (tuple, list):
        return isinstance(v, (list, tuple))
    if _is_mapping(tp):
        return isinstance(v, Mapping)
    raise TypeError(f"config_reader: unsupported field type {tp!r}")


def _read(tp: Any, v: Any, w: Where) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return v
    if _is_union(tp):
        args = get_args(tp)
        if v is None and _NONE in args:
            return None
        for alt in args:
            if alt is not _NONE and _fits(alt, v):
                return _read(alt, v, w)
        w.fail(f"expected {_describe(tp)}, found {_found(v)}")
    if origin is Literal or tp in (bool, int, str):
        if not _fits(tp, v):
            w.fail(f"expected {_describe(tp)}, found {_found(v)}")
        return v
    if tp is float:
        if not _is_number(v) or (isinstance(v, float) and not math.isfinite(v)):
            w.fail(f"expected {_describe(tp)}, found {_found(v)}")
        return v
    if origin in (tuple, list):
        if not isinstance(v, (list, tuple)):
            w.fail(f"expected {_describe(tp)}, found {_found(v)}")
        args = get_args(tp)
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):
            items = [_read(args[0], x, w.index(i)) for i, x in enumerate(v)]
            return items if origin is list else tuple(items)
        if len(v) != len(args):
            w.fail(f"expected {_describe(tp)}, found {_found(v)}")
        return tuple(_read(a, x, w.index(i)) for i, (a, x) in enumerate(zip(args, v, strict=True)))
    if dataclasses.is_dataclass(tp):
        return _read_fields(tp, v, w)
    if _is_mapping(tp):
        if not isinstance(v, Mapping):
            w.fail(f"expected {_describe(tp)}, found {_found(v)}")
        args = get_args(tp)
        if args and args[0] is not str:
            raise TypeError(f"config_reader: mapping keys must be str, found {tp!r}")
        value_type = args[1] if args else Any
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                w.fail(f"expected a mapping with string keys, found the key {_found(k)}")
            out[k] = _read(value_type, x, w.key(k))
        return out
    raise TypeError(f"config_reader: unsupported field type {tp!r}")


def _read_fields(cls: Any, v: Any, w: Where) -> Any:
    if not isinstance(v, Mapping):
        w.fail(f"expected a mapping, found {_found(v)}")
    hints = _hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    unknown = sorted(str(k) for k in v if k not in names)
    if unknown:
        raise w.error.unknown_keys(w.file, w.path, unknown, names)
    missing = [f.name for f in fields if f.name not in v and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise w.error.missing_keys(w.file, w.path, missing,
                                   [_describe(hints[n]) for n in missing])
    kw = {}
    for f in fields:
        if f.name not in v:
            continue
        tp, value, fw = hints[f.name], v[f.name], w.key(f.name)
        if f.metadata.get(_NOT_NULL) and _is_union(tp):  # X | None read as X
            tp = functools.reduce(operator.or_, (a for a in get_args(tp) if a is not _NONE))
        kw[f.name] = _read(tp, value, fw)
    return cls(**kw)
