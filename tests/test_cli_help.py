"""Every command's --help reads as plain text and explains the names it uses."""

from __future__ import annotations

import argparse

from edge.cli import build_parser
from edge.commands.helptext import plain


def _parsers(p: argparse.ArgumentParser, name: str = "syncedge"):
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_help_has_no_markup_and_defines_state_root() -> None:
    parsers = dict(_parsers(build_parser()))
    assert {"syncedge simulate", "syncedge model eval", "syncedge cache list"} <= set(parsers)
    for name, p in parsers.items():
        text = p.format_help()
        assert "``" not in text and ":mod:" not in text, name
        if "STATE_ROOT" in text and name != "syncedge":
            assert "syncedge --help" in text or "SYNCEDGE_HOME" in text, name
    assert "$SYNCEDGE_HOME" in parsers["syncedge"].format_help()
    assert "Writes into --out" in parsers["syncedge simulate"].format_help()


def test_plain_drops_roles_and_literal_quotes() -> None:
    assert plain("see :mod:`edge.state` and ``--out``\n") == "see edge.state and --out"
    assert plain(":func:`~edge.x.y` ok") == "edge.x.y ok"
    assert plain(None) == ""
