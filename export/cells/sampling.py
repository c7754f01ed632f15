"""Sampling cells, controller conventions and data splits.

A cell is one physical setup: robot unit, controller convention (channel order and sign),
camera pose and intrinsics, lighting and colours. Splits are defined here, in code, and
recorded in every generated episode:

========================  ================  =====================  =====================
split                     robot             camera azimuth (deg)   convention
========================  ================  =====================  =====================
``train``, ``val``        training robots   training band          training conventions
``test_camera``           training robots   held-out band          training conventions
``test_robot``            held-out robots   training band          training conventions
``test_convention``       training robots   training band          held-out conventions
``test_all``              held-out robots   held-out band          held-out conventions
``stress``                the stress robot  stress band            held-out conventions
========================  ================  =====================  =====================

The ``stress`` split goes outside every other range at once: a robot no other split uses
(:data:`~export.cells.robots.STRESS_ROBOTS`), a camera azimuth, elevation, distance and
field of view outside the training and held-out bands, and dimmer or brighter light than
any training cell (:data:`STRESS_CAMERA`, :data:`STRESS_LIGHT`). Its chunks for the
reported evaluation are fixed as chunks 0-1 (32 cells).

Held-out conventions are a fixed set defined by a hash of the (permutation, signs) pair
(:func:`is_held_out_convention`, about one in eight of all conventions); training
conventions, and any relabelling a training augmentation applies, are drawn from the rest.
Every split draws its seeds from its own namespace, so cell ids never collide.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from export.cells.robots import HELD_OUT_ROBOTS, STRESS_ROBOTS, TRAIN_ROBOTS, robot_spec
from export.cells.scene import TABLE_CENTER
from export.errors import CellError

__all__ = [
    "SPLITS",
    "TRAIN_AZIMUTH_DEG",
    "HELD_OUT_AZIMUTH_DEG",
    "LIGHTINGS",
    "CellParams",
    "Convention",
    "chunk_seed",
    "is_held_out_convention",
    "sample_cell",
    "sample_convention",
]

SPLITS = ("train", "val", "test_camera", "test_robot", "test_convention", "test_all", "stress")
#: Camera azimuth bands (MuJoCo free camera, degrees; 180 looks at the robot's front).
TRAIN_AZIMUTH_DEG = (125.0, 205.0)
HELD_OUT_AZIMUTH_DEG = (205.0, 235.0)
ELEVATION_DEG = (-38.0, -12.0)
DISTANCE_M = (1.3, 1.8)
FOVY_DEG = (38.0, 52.0)
LOOKAT_M = (0.32, 0.0, 0.62)
LOOKAT_JITTER_M = 0.08

_HELD_OUT_CONVENTION_FRACTION = 32  # of 256 hash buckets

#: Stress-split camera ranges, each outside every other split's: (low, high) pairs, one
#: drawn at random per cell for each quantity.
STRESS_CAMERA = {
    "azimuth_deg": ((95.0, 122.0), (238.0, 255.0)),
    "elevation_deg": ((-52.0, -40.0), (-10.0, -5.0)),
    "distance_m": ((1.05, 1.25), (1.85, 2.1)),
    "fovy_deg": ((30.0, 36.0), (54.0, 60.0)),
}
#: Stress-split light: light intensity and ambient outside the training ranges.
STRESS_LIGHT = {"intensity": ((0.2, 0.42), (0.95, 1.0)), "ambient": ((0.12, 0.26), (0.55, 0.7))}


@dataclass(frozen=True)
class Convention:
    """A controller's channel convention relative to the robot's canonical joint order.

    Controller channel ``j`` drives canonical joint ``perm[j]`` with sign ``signs[j]``:
    ``a_ctrl[:, j] = signs[j] * a_canon[:, perm[j]]``.
    """

    perm: tuple[int, ...]
    signs: tuple[int, ...]

    def __post_init__(self) -> None:
        n = len(self.perm)
        if sorted(self.perm) != list(range(n)) or len(self.signs) != n \
                or any(s not in (-1, 1) for s in self.signs):
            raise CellError(f"invalid convention perm={self.perm} signs={self.signs}: expected a "
                            f"permutation of 0..{n - 1} and {n} signs of +-1")

    @property
    def is_identity(self) -> bool:
        """True for the robot's canonical order and signs."""
        return self.perm == tuple(range(len(self.perm))) and all(s == 1 for s in self.signs)

    def to_controller(self, canon: np.ndarray) -> np.ndarray:
        """Map canonical-order values ``[..., n]`` to controller order ``[..., n]``."""
        return canon[..., list(self.perm)] * np.asarray(self.signs, dtype=canon.dtype)

    def to_canonical(self, ctrl: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`to_controller`."""
        out = np.empty_like(ctrl)
        out[..., list(self.perm)] = ctrl * np.asarray(self.signs, dtype=ctrl.dtype)
        return out

    def compose(self, other: Convention) -> Convention:
        """The convention of relabelling ``other``'s controller channels by ``self``.

        ``self.compose(other).to_controller(x) == self.to_controller(other.to_controller(x))``.
        """
        perm = tuple(other.perm[p] for p in self.perm)
        signs = tuple(self.signs[j] * other.signs[self.perm[j]] for j in range(len(self.perm)))
        return Convention(perm, signs)


def is_held_out_convention(conv: Convention) -> bool:
    """True if ``conv`` belongs to the fixed held-out set (never used in training)."""
    key = f"{list(conv.perm)}|{list(conv.signs)}".encode()
    return hashlib.sha256(key).digest()[0] < _HELD_OUT_CONVENTION_FRACTION


def sample_convention(rng: np.random.Generator, num_dof: int, held_out: bool) -> Convention:
    """Draw a convention uniformly from the held-out set or from its complement."""
    for _ in range(10_000):
        conv = Convention(tuple(int(i) for i in rng.permutation(num_dof)),
                          tuple(int(s) for s in rng.choice([-1, 1], size=num_dof)))
        if is_held_out_convention(conv) == held_out:
            return conv
    raise CellError(f"could not draw a {'held-out' if held_out else 'training'} convention")


#: How the renderer may light a cell (:attr:`CellParams.lighting`).
LIGHTINGS = ("ambient", "lit", "shadowed")


@dataclass(frozen=True)
class CellParams:
    """Everything that defines one cell's appearance and controller convention.

    Angles in degrees (MuJoCo free-camera conventions), positions in metres, colours as
    linear RGB in [0, 1]. ``lighting`` says how the renderer lights the cell (one of
    :data:`LIGHTINGS`): ``"ambient"``, the renderer before its lights were placed (the
    ambient term alone, flat shading; every chunk rendered before the field existed), or
    ``"lit"``, the ambient term and both ``lights`` (diffuse shading that changes as a link
    turns, as a real cell's lamps give it), or ``"shadowed"``, lit, with both lights casting
    shadows (shadow maps) and a wood-grain texture on the table and a tiled one on the floor:
    the arm's shadow moves over textured and plain surfaces as it would under a real cell's
    lamps.
    """

    cell_id: str
    split: str
    robot: str
    azimuth_deg: float
    elevation_deg: float
    distance_m: float
    fovy_deg: float
    lookat: tuple[float, float, float]
    ambient_rgb: tuple[float, float, float]
    lights: tuple[dict[str, Any], ...]
    floor_rgb: tuple[float, float, float]
    wall_rgb: tuple[float, float, float]
    table_rgb: tuple[float, float, float]
    objects: tuple[dict[str, Any], ...]
    convention: Convention
    seed: int
    lighting: str = "ambient"

    def __post_init__(self) -> None:
        if self.lighting not in LIGHTINGS:
            raise ValueError(f"cell {self.cell_id}: lighting {self.lighting!r}: expected one "
                             f"of {list(LIGHTINGS)}")

    @property
    def camera_id(self) -> str:
        """Identifier of this cell's camera placement."""
        return f"{self.cell_id}-cam"

    @property
    def robot_id(self) -> str:
        """Identifier of this cell's robot unit."""
        return f"{self.cell_id}-{self.robot}"

    def to_json_dict(self) -> dict[str, Any]:
        """Strict-JSON description (stored in every episode's ``metadata.extra``)."""
        d = asdict(self)
        d["convention"] = {"perm": list(self.convention.perm),
                           "signs": list(self.convention.signs)}
        if self.lighting == "ambient":  # chunks from before the field stay byte-identical
            del d["lighting"]
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> CellParams:
        """Inverse of :meth:`to_json_dict` (chunk manifests, episode metadata)."""
        kw = dict(d)
        conv = kw.pop("convention")
        kw["convention"] = Convention(tuple(conv["perm"]), tuple(conv["signs"]))
        for key in ("lookat", "ambient_rgb", "floor_rgb", "wall_rgb", "table_rgb"):
            kw[key] = tuple(kw[key])
        kw["lights"] = tuple(kw["lights"])
        kw["objects"] = tuple(kw["objects"])
        return cls(**kw)

    def with_light(self, scale: float, only: int | None = None) -> CellParams:
        """The same cell with its ambient light and every light's diffuse colour scaled
        by ``scale`` (clipped at 1.0 per channel, MuJoCo's range): the cell after its
        lights were dimmed or brightened, or daylight changed. With ``only``, that one light
        alone (index into ``lights``; the ambient stays): one lamp dimmed or switched off,
        a change that differs across the picture.

        Raises:
            ValueError: a negative or non-finite ``scale``, an ``only`` out of range.
        """
        if not np.isfinite(scale) or scale < 0:
            raise ValueError(f"light scale: expected a finite value >= 0, found {scale}")
        if only is not None and not 0 <= only < len(self.lights):
            raise ValueError(f"light index: expected 0-{len(self.lights) - 1}, found {only}")
        return replace(
            self, ambient_rgb=(self.ambient_rgb if only is not None
                               else tuple(min(1.0, c * scale) for c in self.ambient_rgb)),
            lights=tuple({**li, "diffuse": [min(1.0, c * scale) for c in li["diffuse"]]}
                         if only is None or i == only else li
                         for i, li in enumerate(self.lights)))

    def camera_json(self) -> dict[str, Any]:
        """The camera part, for ``metadata.camera``."""
        return {"azimuth_deg": self.azimuth_deg, "elevation_deg": self.elevation_deg,
                "distance_m": self.distance_m, "fovy_deg": self.fovy_deg,
                "lookat_m": list(self.lookat)}


def chunk_seed(split: str, chunk: int) -> int:
    """The seed of one generation chunk; distinct splits and chunks never share seeds."""
    if split not in SPLITS:
        raise CellError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    if chunk < 0:
        raise CellError(f"chunk index must be >= 0, found {chunk}")
    digest = hashlib.sha256(f"syncedge-cells:{split}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _rgb(rng: np.random.Generator, lo: float, hi: float) -> tuple[float, float, float]:
    return tuple(float(x) for x in rng.uniform(lo, hi, size=3))  # type: ignore[return-value]


def sample_cell(rng: np.random.Generator, split: str, cell_id: str,
                robot: str | None = None) -> CellParams:
    """Draw one cell of ``split`` (see the module docstring for what each split varies).

    Args:
        rng: the generator to draw from (consumed).
        split: one of :data:`SPLITS`.
        cell_id: identifier to give the cell.
        robot: force a robot (must be allowed in the split), or ``None`` to draw one.

    Raises:
        CellError: unknown split, or a robot the split does not allow.
    """
    if split not in SPLITS:
        raise CellError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    held_robot = split in ("test_robot", "test_all")
    held_camera = split in ("test_camera", "test_all")
    held_conv = split in ("test_convention", "test_all", "stress")
    stress = split == "stress"
    allowed = STRESS_ROBOTS if stress else HELD_OUT_ROBOTS if held_robot else TRAIN_ROBOTS
    if robot is None:
        robot = str(rng.choice(allowed))
    elif robot not in allowed:
        raise CellError(f"robot {robot!r} is not in split {split!r}; expected one of "
                        f"{list(allowed)}")
    n = robot_spec(robot).num_dof
    az = HELD_OUT_AZIMUTH_DEG if held_camera else TRAIN_AZIMUTH_DEG
    seed = int(rng.integers(0, 2**63 - 1))
    lookat = tuple(float(c + rng.uniform(-LOOKAT_JITTER_M, LOOKAT_JITTER_M)) for c in LOOKAT_M)
    lights = []
    for _ in range(2):
        theta = rng.uniform(0, 2 * np.pi)
        radius = rng.uniform(0.8, 2.5)
        warm = rng.uniform(-0.25, 0.25)
        intensity = rng.uniform(0.5, 0.9)
        if stress:
            intensity = rng.uniform(*STRESS_LIGHT["intensity"][int(rng.integers(2))])
        lights.append({
            "pos": [float(radius * np.cos(theta)), float(radius * np.sin(theta)),
                    float(rng.uniform(1.5, 3.0))],
            "diffuse": [float(np.clip(intensity * (1 + warm), 0, 1)), float(intensity),
                        float(np.clip(intensity * (1 - warm), 0, 1))],
        })
    objects = []
    for _ in range(3):
        objects.append({
            "xy": [float(TABLE_CENTER[0] + rng.uniform(-0.2, 0.2)),
                   float(rng.uniform(-0.33, 0.33))],
            "rgb": list(_rgb(rng, 0.05, 0.95)),
        })
    cam = {"azimuth_deg": float(rng.uniform(*az)),
           "elevation_deg": float(rng.uniform(*ELEVATION_DEG)),
           "distance_m": float(rng.uniform(*DISTANCE_M)),
           "fovy_deg": float(rng.uniform(*FOVY_DEG))}
    ambient = _rgb(rng, 0.3, 0.5)
    if stress:
        cam = {k: float(rng.uniform(*v[int(rng.integers(2))])) for k, v in STRESS_CAMERA.items()}
        ambient = _rgb(rng, *STRESS_LIGHT["ambient"][int(rng.integers(2))])
    return CellParams(
        cell_id=cell_id,
        split=split,
        robot=robot,
        lookat=lookat,  # type: ignore[arg-type]
        ambient_rgb=ambient,
        **cam,
        lights=tuple(lights),
        floor_rgb=_rgb(rng, 0.1, 0.8),
        wall_rgb=_rgb(rng, 0.1, 0.9),
        table_rgb=_rgb(rng, 0.15, 0.85),
        objects=tuple(objects),
        convention=sample_convention(rng, n, held_out=held_conv),
        seed=seed,
    )
