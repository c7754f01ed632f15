"""A hand-made reading of the calibration as a kinematic chain of rigid image transforms.

:mod:`export.calibration_flow` adds every DoF's dense flow, which cannot say where a link
goes once several joints move. This reading keeps the arm rigid instead:

1. For each swept DoF ``c``, the dense flow (OpenCV DIS) from the home frame to the
   sweep's pose at 1.0 of its amplitude ``A_c`` gives the pixels that move with ``c``
   (``M_c``: flow above :data:`MOVE_PX`) and, fitted robustly over them, a 2-D affine map
   ``P_c`` (``cv2.estimateAffine2D``). Its matrix logarithm ``X_c = log P_c`` is the DoF's
   image-plane generator: the map at a joint offset ``dq`` is ``exp(dq / A_c * X_c)``
   (rotation about a pivot, scale and shear grow with the angle and extrapolate beyond
   the swept amplitude).
2. The chain order comes from the masks: a DoF is proximal to another when its moving
   pixels contain most of the other's. A pixel's *link* is the most distal DoF whose mask
   holds it; its map is the product of exponentials of its ancestors, proximal first
   (Brockett's product-of-exponentials form of a serial chain, Murray, Li and Sastry,
   "A Mathematical Introduction to Robotic Manipulation", 1994, ch. 3, taken to the image
   plane, where it is a first-order approximation).
3. A frame is rendered backwards: for each output pixel and each link (distal first), the
   link's inverse map gives the source in the start frame; the first link whose mask
   holds that source gives the colour. Pixels the arm covered at the start and no link
   covers now are filled from the calibration frames that showed them uncovered, else
   inpainted (``cv2.inpaint``).

It assumes the rollout starts near the calibration's home pose (the start frame is
aligned to the home frame by DIS flow, which absorbs a small offset), and that joint axes
are not far from the image plane's normal (otherwise the affine map is a poor first-order
model of the projected motion). No learning, no model file:
``syncedge model eval-frames --model chain=calchain:-``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CalibrationChain", "MOVE_PX"]

#: Flow magnitude (px) above which a home-frame pixel moves with a DoF's full sweep.
MOVE_PX = 0.75
#: Share of a DoF's moving pixels another DoF's must hold to count as its ancestor.
ANCESTOR_SHARE = 0.6
#: uint8 level a channel must change by for a pixel to count as changed by a sweep.
CHANGE_LEVEL = 12
_UPSCALE = 4  # DIS on 64x64 frames is coarse; flows are measured at 4x and scaled back


def _dis_flow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 ``[H, W, 2]`` flow ``u`` with ``a(x) ~ b(x + u(x))`` (uint8 RGB frames)."""
    import cv2

    h, w = a.shape[:2]
    big = (w * _UPSCALE, h * _UPSCALE)
    ga = cv2.resize(cv2.cvtColor(a, cv2.COLOR_RGB2GRAY), big, interpolation=cv2.INTER_CUBIC)
    gb = cv2.resize(cv2.cvtColor(b, cv2.COLOR_RGB2GRAY), big, interpolation=cv2.INTER_CUBIC)
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)  # type: ignore[attr-defined]
    u = dis.calc(ga, gb, None)
    return cv2.resize(u, (w, h), interpolation=cv2.INTER_AREA) / _UPSCALE


def _logm3(m: np.ndarray) -> np.ndarray:
    """Real logarithm of a 3x3 affine matrix near the identity (series of ``log(I + E)``)."""
    e = m - np.eye(3)
    if np.abs(e).max() < 0.5:
        out, p = np.zeros((3, 3)), np.eye(3)
        for k in range(1, 40):
            p = p @ e
            out += ((-1) ** (k + 1)) * p / k
        return out
    # far from the identity: eigen-decomposition (complex pairs give a real result)
    w, v = np.linalg.eig(m)
    return np.real(v @ np.diag(np.log(w.astype(complex))) @ np.linalg.inv(v))


def _expm3(x: np.ndarray) -> np.ndarray:
    """Matrix exponential of a 3x3 matrix by scaling and squaring."""
    n = max(0, int(np.ceil(np.log2(max(np.abs(x).sum(1).max(), 1e-12)))) + 1)
    a = x / (2 ** n)
    out, p = np.eye(3), np.eye(3)
    for k in range(1, 12):
        p = p @ a / k
        out += p
    for _ in range(n):
        out = out @ out
    return out


class CalibrationChain:
    """The chain reading of one calibration episode (see the module docstring).

    Args:
        cal_frames: uint8 ``[K*L+1, H, W, 3]`` calibration frames in the model's timing.
        cal_actions: float32 ``[K*L+1, A]`` their actions (padded channels zero), rad.
        segment_frames: L (8); out_rows: the outward action rows of a segment, (0, 3).
    """

    def __init__(self, cal_frames: np.ndarray, cal_actions: np.ndarray,
                 segment_frames: int = 8, out_rows: tuple[int, int] = (0, 3)) -> None:
        import cv2

        k = (len(cal_frames) - 1) // segment_frames
        seg = cal_actions[:k * segment_frames].reshape(k, segment_frames, -1)
        energy = np.abs(seg[:, out_rows[0]:out_rows[1]]).sum(1)  # (segments, channels)
        self.h, self.w = cal_frames.shape[1:3]
        self.home = cal_frames[0]
        gx, gy = np.meshgrid(np.arange(self.w, dtype=np.float32),
                             np.arange(self.h, dtype=np.float32))
        self._grid = (gx, gy)
        self.dofs: list[int] = []
        self.amp: dict[int, float] = {}
        self.gen: dict[int, np.ndarray] = {}
        self.mask: dict[int, np.ndarray] = {}
        self._views: list[tuple[np.ndarray, int, float]] = []  # (frame, dof, sweep fraction)
        for c in range(cal_actions.shape[1]):
            if energy[:, c].max() <= 0:
                continue
            s = int(energy[:, c].argmax())
            st = s * segment_frames
            amp = float(seg[s, out_rows[0]:out_rows[1], c].sum())
            if abs(amp) < 1e-6:
                continue
            home, pose = cal_frames[st], cal_frames[st + 3]
            u = _dis_flow(home, pose)  # home(x) ~ pose(x + u)
            # moving pixels: flow above MOVE_PX where the sweep changed the picture (DIS
            # smooths flow into flat background, which never changes)
            changed = np.zeros((self.h, self.w), bool)
            for j in (1, 2, 3):
                diff = np.abs(cal_frames[st + j].astype(np.int16) - home.astype(np.int16))
                changed |= diff.max(-1) > CHANGE_LEVEL
            changed = cv2.morphologyEx(changed.astype(np.uint8), cv2.MORPH_CLOSE,
                                       np.ones((3, 3), np.uint8)).astype(bool)
            moving = (np.linalg.norm(u, axis=-1) > MOVE_PX) & changed
            moving = cv2.morphologyEx(moving.astype(np.uint8), cv2.MORPH_OPEN,
                                      np.ones((2, 2), np.uint8)).astype(bool)
            if moving.sum() < 6:
                continue
            src = np.stack([gx[moving], gy[moving]], -1).astype(np.float32)
            dst = src + u[moving]
            a, _ = cv2.estimateAffine2D(src, dst, ransacReprojThreshold=1.0)
            if a is None:
                continue
            p = np.vstack([a, [0.0, 0.0, 1.0]])
            self.dofs.append(c)
            self.amp[c] = amp
            self.gen[c] = _logm3(p)
            self.mask[c] = moving
            for j, r in ((1, 0.25), (2, 0.75), (3, 1.0)):
                self._views.append((cal_frames[st + j], c, r))
        # chain: ancestors of d are the DoFs whose moving pixels hold most of d's
        self.ancestors: dict[int, list[int]] = {}
        for d in self.dofs:
            md = self.mask[d]
            anc = [c for c in self.dofs if c != d and self.mask[c].sum() > md.sum()
                   and (self.mask[c] & md).sum() >= ANCESTOR_SHARE * md.sum()]
            self.ancestors[d] = sorted(anc, key=lambda c: -int(self.mask[c].sum()))
        # a pixel's link: the most distal (smallest-mask) DoF that moves it
        order = sorted(self.dofs, key=lambda c: int(self.mask[c].sum()))
        self.link = np.full((self.h, self.w), -1, np.int64)
        for c in reversed(order):
            self.link[self.mask[c]] = c
        self.order = order  # distal first
        self.arm = self.link >= 0
        self._background = self._estimate_background(cal_frames)

    # -- maps --------------------------------------------------------------------------
    def link_map(self, d: int, dq: np.ndarray) -> np.ndarray:
        """3x3 forward map (home pixel -> pixel) of link ``d`` at joint offsets ``dq``."""
        m = np.eye(3)
        for c in self.ancestors[d] + [d]:  # proximal first: exp(X_1 q_1) ... exp(X_d q_d)
            m = m @ _expm3(self.gen[c] * (float(dq[c]) / self.amp[c]))
        return m

    def _estimate_background(self, cal_frames: np.ndarray) -> np.ndarray:
        """float32 ``[H, W, 3]`` background behind the arm's home pixels (NaN: never seen)."""
        import cv2

        acc = np.zeros((self.h, self.w, 3), np.float64)
        cnt = np.zeros((self.h, self.w), np.float64)
        for frame, c, r in self._views:
            dq = np.zeros(max(self.dofs) + 1)
            dq = np.zeros(64)
            dq[c] = r * self.amp[c]
            covered = cv2.dilate(self.arm_mask(dq).astype(np.uint8),
                                 np.ones((3, 3), np.uint8)).astype(bool)
            free = self.arm & ~covered
            acc[free] += frame[free]
            cnt[free] += 1
        out = np.full((self.h, self.w, 3), np.nan, np.float32)
        seen = cnt > 0
        out[seen] = (acc[seen] / cnt[seen, None]).astype(np.float32)
        return out

    # -- rendering ---------------------------------------------------------------------
    def _link_grid(self, d: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Home-frame source coordinates of every output pixel under link ``d`` at ``q``."""
        gx, gy = self._grid
        inv = np.linalg.inv(self.link_map(d, q))
        sx = (inv[0, 0] * gx + inv[0, 1] * gy + inv[0, 2]).astype(np.float32)
        sy = (inv[1, 0] * gx + inv[1, 1] * gy + inv[1, 2]).astype(np.float32)
        return sx, sy

    def arm_mask(self, q: np.ndarray) -> np.ndarray:
        """bool ``[H, W]``: the moving links' pixels at joint offsets ``q`` from home."""
        import cv2

        cov = np.zeros((self.h, self.w), bool)
        for d in self.order:
            sx, sy = self._link_grid(d, q)
            cov |= cv2.remap((self.link == d).astype(np.float32), sx, sy, cv2.INTER_LINEAR,
                             borderValue=0.0) > 0.5
        return cov

    def render(self, start: np.ndarray, q: np.ndarray,
               q0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One frame at joint offsets ``q`` ``[A]`` (rad from home, channel order).

        ``start`` uint8 ``[H, W, 3]`` is the frame at offsets ``q0`` (zeros: home).
        Returns ``(frame uint8 [H, W, 3], arm mask bool [H, W])``.
        """
        import cv2

        q0 = np.zeros_like(q) if q0 is None else q0
        out = start.copy()
        claimed = np.zeros((self.h, self.w), bool)
        vis0 = {}
        for d in self.order:  # which home link pixels the start frame shows
            sx, sy = self._link_grid(d, q0)
            vis0[d] = cv2.remap((self.link == d).astype(np.float32), sx, sy, cv2.INTER_LINEAR,
                                borderValue=0.0) > 0.5
        arm0 = np.zeros((self.h, self.w), bool)
        for d in self.order:
            arm0 |= vis0[d]
        for d in self.order:  # distal links first: they claim their pixels first
            hx, hy = self._link_grid(d, q)  # output -> home
            lm = cv2.remap((self.link == d).astype(np.float32), hx, hy, cv2.INTER_LINEAR,
                           borderValue=0.0) > 0.5
            hit = lm & ~claimed
            if not hit.any():
                continue
            f0 = self.link_map(d, q0)  # home -> start
            sx = (f0[0, 0] * hx + f0[0, 1] * hy + f0[0, 2]).astype(np.float32)
            sy = (f0[1, 0] * hx + f0[1, 1] * hy + f0[1, 2]).astype(np.float32)
            seen = cv2.remap(vis0[d].astype(np.float32), sx, sy, cv2.INTER_LINEAR,
                             borderValue=0.0) > 0.5
            col = np.where(seen[..., None],
                           cv2.remap(start, sx, sy, cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_REPLICATE),
                           cv2.remap(self.home, hx, hy, cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_REPLICATE))
            out[hit] = col[hit]
            claimed |= hit
        hole = arm0 & ~claimed
        if hole.any():
            bg = np.where(self.arm[..., None], self._background,
                          self.home.astype(np.float32))
            known = hole & np.isfinite(bg[..., 0])
            out[known] = np.clip(bg[known] + 0.5, 0, 255).astype(np.uint8)
            rest = hole & ~known
            if rest.any():
                out = cv2.inpaint(out, rest.astype(np.uint8), 2, cv2.INPAINT_TELEA)
        return out, claimed

    def rollout(self, start: np.ndarray, actions: np.ndarray,
                q0: np.ndarray | None = None) -> np.ndarray:
        """start uint8 ``[H, W, 3]`` at offsets ``q0`` ``[A]`` (rad from home; None: home),
        actions ``[M, T, A]`` (rad) -> uint8 ``[M, T, H, W, 3]``."""
        q0 = np.zeros(actions.shape[-1]) if q0 is None else np.asarray(q0, np.float64)
        q = q0 + np.cumsum(actions.astype(np.float64), axis=1)  # (M, T, A)
        out = np.empty((*actions.shape[:2], *start.shape), np.uint8)
        if not self.dofs:
            out[:] = start
            return out
        for m in range(actions.shape[0]):
            for t in range(actions.shape[1]):
                out[m, t] = self.render(start, q[m, t], q0)[0]
        return out
