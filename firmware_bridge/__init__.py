"""Transports that read joint samples from robot controllers, and time alignment.

Imports nothing of the project except the episode types in ``edge``.
"""

__all__: list[str] = []
