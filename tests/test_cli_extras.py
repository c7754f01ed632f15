"""A missing optional library fails a command in one line that names the extra, exit 2.

The library is blocked in a child process (``sys.modules[name] = None``, as Python does for a
module that failed to import), so the commands meet it where they import it.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edge.cli import run_parsed
from edge.errors import OPTIONAL_LIBRARIES, MissingDependencyError

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from edge.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _run(blocked: str, *argv: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {"SYNCEDGE_HOME": str(tmp / "home"), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", RUN, blocked, *argv], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)


@pytest.mark.parametrize(("blocked", "argv", "extra"), [
    ("torch", ["model", "train", "--stage", "ae", "--steps", "1", "--data", "{tmp}/cells",
               "--out", "{tmp}/run"], "train"),
    ("torch", ["model", "eval", "--data", "{tmp}/cells", "--run", "{tmp}/run"], "train"),
    ("torch", ["export", "onnx", "--run", "{tmp}/run", "--out", "{tmp}/model"], "train"),
    ("torch", ["export", "check", "models/reference", "--run", "{tmp}/run", "--data",
               "{tmp}/cells"], "train"),
    ("mujoco", ["cells", "generate", "--split", "train", "--out", "{tmp}/cells"], "train"),
    ("tensorrt", ["export", "engine", "models/reference"], "nvidia"),
    ("pysoem", ["bridge", "probe", "ethercat://eth0"], "bridge"),
], ids=["torch-model-train", "torch-model-eval", "torch-export-onnx", "torch-export-check",
        "mujoco-cells-generate", "tensorrt-export-engine", "pysoem-bridge-probe"])
def test_a_missing_extra_is_one_line_naming_it(blocked: str, argv: list[str], extra: str,
                                               tmp_path: Path) -> None:
    out = _run(blocked, *(a.format(tmp=tmp_path) for a in argv), tmp=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"syncedge {argv[0]}: error: ")
    assert f"needs the '{blocked}' library" in lines[0], lines[0]
    assert f"pip install 'syncedge[{extra}]'" in lines[0], lines[0]


def _args(func: object) -> argparse.Namespace:
    return argparse.Namespace(command="demo", func=func)


def test_run_parsed_turns_an_optional_import_into_the_hint(
        capsys: pytest.CaptureFixture[str]) -> None:
    def needs_torch(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    assert run_parsed(_args(needs_torch)) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("syncedge demo: error: syncedge demo needs the 'torch' library, which is not "
                   "installed; install it with: pip install 'syncedge[train]' (from a source "
                   "checkout: pip install '.[train]')")


def test_run_parsed_prints_the_kernels_missing_dependency_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from kernels.errors import MissingDependencyError as KernelsMissing

    def needs_pycuda(args: argparse.Namespace) -> int:
        raise KernelsMissing("pycuda", "nvidia", "Launching the CUDA kernels")

    assert run_parsed(_args(needs_pycuda)) == 2
    assert "pip install 'syncedge[nvidia]'" in capsys.readouterr().err


def test_run_parsed_keeps_the_traceback_of_a_module_of_ours_that_is_missing(capsys) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'edge.nothing'", name="edge.nothing")

    assert run_parsed(_args(broken)) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and "No module named 'edge.nothing'" in err and "bug" in err


def test_a_bug_exits_70_with_its_traceback_never_1(capsys) -> None:
    # 1 is a result (precheck: no candidate passes); a crash must not read as one
    def broken(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("division by zero")

    assert run_parsed(_args(broken)) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err and "internal error" in err


def _extras_in_setup() -> dict[str, set[str]]:
    """``extra -> {distribution names}`` from setup.py (its list literals, names resolved)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    names: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")
    extras = next(k.value for k in call.keywords if k.arg == "extras_require")
    assert isinstance(extras, ast.Dict)

    def requirements(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Name):
            return requirements(names[node.id])
        assert isinstance(node, ast.List)
        out: list[str] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                out += requirements(elt.value)
            else:
                out.append(ast.literal_eval(elt))
        return out

    return {ast.literal_eval(k): {re.split(r"[<>=!~ \[]", r)[0].lower()
                                  for r in requirements(v)}
            for k, v in zip(extras.keys, extras.values, strict=True) if k is not None}


def test_the_optional_library_table_names_the_extras_of_setup_py() -> None:
    extras = _extras_in_setup()
    for module, (distribution, extra) in OPTIONAL_LIBRARIES.items():
        assert distribution in extras.get(extra, set()), (module, distribution, extra)
    listed = {d for d, _ in OPTIONAL_LIBRARIES.values()}
    for extra in ("train", "bridge", "nvidia", "ros"):
        assert extras[extra] <= listed, (extra, extras[extra] - listed)


def test_the_missing_dependency_classes_take_the_same_arguments() -> None:
    import inspect

    from kernels.errors import MissingDependencyError as KernelsMissing

    assert (list(inspect.signature(MissingDependencyError).parameters)
            == list(inspect.signature(KernelsMissing).parameters)
            == ["library", "extra", "purpose"])
