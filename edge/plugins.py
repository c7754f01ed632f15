"""Plug-ins: the entry-point groups through which a package reaches one above it.

The packages are layered (``kernels`` < ``edge`` < ``firmware_bridge`` < ``export``, see
docs/architecture.md) and import only down. Where a lower package needs what a higher one
provides (a subcommand group, the virtual cell's ``sim://`` camera and joint stream), the
higher one registers it in an entry-point group and the lower one looks it up here by name.
A group maps a name to ``"module:attribute"``, imported at first use.

The project's own entries are :data:`PLUGINS`; ``setup.py`` builds its ``entry_points`` from
this table, so the installed metadata lists the same. :func:`entries` takes the project's
entries from the table itself rather than from the metadata: a source checkout works without
``pip install -e .``, and metadata installed from another checkout of the project (which may
name other modules) cannot shadow them. Other installed distributions add entries through
the same groups; a name the project already uses stays the project's (the other entry is
logged and ignored).
"""

from __future__ import annotations

import importlib
import logging
import re
from importlib.metadata import entry_points
from typing import Any

from edge.errors import EdgeError, missing_dependency

__all__ = ["DISTRIBUTION", "GROUP_READERS", "PLUGINS", "PluginError", "entries", "load"]

log = logging.getLogger(__name__)

#: The project's distribution name: its entry points are :data:`PLUGINS` (read from here).
DISTRIBUTION = "syncedge"

#: Each group and the module that reads it (``tests/test_boundaries.py`` checks both).
GROUP_READERS: dict[str, str] = {
    "syncedge.commands": "edge.cli",
    "syncedge.cameras": "edge.calibrate.camera",
    "syncedge.robot_specs": "edge.calibrate.sources",
    "syncedge.openers": "edge.calibrate.sources",
    "syncedge.joint_streams": "firmware_bridge.url",
    "syncedge.chain_readers": "edge.commands.calibrate_chain",
}

#: The project's own entries: group -> name -> ``"module:attribute"``.
#:
#: - ``syncedge.commands``: subcommand group -> ``register(subparsers)``;
#: - ``syncedge.cameras``: URL scheme -> ``open(src) -> FrameSource``;
#: - ``syncedge.robot_specs``: URL scheme -> ``robot_spec(url, frame_rate_hz) -> RobotSpec``;
#: - ``syncedge.openers``: ``joints`` -> ``open(url) -> JointSource`` (opened);
#: - ``syncedge.joint_streams``: URL scheme -> ``JointStream`` class with ``from_url``;
#: - ``syncedge.chain_readers``: ``chain`` -> ``read(episode, size, fovy_deg,
#:   photometric_size, log) -> ChainCalibration`` (the chain model's calibration reader;
#:   keywords ``joint_scale``, and ``motions`` with ``motion_twins`` where motion is given,
#:   True unless ``--no-twins``);
#:   ``anchor`` -> ``anchor(chain, episode, start, start_joint_positions, log) ->
#:   ChainCalibration`` (the chain refined at a rollout's start frame).
PLUGINS: dict[str, dict[str, str]] = {
    "syncedge.commands": {
        "bridge": "firmware_bridge.cli:register",
        "bundle": "export.bundle.cli:register",
        "cache": "edge.commands.cache:register",
        "calibrate": "edge.commands.calibrate:register",
        "cells": "export.cells.cli:register",
        "doctor": "edge.commands.doctor:register",
        "export": "export.cli:register",
        "model": "export.model_cli:register",
        "precheck": "edge.commands.precheck:register",
        "simulate": "edge.commands.simulate:register",
    },
    "syncedge.cameras": {
        "sim": "export.cells.virtual:open_sim_camera",
    },
    "syncedge.robot_specs": {
        "sim": "export.cells.virtual:robot_spec_for_url",
    },
    "syncedge.openers": {
        "joints": "firmware_bridge.url:stream_for_url",
    },
    "syncedge.joint_streams": {
        "dxl": "firmware_bridge.dynamixel:DynamixelStream",
        "sts": "firmware_bridge.feetech:FeetechStream",
        "frame": "firmware_bridge.framed:FramedStream",
        "ethercat": "firmware_bridge.ethercat:EthercatStream",
        "replay": "firmware_bridge.replay:ReplayStream",
        "loop": "firmware_bridge.loop:LoopStream",
        "sim": "export.cells.virtual:SimJointStream",
    },
    "syncedge.chain_readers": {
        "chain": "export.models.chain_fit:read_chain_calibration",
        "anchor": "export.models.chain_fit:anchor_chain_to_start",
    },
}


class PluginError(EdgeError):
    """An unknown group or name, or a target that cannot be imported."""


def _normalise(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def entries(group: str) -> dict[str, str]:
    """Every entry of ``group``: name -> ``"module:attribute"``.

    The project's own (:data:`PLUGINS`) plus those of other installed distributions.

    Raises:
        PluginError: ``group`` is not one of :data:`PLUGINS`.
    """
    if group not in PLUGINS:
        raise PluginError(f"plug-in group {group!r}: expected one of {sorted(PLUGINS)}")
    out = dict(PLUGINS[group])
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        name = dist.metadata["Name"] if dist is not None else ""
        if name and _normalise(name) == DISTRIBUTION:
            continue  # the project's own come from PLUGINS
        if ep.name in out:
            if ep.value != out[ep.name]:
                log.warning("plug-in %s %r = %s from %s ignored: the name is taken by %s",
                            group, ep.name, ep.value, name or "an unnamed distribution",
                            out[ep.name])
            continue
        out[ep.name] = ep.value
    return out


def load(group: str, name: str, purpose: str | None = None) -> Any:
    """Import and return the target of ``name`` in ``group``.

    Args:
        group: an entry-point group of :data:`PLUGINS`.
        name: the entry's name (a subcommand, a URL scheme).
        purpose: what needs it, for the message of a missing optional library (default:
            the entry).

    Raises:
        PluginError: unknown group or name (listing the known names), or a target that
            cannot be imported or lacks its attribute.
        MissingDependencyError: the target needs an optional library that is not installed.
    """
    known = entries(group)
    if name not in known:
        raise PluginError(f"plug-in {group}: expected one of {sorted(known)}, found {name!r}")
    target = known[name]
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = missing_dependency(exc, purpose or f"the plug-in {group} {name!r}")
        if hint is not None:
            raise hint from exc
        raise PluginError(f"plug-in {group} {name!r} = {target}: cannot be imported "
                          f"({type(exc).__name__}: {exc})") from exc
    obj: Any = module
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"plug-in {group} {name!r} = {target}: {module_name} has no "
                              f"attribute {attr!r}") from None
    return obj
