"""scripts/precheck_misses.py: the keep-out misses and false refusals of a per-cell file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import precheck_misses as pm  # noqa: E402

RECORDS = [
    {"index": 0, "true_inside_max": [0, 4, 30, 3], "exceeds": [False] * 4, "best": 0,
     "rows": {"chain": {"refused": [True, False, True, False], "score": [5, 2, 30, 0],
                        "chosen": 0},
              "copy_last": {"refused": [False] * 4, "score": [0] * 4, "chosen": 0}}},
    {"index": 3, "true_inside_max": [0, 0, 12, 9], "exceeds": [False] * 4, "best": None,
     "rows": {"chain": {"refused": [False, False, True, True], "score": [0, 0, 12, 9],
                        "chosen": None}}},
]


def test_counts_and_names_each_miss_and_false_refusal() -> None:
    lines, missed, entering, false, out = pm.misses(RECORDS, "chain")
    assert (missed, entering, false, out) == (1, 4, 1, 4)  # 4 px enters, 3 px does not
    assert lines == ["  cell   0 candidate 0: refused, stays out (true 0, pred 5)",
                     "  cell   0 candidate 1: missed (true 4, pred 2)"]
    assert pm.misses(RECORDS, "copy_last")[1:] == (2, 2, 0, 2)  # cell 3 lacks the row


def test_prints_chain_rows_by_default_and_refuses_a_bad_file(tmp_path, capsys) -> None:
    path = tmp_path / "precheck_cells.json"
    path.write_text(json.dumps({"held_out_robot": RECORDS}))
    assert pm.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "held_out_robot chain: missed 1 of 4 entering, refused 1 of 4 staying out" in out
    assert "copy_last" not in out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert pm.main([str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
