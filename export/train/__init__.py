"""Training: the data loaded from generated cells and the training loops.

:mod:`export.train.data` (cells in memory, windows), :mod:`export.train.warp` (the warp
model, ``syncedge model train-warp``), :mod:`export.train.latent` (the latent model's three
stages, ``syncedge model train``) and its options (:mod:`export.train.options`, no torch).
"""

__all__: list[str] = []
