"""The README shows the technician flow on the virtual cell (not only with hardware URLs),
says what it needs, and says what lives under SYNCEDGE_HOME; its commands parse."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    m = re.search(rf"^(#+) {re.escape(title)}\s*$", README, re.MULTILINE)
    assert m, f"README has no section {title!r}"
    level = len(m.group(1))
    rest = README[m.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


def _commands(text: str) -> list[list[str]]:
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" # ")[0].strip()
            if line.startswith("syncedge "):
                cmds.append(shlex.split(line)[1:])
    return cmds


def test_readme_has_the_virtual_cell_technician_flow_and_its_commands_parse() -> None:
    from edge.cli import build_parser

    text = _section("Technician flow on the virtual cell")
    assert "pip install '.[train]'" in text or "syncedge[train]" in text
    assert "scripts/install.sh" in text and "robot" in text  # the robot assets
    cmds = _commands(text)
    steps = [c[1] for c in cmds if c[0] == "calibrate"]
    for step in ("plan", "record", "check", "store", "validate", "verify"):
        assert step in steps, f"the flow lacks 'calibrate {step}'"
    assert all("sim://" in " ".join(c) for c in cmds if c[:2] in (["calibrate", "record"],
                                                                   ["calibrate", "verify"]))
    parser = build_parser()
    for argv in cmds:
        parser.parse_args(argv)  # SystemExit (a failed test) on a stale option


def test_readme_says_what_lives_under_syncedge_home() -> None:
    text = _section("The device state root: SYNCEDGE_HOME")
    for part in ("bundles/", "calibration/", "engines/", "checks/", "/var/lib/syncedge",
                 "~/.local/share/syncedge"):
        assert part in text, part
