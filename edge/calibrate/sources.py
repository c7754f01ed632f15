"""The joint stream and the robot spec of a calibration, named by URL or path.

``edge`` reads joint streams but does not implement them: :func:`open_joints` asks the
``joints`` entry of the ``syncedge.openers`` plug-in group (``edge/plugins.py``), which is
``firmware_bridge.url.stream_for_url`` (``dxl://``, ``sts://``, ``frame://``, ``ethercat://``,
``replay://``, ``loop://``, ``trace+``, and the virtual cell's ``sim://``).
:func:`robot_spec_for` reads a spec file, or asks the plug-in of the URL's scheme in the
``syncedge.robot_specs`` group (``sim://``: the virtual cell's spec in its controller's
channel order and signs). Cameras: :func:`edge.calibrate.camera.open_camera`.
"""

from __future__ import annotations

import dataclasses

from edge.calibrate.errors import PlanError
from edge.calibrate.spec import RobotSpec, load_robot_spec
from edge.joints import JointSource
from edge.plugins import entries, load

__all__ = ["JOINT_OPENERS", "ROBOT_SPECS", "open_joints", "robot_spec_for"]

#: The plug-in group whose ``joints`` entry opens a joint stream by URL.
JOINT_OPENERS = "syncedge.openers"
#: The plug-in group of robot specs by URL scheme.
ROBOT_SPECS = "syncedge.robot_specs"


def open_joints(url: str) -> JointSource:
    """Open the joint stream a URL names (opened; close it when done).

    Raises:
        UrlError (``firmware_bridge``): unknown scheme or bad option;
        MissingDependencyError: the transport's SDK or the virtual cell's MuJoCo is absent;
        DeviceGoneError: nothing at the path.
    """
    opener = load(JOINT_OPENERS, "joints", f"the joint stream {url!r}")
    stream: JointSource = opener(url)
    return stream


def robot_spec_for(text: str, frame_rate_hz: float | None = None) -> RobotSpec:
    """The robot spec a path (``.yaml``/``.json``) or a URL (``sim://cell?split=..&seed=..``)
    names, at ``frame_rate_hz`` when given (else the spec's own rate; 10 Hz for ``sim://``).

    Raises:
        PlanError: a spec file the planner refuses, or a URL scheme with no robot-spec
            plug-in (the known schemes are listed).
        MissingDependencyError: the plug-in needs an optional library that is absent.
    """
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        known = entries(ROBOT_SPECS)
        if scheme not in known:
            raise PlanError(f"robot spec {text!r}: expected a spec file (.yaml, .json) or a "
                            f"URL with one of the schemes {sorted(known)}, found {scheme!r}")
        spec_for_url = load(ROBOT_SPECS, scheme, f"the robot spec {text!r}")
        spec: RobotSpec = spec_for_url(text, frame_rate_hz)
        return spec
    spec = load_robot_spec(text)
    if frame_rate_hz:
        spec = dataclasses.replace(spec, frame_rate_hz=frame_rate_hz)
    return spec
