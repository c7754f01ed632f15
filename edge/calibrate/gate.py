"""The stale-calibration gate used by ``precheck``: warn or refuse when the camera moved.

Either a verification result written by ``syncedge calibrate verify --out FILE`` is read
(``--verification FILE``), or a live frame is taken (``--verify-camera SRC``) and compared
with the cached reference frame of the cell. ``--stale warn`` (default) prints a warning
and records it in the report; ``--stale refuse`` stops with :class:`StaleCalibrationError`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from edge.calibrate.errors import CalibrateError, StaleCalibrationError

__all__ = ["add_stale_args", "stale_gate"]


def add_stale_args(p: argparse.ArgumentParser) -> None:
    """``--verification FILE``, ``--verify-camera SRC``, ``--stale warn|refuse``."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--verification", metavar="FILE",
                   help="a result of 'syncedge calibrate verify --out FILE' for this cell")
    g.add_argument("--verify-camera", metavar="SRC",
                   help="take a live frame and compare it with the cell's reference frame "
                        "(needs --cell)")
    p.add_argument("--stale", choices=("warn", "refuse"), default="warn",
                   help="on a moved camera: warn (default) or refuse")


def _live_result(args: argparse.Namespace, model_sha256: str, camera_id: str,
                 robot_id: str) -> dict[str, Any]:
    from edge.cache.store import CalibrationCache, default_root
    from edge.cache.values import CacheKey
    from edge.calibrate.camera import open_camera
    from edge.calibrate.verify import compare_frames

    if not args.cell:
        raise CalibrateError("--verify-camera: needs --cell (the reference frame is in the "
                             "calibration cache)")
    root = Path(args.cache_dir) if args.cache_dir else default_root()
    with CalibrationCache(root) as cache:
        entry = cache.get(CacheKey(args.cell, camera_id, robot_id, model_sha256))
    if entry is None:
        raise CalibrateError(f"--verify-camera: no calibration cached for cell {args.cell!r}, "
                             f"camera {camera_id!r}, robot {robot_id!r} and this model")
    cam = open_camera(args.verify_camera)
    try:
        frame, _ = cam.read()
    finally:
        cam.close()
    return {"cell_id": args.cell, **compare_frames(entry.reference_frame, frame)}


def stale_gate(args: argparse.Namespace, model_sha256: str, camera_id: str | None,
               robot_id: str | None) -> str | None:
    """Apply the gate; returns a warning (or None when the calibration is valid/unchecked).

    Raises:
        StaleCalibrationError: ``--stale refuse`` and the camera moved.
        CalibrateError: an unreadable verification file or one for another cell.
    """
    if getattr(args, "verification", None):
        path = Path(args.verification)
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CalibrateError(f"{path}: expected a verification result (JSON), found an "
                                 f"error: {exc}") from None
        if not isinstance(result, dict) or "valid" not in result:
            raise CalibrateError(f"{path}: expected a verification result with 'valid', found "
                                 f"{type(result).__name__}")
        if args.cell and result.get("cell_id") not in (None, args.cell):
            raise CalibrateError(f"{path}: verification of cell {result.get('cell_id')!r}, "
                                 f"expected cell {args.cell!r}")
    elif getattr(args, "verify_camera", None):
        result = _live_result(args, model_sha256, camera_id or "", robot_id or "")
    else:
        return None
    if result["valid"]:
        return None
    what = ("the camera gives another resolution" if result.get("resolution_differs")
            else "the live frame does not show the cell" if result.get("matched") is False
            else "the camera moved")
    msg = (f"calibration of cell {result.get('cell_id')!r} is stale: {what} ("
           f"{'; '.join(result.get('reasons', []))}); run 'syncedge calibrate record' again")
    if args.stale == "refuse":
        raise StaleCalibrationError(msg)
    return msg
