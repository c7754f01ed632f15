"""CUDA kernels for the rollout loop, their pycuda launcher and NumPy reference.

Imports nothing of the project. Imports pycuda lazily, so a CPU-only install works.
"""

__all__: list[str] = []
