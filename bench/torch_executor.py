"""A PyTorch CUDA module as an ``edge.runtime.cuda_step.DeviceExecutor`` (GPU checks only).

On a GPU machine without TensorRT, the shipped model's step and decoder run as PyTorch
modules on the GPU in place of the engines: :meth:`TorchExecutor.enqueue` wraps the
given device pointers as tensors (``__cuda_array_interface__``, no copy), runs the module
on the given stream (``torch.cuda.ExternalStream``) and writes each output with an
elementwise kernel (``torch.mul(..., out=...)``), not a memcpy, so a captured step holds
no copy node. torch is imported lazily; the project's runtime never imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TorchExecutor"]


class _Cai:
    """A device buffer described by ``__cuda_array_interface__`` (version 3)."""

    def __init__(self, ptr: int, shape: Sequence[int], typestr: str):
        self.__cuda_array_interface__ = {"shape": tuple(int(d) for d in shape),
                                         "typestr": typestr, "data": (int(ptr), False),
                                         "version": 3, "strides": None}


class TorchExecutor:
    """Run ``module(*inputs) -> output or tuple of outputs`` on device pointers.

    Args:
        module: a ``torch.nn.Module`` on the GPU (eval mode).
        inputs: the module's inputs in call order: ``(name, shape)``, float32.
        outputs: its outputs in return order: ``(name, shape)``, float32; an output not
            given a pointer in :meth:`enqueue` is dropped.
    """

    def __init__(self, module: Any, inputs: Sequence[tuple[str, Sequence[int]]],
                 outputs: Sequence[tuple[str, Sequence[int]]]):
        self.module = module
        self.inputs, self.outputs = list(inputs), list(outputs)
        self._tensors: dict[tuple[int, tuple[int, ...]], Any] = {}

    def _wrap(self, ptr: int, shape: Sequence[int]) -> Any:
        import torch

        key = (int(ptr), tuple(shape))
        if key not in self._tensors:
            self._tensors[key] = torch.as_tensor(_Cai(ptr, shape, "<f4"), device="cuda")
        return self._tensors[key]

    def enqueue(self, inputs: Mapping[str, int], outputs: Mapping[str, int],
                stream_handle: int) -> None:
        """Enqueue one run on ``stream_handle`` reading ``inputs`` and writing ``outputs``.

        Raises:
            ValueError: an output's shape differs from its buffer's (it would otherwise be
                reallocated and the buffer never written).
        """
        import torch

        stream = torch.cuda.ExternalStream(int(stream_handle))
        with torch.cuda.stream(stream), torch.inference_mode():
            args = [self._wrap(inputs[name], shape) for name, shape in self.inputs]
            res = self.module(*args)
            res = res if isinstance(res, tuple) else (res,)
            for (name, shape), value in zip(self.outputs, res, strict=True):
                if name in outputs:
                    if tuple(value.shape) != tuple(shape):
                        raise ValueError(f"output {name!r}: the module returned shape "
                                         f"{list(value.shape)}, the buffer is {list(shape)}")
                    torch.mul(value, 1.0, out=self._wrap(outputs[name], shape))
