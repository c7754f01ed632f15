"""Signed A/B model bundles on the device.

The format shared with the builder (:mod:`edge.bundle.format`), the verified reader
(:mod:`edge.bundle.reader`), trusted keys (:mod:`edge.bundle.keys`), installation into
slots and rollback (:mod:`edge.bundle.install`) and the device's own target
(:mod:`edge.bundle.device_target`). The builder is :mod:`export.bundle`.
"""

__all__: list[str] = []
