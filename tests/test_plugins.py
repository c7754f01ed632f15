"""Plug-ins by entry-point group: the project's own table, what another distribution adds,
and the errors of an unknown or broken entry."""

from __future__ import annotations

import configparser
import importlib
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from edge import plugins
from edge.errors import MissingDependencyError
from edge.plugins import PLUGINS, PluginError, entries, load
from firmware_bridge.errors import UrlError
from firmware_bridge.url import stream_for_url

ROOT = Path(__file__).resolve().parent.parent


def _distribution(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """Write an installed distribution ``name`` (a ``.dist-info`` folder) and its modules
    under ``root``."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module, text in modules.items():
        (root / f"{module}.py").write_text(text)


@pytest.fixture()
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on ``sys.path`` where tests install distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


FAKE_STREAM = """
from firmware_bridge.loop import LoopStream


class FakeStream(LoopStream):
    URL_FORM = "fake://?joints=N"
"""


def test_setup_py_declares_exactly_the_plugin_table(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(tmp_path / "syncedge.egg-info" / "entry_points.txt")
    declared = {g: dict(parser[g]) for g in parser.sections() if g != "console_scripts"}
    assert declared == PLUGINS
    assert dict(parser["console_scripts"]) == {"syncedge": "edge.cli:main"}


def test_the_project_entries_do_not_need_installed_metadata(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    assert entries("syncedge.joint_streams") == PLUGINS["syncedge.joint_streams"]
    with stream_for_url("loop://?joints=2&rate_hz=0") as s:
        assert s.read().joints == 2
    from edge.cli import build_parser

    assert "calibrate" in build_parser().format_help()


def test_another_distribution_adds_a_joint_stream_scheme(site: Path) -> None:
    _distribution(site, "fakebus", "[syncedge.joint_streams]\nfake = fakebus_stream:FakeStream\n",
                  {"fakebus_stream": FAKE_STREAM})
    assert entries("syncedge.joint_streams")["fake"] == "fakebus_stream:FakeStream"
    with stream_for_url("fake://?joints=3&rate_hz=0") as s:
        assert type(s).__name__ == "FakeStream" and s.read().joints == 3
    with pytest.raises(UrlError, match=r"expected one of the schemes .*fake.* found 'nope'"):
        stream_for_url("nope://x")


def test_a_name_the_project_uses_stays_the_projects(site: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    _distribution(site, "fakebus", "[syncedge.joint_streams]\ndxl = fakebus_stream:FakeStream\n",
                  {"fakebus_stream": FAKE_STREAM})
    with caplog.at_level(logging.WARNING, logger="edge.plugins"):
        assert entries("syncedge.joint_streams")["dxl"] == \
            "firmware_bridge.dynamixel:DynamixelStream"
    assert "'dxl' = fakebus_stream:FakeStream from fakebus ignored" in caplog.text


def test_metadata_of_another_checkout_of_the_project_is_not_read(site: Path) -> None:
    _distribution(site, "syncedge", "[syncedge.commands]\nghost = edge.nothing:register\n", {})
    assert "ghost" not in entries("syncedge.commands")
    assert entries("syncedge.commands") == PLUGINS["syncedge.commands"]


def test_unknown_groups_names_and_broken_targets_are_errors(
        site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PluginError, match=r"plug-in group 'syncedge.nothing': expected one of"):
        entries("syncedge.nothing")
    with pytest.raises(PluginError, match=r"syncedge.cameras: expected one of \['sim'\], "
                                          r"found 'webcam'"):
        load("syncedge.cameras", "webcam")
    _distribution(site, "brokencam",
                  "[syncedge.cameras]\ngone = brokencam_gone:open\n"
                  "torchcam = brokencam_torch:open\nnoattr = brokencam_torch:nothing\n",
                  {"brokencam_torch": "import torch\n\n\ndef open(src):\n    return None\n"})
    with pytest.raises(PluginError, match=r"'gone' = brokencam_gone:open: cannot be imported "
                                          r"\(ModuleNotFoundError"):
        load("syncedge.cameras", "gone")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"the camera 'torchcam://x' needs the "
                                                     r"'torch' library.*syncedge\[train\]"):
        load("syncedge.cameras", "torchcam", "the camera 'torchcam://x'")


def test_a_missing_attribute_is_named(site: Path) -> None:
    _distribution(site, "halfcam", "[syncedge.cameras]\nhalf = halfcam_mod:nothing\n",
                  {"halfcam_mod": "VALUE = 1\n"})
    with pytest.raises(PluginError, match=r"halfcam_mod has no attribute 'nothing'"):
        load("syncedge.cameras", "half")


def test_sim_sources_open_through_their_groups() -> None:
    from edge.calibrate.camera import open_camera
    from edge.calibrate.sources import robot_spec_for

    spec = robot_spec_for("sim://cell?split=test_all&seed=3&size=64x48", 15.0)
    assert spec.frame_rate_hz == 15.0 and len(spec.dofs) >= 6
    try:
        cam = open_camera("sim://cell?split=test_all&seed=3&size=64x48&drop=0")
    except Exception as exc:  # pragma: no cover - machine without robot assets or GL
        pytest.skip(f"virtual cell unavailable: {exc}")
    try:
        frame, _ = cam.read()
        assert frame.shape == (48, 64, 3)
    finally:
        cam.close()


def test_an_unknown_robot_spec_scheme_lists_the_known_ones() -> None:
    from edge.calibrate.errors import PlanError
    from edge.calibrate.sources import robot_spec_for

    with pytest.raises(PlanError, match=r"expected a spec file \(.yaml, .json\) or a URL with "
                                        r"one of the schemes \['sim'\], found 'ftp'"):
        robot_spec_for("ftp://robots/panda.yaml")
