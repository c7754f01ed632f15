"""Exported model variants: the FP32 ONNX export (:mod:`export.variants.onnx_export`,
:mod:`export.variants.warp_export`), INT8/FP16 quantisation (:mod:`export.variants.quantise`,
with its quantisation calibration set :mod:`export.variants.quant_data`) and the parity gates
against PyTorch (:mod:`export.variants.parity`, ``parity_gates``, ``parity_reference``);
:mod:`export.variants.cli` is ``syncedge export onnx|quantise|check``.
"""

__all__: list[str] = []
