"""The model families, in PyTorch: :mod:`export.models.warp` (the shipped warp model),
:mod:`export.models.latent` (the latent autoencoder model, the old baseline) and
:mod:`export.models.calibration_flow` (a hand-made reading of the calibration, no weights,
evaluation only).
"""

__all__: list[str] = []
