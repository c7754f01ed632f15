"""Has the camera moved since the calibration? Compare a live frame with the reference.

Two measures, both robust to a lighting change:

- ORB features matched across the two frames (Hamming distance, cross-checked), and a
  similarity transform (shift, rotation, scale) fitted with RANSAC
  (``cv2.estimateAffinePartial2D``), used when at least ``min_inliers`` matches agree;
- phase correlation of the gradient-magnitude images (Sobel, Hanning window), which gives
  the shift alone and works on low-texture pictures.

The shift is that of the image centre, in pixels of the reference frame and as a share of
its width. The calibration stays valid while shift, rotation and scale change are all
within the tolerances (:class:`VerifyOptions`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edge.calibrate.camera import fit_frame
from edge.calibrate.errors import CalibrateError

__all__ = ["VerifyOptions", "compare_frames", "gradient_phase_shift"]


@dataclass(frozen=True)
class VerifyOptions:
    """Tolerances: shift as a share of the width, rotation in degrees, relative scale."""

    max_shift_frac: float = 0.01
    max_rotation_deg: float = 0.5
    max_scale_change: float = 0.01
    min_inliers: int = 15
    #: a rotation or scale change past its tolerance counts only where it moves the frame's
    #: corners by at least this many px: below a pixel the fit cannot tell it from its own
    #: error (a 64x64 reference shifted by half a pixel fitted as rotated 0.51 deg and
    #: scaled 1.36%, 0.4 and 0.6 px at the corners)
    min_visible_px: float = 1.0
    #: without an ORB transform, a phase-correlation peak below this means the live frame
    #: does not show the reference's scene (matched frames peak at 0.9-1.0; a covered
    #: camera at 0, a camera pointed away or a noise image at 0.0-0.14)
    min_phase_response: float = 0.2


def _grey(img: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY)


def _orb(ref: np.ndarray, live: np.ndarray) -> dict[str, Any] | None:
    import cv2

    # cv2's bundled stubs omit the legacy ORB_create alias, which exists at runtime
    orb = cv2.ORB_create(  # type: ignore[attr-defined]
        1000, fastThreshold=5, edgeThreshold=8, patchSize=15)
    k1, d1 = orb.detectAndCompute(ref, None)
    k2, d2 = orb.detectAndCompute(live, None)
    if d1 is None or d2 is None or len(k1) < 4 or len(k2) < 4:
        return None
    matches = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(d1, d2)
    if len(matches) < 4:
        return None
    src = np.array([k1[m.queryIdx].pt for m in matches], dtype=np.float32)
    dst = np.array([k2[m.trainIdx].pt for m in matches], dtype=np.float32)
    m, inl = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC,
                                         ransacReprojThreshold=1.5, maxIters=4000,
                                         confidence=0.999)
    if m is None:
        return None
    h, w = ref.shape
    centre = np.array([w / 2.0, h / 2.0, 1.0])
    shift = m @ centre - centre[:2]
    return {"matches": len(matches), "inliers": int(inl.sum()),
            "shift_px": [float(shift[0]), float(shift[1])],
            "rotation_deg": math.degrees(math.atan2(m[1, 0], m[0, 0])),
            "scale": float(math.hypot(m[0, 0], m[1, 0]))}


def gradient_phase_shift(ref: np.ndarray, live: np.ndarray,
                         weight: np.ndarray | None = None) -> dict[str, Any]:
    """The shift of ``live`` from ``ref`` (greyscale ``[H, W]``, any numeric dtype) by
    phase correlation of their gradient magnitudes (Sobel, Hanning window), which works on
    low-texture pictures and under a lighting change.

    Args:
        ref, live: the two frames, same size.
        weight: float ``[H, W]`` multiplying both gradient images (0 leaves a pixel out,
            e.g. a moving arm), or None.

    Returns:
        ``{"shift_px": [dx, dy] (px), "response": float (the correlation's peak, about 1
        for the same scene)}``.
    """
    import cv2

    def grad(g: np.ndarray) -> np.ndarray:
        f = g.astype(np.float32)
        m = cv2.magnitude(cv2.Sobel(f, cv2.CV_32F, 1, 0, ksize=3),
                          cv2.Sobel(f, cv2.CV_32F, 0, 1, ksize=3))
        return m if weight is None else m * weight.astype(np.float32)

    win = cv2.createHanningWindow(ref.shape[::-1], cv2.CV_32F)
    (dx, dy), response = cv2.phaseCorrelate(grad(ref), grad(live), win)
    return {"shift_px": [float(dx), float(dy)], "response": float(response)}


def compare_frames(reference: np.ndarray, live: np.ndarray,
                   opts: VerifyOptions | None = None) -> dict[str, Any]:
    """Compare a live frame with the reference frame (RGB uint8 ``[H, W, 3]`` each).

    A live frame of another size than the reference is a camera in another mode (or
    another camera): the calibration is not valid for it, and the first reason says so
    (``resolution_differs``). The live frame is then centre-cropped and resized to the
    reference's size so that the shift, rotation and scale are still measured.

    Returns:
        JSON-ready result: ``valid`` (bool), ``method`` (``"orb"`` or ``"phase"``),
        ``shift_px`` [x, y], ``shift_frac`` (of the width), ``rotation_deg``, ``scale``,
        ``reasons`` (what exceeded its tolerance), ``matched`` (False: the live frame does
        not show the reference's scene, and no shift is claimed), ``size`` and
        ``live_size`` ([H, W] px),
        ``resolution_differs``, both measures and the tolerances.
    Raises:
        CalibrateError: a frame that is not RGB uint8.
    """
    opts = opts or VerifyOptions()
    for name, img in (("reference", reference), ("live", live)):
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 \
                or img.shape[2] != 3:
            found = (img.dtype, img.shape) if isinstance(img, np.ndarray) else type(img)
            raise CalibrateError(f"verify: expected the {name} frame as uint8 [H, W, 3] RGB, "
                                 f"found {found}")
    live_hw = live.shape[:2]
    resolution_differs = live_hw != reference.shape[:2]
    live = fit_frame(live, reference.shape[:2])
    g_ref, g_live = _grey(reference), _grey(live)
    orb = _orb(g_ref, g_live)
    phase = gradient_phase_shift(g_ref, g_live)
    use_orb = orb is not None and orb["inliers"] >= opts.min_inliers
    if use_orb:
        assert orb is not None
        shift, rot, scale = orb["shift_px"], orb["rotation_deg"], orb["scale"]
    else:
        shift, rot, scale = phase["shift_px"], 0.0, 1.0
    w = reference.shape[1]
    shift_frac = math.hypot(*shift) / w
    reasons = []
    if resolution_differs:
        rh, rw = reference.shape[:2]
        reasons.append(f"resolution differs: the camera gives {live_hw[1]}x{live_hw[0]} px, "
                       f"the calibration's reference frame is {rw}x{rh} px (another camera "
                       f"mode or camera): set the camera to {rw}x{rh} or recalibrate the cell")
    half_diagonal = 0.5 * math.hypot(*reference.shape[:2])
    no_match = not use_orb and phase["response"] < opts.min_phase_response
    if no_match:
        reasons.append(f"the live frame does not show the reference's scene (no ORB "
                       f"transform; phase-correlation peak {phase['response']:.2f}, below "
                       f"{opts.min_phase_response}): the camera is covered, pointed elsewhere "
                       f"or sees another scene; check it, then verify again")
    elif shift_frac > opts.max_shift_frac:
        reasons.append(f"image shifted {math.hypot(*shift):.2f} px ({shift_frac:.2%} of the "
                       f"width; tolerance {opts.max_shift_frac:.2%})")
    if abs(rot) > opts.max_rotation_deg \
            and abs(math.radians(rot)) * half_diagonal >= opts.min_visible_px:
        reasons.append(f"image rotated {rot:+.2f} deg (tolerance {opts.max_rotation_deg})")
    if abs(scale - 1.0) > opts.max_scale_change \
            and abs(scale - 1.0) * half_diagonal >= opts.min_visible_px:
        reasons.append(f"image scaled x{scale:.4f} (tolerance {opts.max_scale_change:.2%})")
    return {"valid": not reasons, "method": "orb" if use_orb else "phase",
            "matched": not no_match,
            "shift_px": [round(v, 3) for v in shift], "shift_frac": round(shift_frac, 5),
            "rotation_deg": round(rot, 4), "scale": round(scale, 5), "reasons": reasons,
            "orb": orb, "phase": phase, "tolerances": asdict(opts),
            "size": [int(reference.shape[0]), int(reference.shape[1])],
            "live_size": [int(live_hw[0]), int(live_hw[1])],
            "resolution_differs": bool(resolution_differs)}
