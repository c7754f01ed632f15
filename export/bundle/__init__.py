"""Signed device bundles: key generation, building and signing (off device).

The device side (verify, install, list, rollback, trusted keys) lives in ``edge`` because
it runs on the device: :mod:`edge.bundle.format`, :mod:`edge.bundle.reader`,
:mod:`edge.bundle.install`, :mod:`edge.bundle.keys`. See docs/bundles.md.
"""

__all__: list[str] = []
