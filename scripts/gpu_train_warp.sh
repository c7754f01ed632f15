#!/usr/bin/env bash
# One bounded training run of the warp world model on a GPU machine, from nothing but the
# checkout: renders the training cells and their geometry there (MuJoCo, EGL or OSMesa, on
# all cores), then trains with the exact-flow loss on the GPU (batches assembled there),
# writing checkpoints as it goes. Nothing is downloaded.
#
#   usage: OUT=out/gpu_train STEPS=20000 MINUTES=7 scripts/gpu_train_warp.sh
#   resume: INIT=path/to/warp.pt starts from a checkpoint (tensors that fit); RESUME=1 with
#   OUT holding warp.pt continues it.
#
# Environment: OUT (default out/gpu_train), STEPS (optimizer steps the cosine schedule is
# computed for, default 20000), MINUTES (train-warp --max-minutes: training stops there
# with a checkpoint, default 7), SAVE_EVERY (default 250), DEVICE
# (default cuda), WORKERS (render processes, default the core count), CHUNKS (all_joints
# training chunks, default 0-47), CHUNKS2J (two_joint chunks, default 48-63), DATA (default /tmp/syncedge-data), EXTRA (more train-warp
# options). Writes to $OUT: env.txt, data.log, train.log, warp.pt (the checkpoint: weights,
# optimizer, step, loss history, options) and summary.json (steps reached, pairs/s, the
# commands).
set -uo pipefail
OUT="${OUT:-out/gpu_train}"
STEPS="${STEPS:-20000}"
MINUTES="${MINUTES:-7}"
SAVE_EVERY="${SAVE_EVERY:-250}"
DEVICE="${DEVICE:-cuda}"
WORKERS="${WORKERS:-$(nproc)}"
CHUNKS="${CHUNKS:-0-47}"
DATA="${DATA:-/tmp/syncedge-data}"
EXTRA="${EXTRA:-}"
export PYTHONUNBUFFERED=1 MUJOCO_GL="${MUJOCO_GL:-egl}"
mkdir -p "$OUT"
{ date -u; nvidia-smi 2>&1 | head -15; python3 --version; nproc
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
} >"$OUT/env.txt" 2>&1

SE="python3 -m edge.cli"
{
  set -e
  $SE cells generate --split train --chunks "$CHUNKS" --out "$DATA/warp" --sweep-amplitude 0.2-0.8 --workers "$WORKERS"
  $SE cells generate --split train --chunks "${CHUNKS2J:-48-63}" --out "$DATA/warp2j" --sweep-amplitude 0.2-0.8 --motion two_joint --workers "$WORKERS"
  $SE cells geometry --data "$DATA/warp" --split train --workers "$WORKERS"
  $SE cells geometry --data "$DATA/warp2j" --split train --workers "$WORKERS"
} >"$OUT/data.log" 2>&1 || { echo "data generation failed: see $OUT/data.log"; tail -5 "$OUT/data.log"; exit 3; }

args=(--data "$DATA/warp" --data "$DATA/warp2j" --out "$OUT" --steps "$STEPS"
      --save-every "$SAVE_EVERY" --max-minutes "$MINUTES" --device "$DEVICE" --joint-width 24 --lr 5e-4
      --mask-weight 1.0 --fill-weight 0.2 --true-flow-weight 0.05 --contrast-weight 0.1)
[ -n "${INIT:-}" ] && args+=(--init "$INIT")
[ -n "${RESUME:-}" ] && args+=(--resume)
# shellcheck disable=SC2206
[ -n "$EXTRA" ] && args+=($EXTRA)
echo "$SE model train-warp ${args[*]}" >"$OUT/train.log"
timeout --signal=INT "$((MINUTES * 60 + 120))" $SE model train-warp "${args[@]}" >>"$OUT/train.log" 2>&1
rc=$?
python3 - "$OUT" "$rc" <<'PY'
import json, re, sys
from pathlib import Path
out, rc = Path(sys.argv[1]), int(sys.argv[2])
log = (out / "train.log").read_text()
steps = [m.groups() for m in re.finditer(r"step (\d+)/(\d+) .*? ([0-9.]+) pairs/s", log)]
summary = {"exit_status": rc, "stopped_by_time_limit": "stopped after" in log,
           "last_logged_step": int(steps[-1][0]) if steps else 0,
           "pairs_per_s": float(steps[-1][2]) if steps else None,
           "command": log.splitlines()[0] if log else ""}
if (out / "warp.pt").is_file():
    import torch
    ck = torch.load(out / "warp.pt", map_location="cpu", weights_only=False)
    summary["checkpoint_step"] = int(ck["step"])
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
PY
exit $rc
