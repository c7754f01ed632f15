"""On-device core of syncedge: episodes, manifest, calibration cache, rollout loop, CLI.

This package never imports torch, MuJoCo, TensorRT or pycuda at module level, and never
imports ``export`` or ``firmware_bridge``: those contribute CLI subcommands through the
``syncedge.commands`` entry-point group instead.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
