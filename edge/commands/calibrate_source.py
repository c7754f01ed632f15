"""Which cached calibration episode ``calibrate store --cell ID`` encodes.

A cell's entries in the calibration cache may hold different calibration episodes: each
model's entry keeps the episode in that model's timing and resolution (64x64 for the
reference model, 256x256 for the chain model's read). Encoding a context again reads, in
this order:

1. ``--from-model SHA``: the episode of the cell's entry for that model (sha256 or its first
   hex digits), when the model in use accepts it;
2. the episode of the model's own entry (its context was evicted, dropped as corrupt, or is
   encoded again): never another entry's;
3. the one episode the cell's other entries hold, when they hold one the model accepts;
   of several, the only one the model accepts, else the only one in the model's preferred
   resolution; otherwise the choice is the technician's: the refusal lists the episodes
   and the ``--from-model`` that picks each.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edge.calibrate.errors import CalibrateError

__all__ = ["CachedSource", "cached_source", "episode_size"]


@dataclass(frozen=True)
class CachedSource:
    """The cache entry whose episode is encoded, and why it was chosen.

    Attributes:
        entry: the verified :class:`edge.cache.values.Entry` (its episode, report,
            reference frame and ``forced`` flag are the new entry's).
        why: for the command's output, e.g. ``"its own cached episode (64x64 px)"``.
    """

    entry: Any
    why: str


def episode_size(episode: Any) -> str:
    """``WxH px`` of an episode's frames."""
    h, w = episode.resolution
    return f"{w}x{h} px"


def _from_model(cache: Any, infos: list[Any], prefix: str, where: str) -> Any:
    """The one entry of ``infos`` whose model sha256 starts with ``prefix``."""
    hits = [i for i in infos if i.key.model_sha256.startswith(prefix.lower())]
    if len(hits) != 1:
        found = ", ".join(i.key.model_sha256[:12] for i in infos)
        raise CalibrateError(f"--from-model {prefix}: expected the model sha256 (or its first "
                             f"hex digits) of one of the entries of {where}, found "
                             f"{len(hits)} matching ({found})")
    return cache.get(hits[0].key)


def cached_source(cache: Any, args: argparse.Namespace, cell_key: Any, model_sha256: str,
                  model_name: str, accepts: Callable[[Any], str | None],
                  preferred: Callable[[Any], bool]) -> CachedSource:
    """The cached entry of ``--cell`` whose calibration episode to encode for the model
    ``model_sha256`` (see the module docstring).

    Args:
        cache: an open :class:`edge.cache.store.CalibrationCache`.
        args: ``--from-model``.
        cell_key: the key of any entry of the cell, camera and robot (the command's lookup
            of ``--cell``, ``--camera-id`` and ``--robot-id``, which refuses a cell without
            entries or with several cameras or robots).
        model_sha256: the cache identity of the model in use.
        model_name: how messages name the model (``"model 2a89b44ab772..."``).
        accepts: ``None`` when the model can encode the entry's episode, else why not.
        preferred: whether the entry's episode is in the model's preferred form (its
            resolution), to choose among several the model accepts.

    Raises:
        CalibrateError: an episode the model does not accept, or several it accepts with
            no way to choose (naming them and the ``--from-model`` that picks each).
    """
    any_key = cell_key
    infos = cache.list(cell_id=any_key.cell_id, camera_id=any_key.camera_id,
                       robot_id=any_key.robot_id)
    where = f"cell {any_key.cell_id!r} (camera {any_key.camera_id}, robot {any_key.robot_id})"
    picked = getattr(args, "from_model", None)
    if picked:
        entry = _from_model(cache, infos, picked, where)
        why = accepts(entry)
        if why is not None:
            raise CalibrateError(f"--from-model {picked}: the cached episode of "
                                 f"{entry.key.short} ({episode_size(entry.episode)}) cannot "
                                 f"be encoded for {model_name}: {why}")
        return CachedSource(entry, f"the cached episode of {entry.key.short} "
                                   f"({episode_size(entry.episode)}, --from-model)")
    own = [i for i in infos if i.key.model_sha256 == model_sha256]
    if own:
        entry = cache.get(own[0].key)
        return CachedSource(entry, f"its own cached episode ({episode_size(entry.episode)})")
    groups: dict[str, list[Any]] = {}
    for info in infos:
        groups.setdefault(info.episode_digest, []).append(info)
    candidates = [cache.get(members[0].key) for members in groups.values()]
    verdicts = [(entry, accepts(entry)) for entry in candidates]
    usable = [entry for entry, why in verdicts if why is None]
    if not usable:
        listed = "; ".join(f"{e.key.short} ({episode_size(e.episode)}): {why}"
                           for e, why in verdicts)
        raise CalibrateError(f"calibration cache: {where} holds no calibration episode "
                             f"{model_name} can encode ({listed}); store a calibration "
                             f"recorded for it ('syncedge calibrate store EPISODE')")
    best = [entry for entry in usable if preferred(entry)]
    if len(usable) == 1 or len(best) == 1:
        entry = usable[0] if len(usable) == 1 else best[0]
        others = len(candidates) - 1
        also = (f"; the cell holds {others} other episode{'s' if others > 1 else ''}: "
                f"--from-model SHA picks another" if others else "")
        return CachedSource(entry, f"the cached episode of {entry.key.short} "
                                   f"({episode_size(entry.episode)}{also})")
    choices = ", ".join(
        f"{episode_size(e.episode)} of "
        + " and ".join(i.key.model_sha256[:12] for i in groups[e.info.episode_digest])
        for e in (best or usable))
    raise CalibrateError(f"calibration cache: {where} holds several calibration episodes "
                         f"{model_name} can encode ({choices}) and no entry of its own; "
                         f"pick the episode with --from-model SHA (the model sha256 of the "
                         f"entry that holds it, e.g. --from-model "
                         f"{(best or usable)[0].key.model_sha256[:12]})")
