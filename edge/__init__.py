"""On-device core of syncedge: episodes, manifest, joint samples and time alignment,
calibration, calibration cache, rollout loop, CLI.

This package never imports torch, MuJoCo, TensorRT or pycuda at module level. Of the
project it imports ``kernels`` only: ``firmware_bridge`` and ``export`` sit above it and
contribute what ``edge`` uses (subcommand groups, the joint stream opener, the virtual
cell's ``sim://`` sources) through the plug-in groups of :mod:`edge.plugins`. The boundary
is tested (``tests/test_boundaries.py`` against the allow-list in docs/architecture.md).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
