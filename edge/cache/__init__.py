"""The calibration cache: one cell's encoded calibration, per model, ready for the rollout.

:mod:`edge.cache.store` (``CalibrationCache``) is the entry point; the SQLite index
(:mod:`edge.cache.index`), content-addressed blobs (:mod:`edge.cache.blobs`), entry records
(:mod:`edge.cache.records`), verified reads (:mod:`edge.cache.verify`), upkeep
(:mod:`edge.cache.upkeep`), the index rebuild (:mod:`edge.cache.rebuild`) and portable
archives (:mod:`edge.cache.archive`) sit beside it; value types and errors are in
:mod:`edge.cache.values`. See docs/calibration-cache.md.
"""

__all__: list[str] = []
