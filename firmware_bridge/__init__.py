"""Transports that read joint samples from robot controllers, by URL.

Imports of the project: ``edge`` only (its error base classes, the joint samples of
:mod:`edge.joints` that every stream delivers, the time alignment of :mod:`edge.timebase`,
the plug-in lookup of :mod:`edge.plugins`). Open a stream with
:func:`firmware_bridge.url.stream_for_url`; see docs/bridge.md.
"""

from edge.joints import JointSample, Status

from .sample import StreamStats
from .url import stream_for_url

__all__ = ["JointSample", "Status", "StreamStats", "stream_for_url"]
