"""Exception hierarchy of ``firmware_bridge``.

Every error derives from :class:`BridgeError`, itself an :class:`edge.errors.EdgeError`, so the
``syncedge`` command prints it as one line. Messages name the subject (a URL, a port, a slave),
what was expected, what was found and, where useful, the fix.
"""

from __future__ import annotations

from types import ModuleType

from edge.errors import EdgeError, MissingDependencyError

__all__ = [
    "BridgeError",
    "BridgeTimeoutError",
    "DeviceGoneError",
    "EndOfLogError",
    "FRAME_REJECT_REASONS",
    "FrameError",
    "MissingDependencyError",
    "PortBusyError",
    "ProtocolError",
    "UrlError",
    "require",
]


#: Why a framed-stream frame was rejected (:attr:`FrameError.reason`), in report order.
FRAME_REJECT_REASONS = ("crc", "framing", "version", "length", "joint count", "type")


class BridgeError(EdgeError):
    """Base class of every error raised by ``firmware_bridge``."""


class UrlError(BridgeError, ValueError):
    """A transport URL or one of its query options is malformed or unknown."""


class BridgeTimeoutError(BridgeError, TimeoutError):
    """No valid sample arrived within the bridge's own deadline."""


class DeviceGoneError(BridgeError, ConnectionError):
    """The device path vanished (unplugged) and did not come back within the deadline."""


class PortBusyError(BridgeError):
    """A serial port is held by another process (the bridge opens ports exclusively)."""


class EndOfLogError(BridgeError):
    """A replayed joint log has no more samples (and was not asked to loop)."""


class ProtocolError(BridgeError):
    """A device answered, but not in the form its protocol specifies (bring-up, mailbox, ...)."""


class FrameError(BridgeError, ValueError):
    """One framed-stream frame failed to decode (COBS, length or CRC32).

    Attributes:
        reason: what was wrong, one of :data:`FRAME_REJECT_REASONS`: ``"framing"`` (COBS),
            ``"length"`` (too short, or a length other than the one its joint count or type
            gives), ``"joint count"`` (outside 1..32 for a sample, not 0 for a ping or pong),
            ``"type"`` (unknown frame type), ``"crc"`` (CRC-32 mismatch) or ``"version"``
            (a protocol version other than the bridge's).
    """

    def __init__(self, message: str, reason: str = "framing"):
        super().__init__(message)
        self.reason = reason


def require(module: str, library: str, purpose: str) -> ModuleType:
    """Import an optional library lazily.

    Args:
        module: the import name (``"pysoem"``).
        library: the distribution name shown to the user (``"pysoem"``).
        purpose: what needs it (``"the EtherCAT transport"``).

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: naming ``pip install 'syncedge[bridge]'``.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(library, "bridge", purpose) from exc
