"""Write or check the manifest of a folder of kept chain calibrations (evaluation fits).

    python scripts/chain_fits_manifest.py bench/chain_fits/precheck \\
        --command "syncedge model eval-precheck --cells 12 --chain --chain-fits bench/chain_fits/precheck ..."
    python scripts/chain_fits_manifest.py bench/chain_fits/precheck --check

The evaluations that read a chain from each cell's calibration sweep (``syncedge model
eval-precheck --chain --chain-fits DIR``, ``scripts/chain_fit_eval.py --fits DIR``) spend
about 80 s per cell on 2 CPU cores reading it, and reuse a kept one. The kept chains are
committed so that a later run extends the same cells instead of reading them again; this
manifest (``DIR/manifest.json``) records each file's sha256 and size, the commands that
wrote them (appended, one per run) and the code they were read with (the git commit).
``--check`` verifies every listed file and names any that is missing, changed or unlisted
(exit 1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FORMAT = "syncedge.chain_fits_manifest"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _commit(folder: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True,
                             text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def build(folder: Path, command: str | None) -> dict:
    """The manifest of ``folder``'s ``*.npz`` files, keeping the earlier manifest's commands
    and adding ``command`` (with the commit and the time) when given."""
    old: dict = {}
    path = folder / "manifest.json"
    if path.is_file():
        old = json.loads(path.read_text())
    runs = list(old.get("runs", []))
    if command:
        runs.append({"command": command, "commit": _commit(folder),
                     "utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    files = {p.name: {"sha256": _sha256(p), "bytes": p.stat().st_size}
             for p in sorted(folder.glob("*.npz"))}
    return {"format": FORMAT, "schema_version": 1, "runs": runs, "files": files}


def check(folder: Path) -> list[str]:
    """Problems with ``folder`` against its manifest (empty: all good)."""
    path = folder / "manifest.json"
    if not path.is_file():
        return [f"{path}: no manifest; write it with {Path(__file__).name} {folder} "
                "--command '...'"]
    d = json.loads(path.read_text())
    if d.get("format") != FORMAT:
        return [f"{path}:format: expected {FORMAT!r}, found {d.get('format')!r}"]
    problems = []
    listed = d.get("files", {})
    for name, rec in listed.items():
        f = folder / name
        if not f.is_file():
            problems.append(f"{f}: listed in the manifest but missing")
        elif _sha256(f) != rec["sha256"]:
            problems.append(f"{f}: sha256 differs from the manifest's")
    for f in sorted(folder.glob("*.npz")):
        if f.name not in listed:
            problems.append(f"{f}: not in the manifest")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("folder", help="a folder of kept chain calibrations (*.npz)")
    p.add_argument("--command", help="the command that wrote (or added to) the files")
    p.add_argument("--check", action="store_true", help="verify instead of writing")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"{folder}: not a folder", file=sys.stderr)
        return 2
    if args.check:
        problems = check(folder)
        for line in problems:
            print(line, file=sys.stderr)
        if not problems:
            print(f"{folder}: {len(list(folder.glob('*.npz')))} files match the manifest")
        return 1 if problems else 0
    d = build(folder, args.command)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(d, indent=1) + "\n")
    os.replace(tmp, folder / "manifest.json")
    print(f"{folder / 'manifest.json'}: {len(d['files'])} files, {len(d['runs'])} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
