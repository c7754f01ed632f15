"""Heavy libraries stay lazy: every module of the runtime imports with them blocked."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = ["torch", "mujoco", "tensorrt", "pycuda", "pysoem", "fast_simplification", "rosbags"]

SCRIPT = f"""
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED!r}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import edge
for m in pkgutil.walk_packages(edge.__path__, 'edge.'):
    importlib.import_module(m.name)
import export.cells.cli, export.cells.sampling, export.cells.generate, export.cells.scene
from edge.cli import build_parser
build_parser()
print('ok')
"""


def test_runtime_imports_without_heavy_libraries() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         cwd=".")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
