"""Signed device bundles: key generation, building and signing (off device).

The device side (verify, install, list, rollback, trusted keys) lives in ``edge`` because
it runs on the device: :mod:`edge.bundle_format`, :mod:`edge.bundle_reader`,
:mod:`edge.bundle_install`, :mod:`edge.bundle_keys`. See docs/bundles.md.
"""

__all__: list[str] = []
