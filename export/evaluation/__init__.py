"""Evaluation of models against ground truth rendered by MuJoCo.

:mod:`export.evaluation.zero_shot` (``syncedge model eval``), :mod:`export.evaluation.frames`
(``syncedge model eval-frames``: futures retrieval, zero-action fidelity, whole-frame and
motion-region PSNR/SSIM against copy-last), :mod:`export.evaluation.calibration_timing` and
the pre-check benchmark (:mod:`export.evaluation.precheck`, ``precheck_metrics``,
``precheck_sheet``).
"""

__all__: list[str] = []
