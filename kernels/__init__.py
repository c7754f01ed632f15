"""CUDA kernels for the rollout loop, their pycuda launcher and NumPy reference.

Imports nothing of the project. Imports pycuda lazily (only in
``kernels.launcher.KernelLauncher.activate``), so a CPU-only install works. The CPU
runtime uses :mod:`kernels.reference`; see docs/kernels.md for the contracts.
"""

__all__: list[str] = []
