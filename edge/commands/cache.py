"""``syncedge cache list|show|import|export|gc|remove|rebuild``: inspect and move calibrations.

Every verb takes ``--root DIR`` or its other name ``--cache-dir DIR``, as ``simulate``,
``precheck`` and ``calibrate`` call it (default: ``STATE_ROOT/calibration``; STATE_ROOT is
``$SYNCEDGE_HOME``, else ``/var/lib/syncedge`` on a device, else
``~/.local/share/syncedge``, see :mod:`edge.state`). Keys are written ``CELL/CAMERA/ROBOT/MODEL`` where MODEL is the model
sha256 or at least its first 4 hex digits.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from edge.commands.helptext import plain

__all__ = ["register"]


def _open(args: argparse.Namespace, writes: bool = False) -> Any:
    """The cache at ``--root`` (default: STATE_ROOT/calibration). Only a verb that adds
    entries (``writes``: ``import``) creates a cache where none is; for the others a
    ``--root`` that is not a folder is refused (``CacheError``), so a mistyped path is
    said, not silently made into an empty cache."""
    from edge.cache.store import CalibrationCache, default_root
    from edge.cache.values import CacheError

    if args.root is not None and Path(args.root).exists() and not Path(args.root).is_dir():
        raise CacheError(f"--root {args.root}: a file; expected a calibration cache root "
                         "folder")
    if args.root is not None and not writes and not Path(args.root).is_dir():
        raise CacheError(f"--root {args.root}: no such folder; expected a calibration "
                         "cache root (one that `syncedge calibrate store --cache-dir DIR` or "
                         "`syncedge cache import --root DIR` wrote)")
    return CalibrationCache(args.root if args.root is not None else default_root())


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _info_json(info: Any) -> dict[str, Any]:
    return {"key": info.key.to_json_dict(), "blobs": info.blobs(),
            "episode_bytes": info.episode_bytes, "context_bytes": info.context_bytes,
            "context_shape": list(info.context_shape), "context_format": info.context_format,
            "report_bytes": info.report_bytes,
            "reference_shape": list(info.reference_shape), "created_s": info.created_s,
            "last_used_s": info.last_used_s, "context_evicted_s": info.context_evicted_s,
            "forced": info.forced, "forced_reason": info.forced_reason,
            "flags": list(info.flags)}


def _run_list(args: argparse.Namespace) -> int:
    from edge.cache.records import read_records

    with _open(args) as cache:
        infos = cache.list(cell_id=args.cell, camera_id=args.camera, robot_id=args.robot,
                           model_prefix=args.model)
        quarantined = len(cache.quarantine())
        total = cache.total_bytes()
        records = 0 if infos else len(read_records(cache.root))
    if args.json:
        print(json.dumps({"entries": [_info_json(i) for i in infos],
                          "total_bytes": total, "quarantine_records": quarantined},
                         indent=2, sort_keys=True))
        return 0
    filters = [f"{n} {v}" for n, v in (("cell", args.cell), ("camera", args.camera),
                                       ("robot", args.robot), ("model", args.model)) if v]
    if not infos:
        where = args.root or "the default root"
        print(f"no calibration entries match {', '.join(filters)} under {where}" if filters
              else f"no calibration entries under {where}")
        if not filters and records:
            print(f"{records} entry record(s) under {where}/entries are not in the index "
                  f"(a lost or replaced index?): run 'syncedge cache rebuild"
                  f"{' --root ' + str(args.root) if args.root else ''}'")
    else:
        rows = [["CELL", "CAMERA", "ROBOT", "MODEL", "EPISODE", "CONTEXT", "LAST USED",
                 "FLAGS"]]
        for i in infos:
            rows.append([i.key.cell_id, i.key.camera_id, i.key.robot_id,
                         i.key.model_sha256[:12], _size(i.episode_bytes),
                         (_size(i.context_bytes) + (" chain" if i.context_format == "chain"
                                                    else "")) if i.context_sha256 else "-",
                         _when(i.last_used_s), ",".join(i.flags) or "-"])
        print(_table(rows))
        print(f"{len(infos)} entr{'y' if len(infos) == 1 else 'ies'}, {_size(total)} in all")
    if quarantined:
        print(f"{quarantined} quarantine record(s): see 'syncedge cache gc'")
    return 0


def _run_show(args: argparse.Namespace) -> int:
    out = []
    with _open(args) as cache:
        for text in args.keys:
            entry = cache.get(cache.find(text))  # verifies every blob
            assert entry is not None
            d = _info_json(entry.info)
            d["report"] = entry.report
            d["episode"] = {"frames": entry.episode.num_frames, "dof": entry.episode.num_dof,
                            "resolution": list(entry.episode.resolution),
                            "fps": entry.episode.metadata.fps}
            d["verified"] = True
            out.append(d)
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    for d in out:
        k = d["key"]
        print(f"{k['cell_id']}/{k['camera_id']}/{k['robot_id']}/{k['model_sha256']}")
        e = d["episode"]
        print(f"  episode    {e['frames']} frames, {e['dof']} DoF, {e['resolution'][1]}x"
              f"{e['resolution'][0]} px at {e['fps']:g} Hz ({_size(d['episode_bytes'])})")
        ctx = (", ".join(d["flags"]) if "context" not in d["blobs"] else
               f"chain calibration ({_size(d['context_bytes'])})"
               if d["context_format"] == "chain" else
               f"float32 {tuple(d['context_shape'])} ({_size(d['context_bytes'])})")
        print(f"  context    {ctx}")
        print(f"  reference  {d['reference_shape'][1]}x{d['reference_shape'][0]} px")
        print(f"  created    {_when(d['created_s'])}   last used {_when(d['last_used_s'])}")
        if d["forced"]:
            print(f"  FORCED     {d['forced_reason']}")
        r = d["report"]
        reasons = ", ".join(sorted({x.get("code", "?") for x in r.get("reasons", [])}))
        print(f"  coverage   {r.get('verdict', '?')}"
              + (f" ({reasons})" if reasons else "")
              + f", {len(r.get('dofs') or [])} DoFs checked (the whole report: --json)")
        print("  checksums  verified")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    from edge.cache.values import CacheConflictError, CacheKeyError

    if args.out.is_file() and not args.overwrite:  # before any work (a folder: export says)
        raise CacheConflictError(f"export --out {args.out}: already exists; expected a new "
                                 f"archive path (nothing was written): choose another path "
                                 f"or remove the file, or pass --overwrite to replace it")
    with _open(args) as cache:
        infos = cache.list(cell_id=args.cell, camera_id=args.camera, robot_id=args.robot,
                           model_prefix=args.model)
        if not infos:
            raise CacheKeyError(f"export --cell {args.cell}: expected at least one matching "
                                f"entry, found none (see: syncedge cache list)")
        path = cache.export([i.key for i in infos], args.out, overwrite=args.overwrite)
    print(f"exported {len(infos)} entr{'y' if len(infos) == 1 else 'ies'} to {path}")
    return 0


def _run_import(args: argparse.Namespace) -> int:
    from edge.cache.values import CacheArchiveError

    if args.file.is_dir():
        raise CacheArchiveError(f"{args.file}: a folder; expected an archive file that "
                                "'syncedge cache export' wrote")
    if not args.file.is_file():
        raise CacheArchiveError(f"{args.file}: no such archive file")
    import zipfile

    if not zipfile.is_zipfile(args.file):  # before a cache is made at a new --root
        raise CacheArchiveError(f"{args.file}: not an archive of 'syncedge cache export' "
                                "(not a zip file); nothing was imported")
    with _open(args, writes=True) as cache:
        keys = cache.import_(args.file, replace=args.replace)
    for k in keys:
        print(f"imported {k.short}")
    return 0


def _run_remove(args: argparse.Namespace) -> int:
    with _open(args) as cache:
        for text in args.keys:
            key = cache.find(text)
            cache.remove(key)
            print(f"removed {key.short}")
    return 0


def _run_gc(args: argparse.Namespace) -> int:
    with _open(args) as cache:
        rep = cache.gc(grace_s=args.grace_s)
    print(f"index check: {rep.integrity}")
    print(f"removed {len(rep.removed_blobs)} unreferenced blob(s) ({_size(rep.freed_bytes)}) "
          f"and {len(rep.removed_temp_files)} leftover temporary file(s)")
    if rep.quarantine:
        print(f"{len(rep.quarantine)} quarantine record(s):")
        for q in rep.quarantine:
            who = q.key.short if q.key else "(unreadable row)"
            print(f"  {_when(q.time_s)}  {who}  {q.role}: {q.reason}"
                  + (f" -> {q.file}" if q.file else ""))
    return 0 if rep.integrity == "ok" else 1


def _run_rebuild(args: argparse.Namespace) -> int:
    from edge.cache.rebuild import rebuild_index
    from edge.cache.store import default_root

    root = args.root if args.root is not None else default_root()
    rep = rebuild_index(root)
    n = len(rep.restored)
    print(f"restored {n} entr{'y' if n == 1 else 'ies'} into {root / 'index.sqlite3'} (from "
          f"{rep.sources['old_index_rows']} readable row(s) of the old index and "
          f"{rep.sources['records']} entry record(s))")
    if rep.in_place:
        print("the old index is healthy (SQLite's check passed): rebuilt in place, nothing "
              "moved to quarantine")
    for key in rep.without_context:
        print(f"  {key.short}: context blob missing or damaged; encode it again with "
              f"'syncedge calibrate store --cell {key.cell_id} --camera-id {key.camera_id} "
              f"--robot-id {key.robot_id} --model DIR' (DIR: the model with sha256 "
              f"{key.model_sha256[:12]}...)")
    for what, why in rep.skipped:
        print(f"skipped {what}: {why}")
    if rep.old_index:
        print(f"moved the old index to {rep.old_index}"
              + (f" (damaged: {rep.damage})" if rep.damage else ""))
    if rep.skipped:
        print("skipped entries: store the calibration again, or import it from an archive "
              "('syncedge cache import FILE')")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``cache`` subcommand group to ``subparsers`` (argparse)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", "--cache-dir", dest="root", type=Path, default=None,
                        metavar="DIR",
                        help="cache root folder (default: STATE_ROOT/calibration; see "
                             "syncedge --help); --cache-dir is the same option, as "
                             "simulate, precheck and calibrate name it")
    p = subparsers.add_parser(
        "cache", help="list, show, import, export and clean calibration cache entries",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cache_command", metavar="VERB", required=True)

    def selectors(sp: argparse.ArgumentParser, cell_required: bool) -> None:
        sp.add_argument("--cell", required=cell_required, help="cell id")
        sp.add_argument("--camera", help="camera id")
        sp.add_argument("--robot", help="robot id")
        sp.add_argument("--model", help="model sha256 or its first hex digits")

    sp = sub.add_parser("list", parents=[common], help="table of entries (no blob is read)")
    selectors(sp, False)
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sp.set_defaults(func=_run_list)

    sp = sub.add_parser("show", parents=[common], help="verify and describe entries")
    sp.add_argument("keys", nargs="+", metavar="KEY", help="CELL/CAMERA/ROBOT/MODEL_SHA256 "
                    "(model sha256 or at least 4 leading hex digits)")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.set_defaults(func=_run_show)

    sp = sub.add_parser("export", parents=[common], help="write entries to one archive file")
    selectors(sp, True)
    sp.add_argument("--out", type=Path, required=True,
                    help="archive file to write (a new path, unless --overwrite)")
    sp.add_argument("--overwrite", action="store_true",
                    help="replace an existing file at --out")
    sp.set_defaults(func=_run_export)

    sp = sub.add_parser("import", parents=[common], help="validate and store an archive")
    sp.add_argument("file", type=Path, help="archive written by 'syncedge cache export'")
    sp.add_argument("--replace", action="store_true", help="replace existing entries")
    sp.set_defaults(func=_run_import)

    sp = sub.add_parser("remove", parents=[common], help="delete entries")
    sp.add_argument("keys", nargs="+", metavar="KEY", help="CELL/CAMERA/ROBOT/MODEL_SHA256")
    sp.set_defaults(func=_run_remove)

    sp = sub.add_parser("gc", parents=[common],
                        help="delete unreferenced blobs, check the index, report quarantine")
    sp.add_argument("--grace-s", type=float, default=3600.0,
                    help="keep unreferenced files younger than this (s; default 3600)")
    sp.set_defaults(func=_run_gc)

    sp = sub.add_parser(
        "rebuild", parents=[common],
        help="rebuild a corrupt or lost index from the entry records and the blobs",
        description="Rebuild ROOT/index.sqlite3 from the readable rows of the old index and "
                    "the entry records under ROOT/entries/, restoring every entry whose "
                    "episode, report and reference blobs verify (a missing or damaged "
                    "context is left out: encode it again with 'syncedge calibrate store "
                    "--cell'). A healthy index is rebuilt in place; a damaged one moves to "
                    "ROOT/quarantine/. Stop other processes using the cache first.")
    sp.set_defaults(func=_run_rebuild)
