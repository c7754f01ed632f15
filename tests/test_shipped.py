"""The shipped artefacts: the reference model, its variants and the sample cell, as the
README's main-job command uses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge.cli import main
from edge.fileio import sha256_file
from edge.manifest import load_model_dir

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SAMPLE = ROOT / "samples" / "cell_sample"


def test_sample_cell_matches_its_manifest() -> None:
    man = json.loads((SAMPLE / "manifest.json").read_text())
    assert man["split"] == "test_all" and man["command"].startswith("syncedge cells sample")
    for name, entry in man["files"].items():
        assert sha256_file(SAMPLE / name) == entry["sha256"], name


@pytest.mark.parametrize("variant", ["reference", "reference-int8", "reference-fp16"])
def test_shipped_models_verify_and_passed_their_gates(variant: str) -> None:
    folder = MODELS / variant
    man = load_model_dir(folder)
    assert man.contract.resolution == (64, 64) and man.contract.max_dof == 7
    assert man.evaluation["parity"]["status"] == "passed"
    assert man.provenance["command"].startswith("syncedge export")


def test_readme_main_job_runs_on_the_shipped_model(tmp_path: Path) -> None:
    out = tmp_path / "simulate"
    code = main(["simulate", "--model", str(MODELS / "reference"), "--calibration",
                 str(SAMPLE / "calibration.npz"), "--start", str(SAMPLE / "test.npz"),
                 "--out", str(out)])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (out / "prediction.mp4").stat().st_size > 1000
    assert (out / "contact_sheet.png").stat().st_size > 1000
    text = json.dumps(metrics)
    assert "psnr" in text.lower()
