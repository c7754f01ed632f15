"""Off-device tooling: robot cells, training, ONNX export, quantisation, bundles.

Imports ``edge``; ``edge`` never imports this package.
"""

__all__: list[str] = []
