"""Transports that read joint samples from robot controllers, and time alignment.

Imports nothing of the project except the error base class in ``edge``. Open a stream with
:func:`firmware_bridge.url.stream_for_url`; see docs/bridge.md.
"""

from .sample import JointSample, Status, StreamStats
from .url import stream_for_url

__all__ = ["JointSample", "Status", "StreamStats", "stream_for_url"]
