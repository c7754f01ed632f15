"""A hand-made reading of the calibration: per-DoF optical flow, superposed.

The baseline the learned model must beat at reading a calibration episode. For each DoF,
the dense optical flow (OpenCV DIS) from each of its outward sweep poses (0.25, 0.75 and 1
of the amplitude ``A``) back to the home frame gives the backward flow ``G_j(r)`` at sweep
fraction ``r``; flow between the poses is interpolated linearly in ``r``, beyond the
amplitude it is extrapolated, and the other direction is ``-G_j(|r|)``. A step's frame is
the start frame resampled at ``x + sum_j G_j(dq_j / A_j)(x)``, ``dq`` the accumulated
action: every DoF's motion from the calibration alone, as if the DoFs' flows added up and
did not depend on the pose (they do; the figure shows how far that gets).

No learning, no model file: ``syncedge model eval-frames --model flow=calflow:-``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CalibrationFlow"]

_POSES = np.array([0.0, 0.25, 0.75, 1.0])


def _dis_flow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 ``[H, W, 2]`` flow ``u`` with ``a(x) ~ b(x + u(x))`` (uint8 RGB frames)."""
    import cv2

    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)  # type: ignore[attr-defined]
    return dis.calc(cv2.cvtColor(a, cv2.COLOR_RGB2GRAY), cv2.cvtColor(b, cv2.COLOR_RGB2GRAY),
                    None)


class CalibrationFlow:
    """Flow bases of one calibration episode (see the module docstring).

    Args:
        cal_frames: uint8 ``[K*L+1, H, W, 3]`` calibration frames in the model's timing.
        cal_actions: float32 ``[K*L+1, A]`` their actions (padded channels zero).
        segment_frames: L (8); out_rows: the outward action rows of a segment, (0, 3).
    """

    def __init__(self, cal_frames: np.ndarray, cal_actions: np.ndarray,
                 segment_frames: int = 8, out_rows: tuple[int, int] = (0, 3)) -> None:
        k = (len(cal_frames) - 1) // segment_frames
        seg = cal_actions[:k * segment_frames].reshape(k, segment_frames, -1)
        energy = np.abs(seg[:, out_rows[0]:out_rows[1]]).sum(1)  # (segments, channels)
        self.h, self.w = cal_frames.shape[1:3]
        self.bases: dict[int, tuple[float, list[np.ndarray]]] = {}
        for c in range(cal_actions.shape[1]):
            if energy[:, c].max() <= 0:
                continue
            s = int(energy[:, c].argmax())
            st = s * segment_frames
            amp = float(seg[s, out_rows[0]:out_rows[1], c].sum())
            if abs(amp) < 1e-6:
                continue
            home = cal_frames[st]
            flows = [np.zeros((self.h, self.w, 2), np.float32)]
            flows += [_dis_flow(cal_frames[st + p], home) for p in (1, 2, 3)]
            self.bases[c] = (amp, flows)
        gx, gy = np.meshgrid(np.arange(self.w, dtype=np.float32),
                             np.arange(self.h, dtype=np.float32))
        self._grid = (gx, gy)

    def field(self, dq: np.ndarray) -> np.ndarray:
        """float32 ``[H, W, 2]`` backward flow for accumulated actions ``dq`` ``[A]``."""
        u = np.zeros((self.h, self.w, 2), np.float32)
        for c, (amp, g) in self.bases.items():
            r = float(dq[c]) / amp
            sign, r = (1.0 if r >= 0 else -1.0), abs(r)
            if r <= 1.0:
                i = min(int(np.searchsorted(_POSES, r, side="right")) - 1, 2)
                t = (r - _POSES[i]) / (_POSES[i + 1] - _POSES[i])
                f = (1 - t) * g[i] + t * g[i + 1]
            else:
                f = g[3] * r
            u += sign * f
        return u

    def rollout(self, start: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """start uint8 ``[H, W, 3]``, actions ``[M, T, A]`` -> uint8 ``[M, T, H, W, 3]``."""
        import cv2

        gx, gy = self._grid
        q = np.cumsum(actions.astype(np.float64), axis=1)  # (M, T, A)
        out = np.empty((*actions.shape[:2], *start.shape), np.uint8)
        for m in range(actions.shape[0]):
            for t in range(actions.shape[1]):
                u = self.field(q[m, t])
                out[m, t] = cv2.remap(start, gx + u[..., 0], gy + u[..., 1], cv2.INTER_LINEAR,
                                      borderMode=cv2.BORDER_REPLICATE)
        return out
