"""Cell calibration on the cell: plan a sweep, record it, check its coverage, store its
context, detect a moved camera and write the commissioning report.

Modules: :mod:`.spec` (robot specs), :mod:`.plan` (sweep programs), :mod:`.camera`
(OpenCV sources), :mod:`.record` and :mod:`.assemble` (recording and pairing),
:mod:`.check` (coverage), :mod:`.verify` (moved camera), :mod:`.validate` (commissioning).
The user's guide is docs/calibration.md.
"""

__all__: list[str] = []
