"""Native kernels of ONNX QuantizeLinear and DequantizeLinear (the meaning is lite/ops/quant.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.fast.int8_plans import INT8_TYPES
from lite.kernels.registry import register
from lite.ops.dtypes import FLOATS
from lite.ops.quant import DEQUANT_DTYPES, QUANT_DTYPES, broadcast_param, dequantize, qrange, quantize
from lite.schema.graph import DTYPES
from lite.tensor import Tensor


class _Linear(NativeKernel):
    """Inputs x, scale, zero point optional; ``axis`` and ``block_size`` place the scales."""

    def check_attrs(self) -> None:
        check_io(self, 2, 1)
        if self.attrs["block_size"] < 0:
            self.fail(f"block_size must be >= 0, got {self.attrs['block_size']}")
        if self.attrs["output_type"] not in DTYPES:
            self.fail(f"output_type {self.attrs['output_type']!r} is not a .lite data type")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape = self.inputs[0].shape
        for i in (1, 2)[: len(self.inputs) - 1]:
            param = self.inputs[i]
            if param is not None and -1 not in shape:
                try:
                    broadcast_param(np.empty(param.shape, np.int8), shape, self.attrs["axis"], self.attrs["block_size"])
                except ValueError as exc:
                    self.fail(f"input {param.name!r}: {exc}")
        return [shape]

    def zero_point(self) -> np.ndarray | None:
        tensor = self.inputs[2] if len(self.inputs) > 2 else None
        return None if tensor is None else tensor.data


@register("QuantizeLinear", FLOATS + (np.dtype(np.int32),))
class QuantizeLinear(_Linear):
    """y = saturate(round_half_even(x / y_scale) + y_zero_point) in ``output_type`` (to float8/float4:
    x / y_scale + y_zero_point cast, clipped to the largest finite value where ``saturate``)."""

    compiled: Callable[[], None] | None = None

    def check_attrs(self) -> None:
        super().check_attrs()
        out = DTYPES[self.attrs["output_type"]]
        if out not in QUANT_DTYPES:
            self.fail(f"output_type {out.name} is not one of {[d.name for d in QUANT_DTYPES]}")
        zero_point = self.inputs[2] if len(self.inputs) > 2 else None
        if zero_point is not None and zero_point.dtype != out:
            self.fail(f"y_zero_point {zero_point.name!r} is {zero_point.dtype.name}, but output_type is {out.name}")

    def output_dtypes(self) -> list[np.dtype]:
        return [DTYPES[self.attrs["output_type"]]]

    def resize(self) -> None:
        self.compiled = self._compiled()

    def _compiled(self) -> Callable[[], None] | None:
        """The compiled per-tensor float32 -> 8-bit form (bit-identical to ``quantize``), or None."""
        x, scale, y = self.inputs[0], self.inputs[1], self.outputs[0]
        zero_point = self.inputs[2] if len(self.inputs) > 2 else None
        if (not fast.enabled() or x.dtype != np.float32 or scale.dtype != np.float32 or y.dtype not in INT8_TYPES
                or not _one_constant(scale) or self.attrs["block_size"]
                or (zero_point is not None and not _one_constant(zero_point))):
            return None
        value = float(scale.data.reshape(-1)[0])
        if not (np.isfinite(value) and value > 0):  # NOTE: numpy's path says what such a file gets
            return None
        from lite.kernels.fast import int8_elementwise

        terms = (np.float32(value),
                 np.float32(0 if zero_point is None else zero_point.data.reshape(-1)[0]),
                 *(np.float32(bound) for bound in qrange(y.dtype)))
        int8_elementwise.warm_quantize(y.dtype)
        return partial(_quantize_flat, int8_elementwise.quantize_floats, self.inputs[0], terms, y)

    def execute(self) -> None:
        if self.compiled is not None and fast.takes(self.inputs[0].data, self.outputs[0].data):
            self.compiled()
            return
        a = self.attrs
        self.outputs[0].data[...] = quantize(self.inputs[0].data, self.inputs[1].data, self.zero_point(),
                                             self.outputs[0].dtype, a["axis"], a["block_size"], a["saturate"])


def _one_constant(tensor: Tensor) -> bool:
    return tensor.is_const and tensor.data is not None and tensor.data.size == 1


def _quantize_flat(kernel, x: Tensor, terms: tuple, y: Tensor) -> None:
    kernel(x.data.reshape(-1), *terms, y.data.reshape(-1))


def byte_dequantizer(x_dtype: np.dtype, dequantize_values: Callable[[np.ndarray], np.ndarray]
                     ) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """A call writing the dequantized values of an 8-bit array into a float32 one of its shape
    (C-contiguous), by a table of the 256 values ``dequantize_values`` gives (so bit-identical to
    it) on the compiled lookup; None where compiled kernels are off or x is not 8-bit."""
    if not fast.enabled() or np.dtype(x_dtype) not in INT8_TYPES:
        return None
    from lite.kernels.fast import int8_elementwise

    table = np.ascontiguousarray(dequantize_values(np.arange(256, dtype=np.uint8).view(x_dtype)), np.float32)
    int8_elementwise.warm_lookup(np.float32)
    return partial(_lookup_flat, int8_elementwise.lookup, table)


def _lookup_flat(lookup, table: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    lookup(table, np.ascontiguousarray(x).reshape(-1).view(np.uint8), out.reshape(-1))


@register("DequantizeLinear", DEQUANT_DTYPES)
class DequantizeLinear(_Linear):
    """y = (x - x_zero_point) * x_scale in ``output_type``."""

    def check_attrs(self) -> None:
        super().check_attrs()
        out = DTYPES[self.attrs["output_type"]]
        if out not in FLOATS:
            self.fail(f"output_type must be one of {[d.name for d in FLOATS]}, got {out.name}")
        zero_point = self.inputs[2] if len(self.inputs) > 2 else None
        if zero_point is not None and zero_point.dtype != self.inputs[0].dtype:
            self.fail(f"x_zero_point {zero_point.name!r} is {zero_point.dtype.name}, but x is "
                      f"{self.inputs[0].dtype.name}")

    def output_dtypes(self) -> list[np.dtype]:
        return [DTYPES[self.attrs["output_type"]]]

    compiled: Callable[[np.ndarray, np.ndarray], None] | None = None

    def resize(self) -> None:
        x, scale, y = self.inputs[0], self.inputs[1], self.outputs[0]
        zero_point = self.inputs[2] if len(self.inputs) > 2 else None
        self.compiled = None
        if (y.dtype == np.float32 and _one_constant(scale) and not self.attrs["block_size"]
                and (zero_point is None or _one_constant(zero_point))):
            self.compiled = byte_dequantizer(x.dtype, lambda values: dequantize(
                values, scale.data, self.zero_point(), 0, 0, y.dtype))

    def execute(self) -> None:
        a = self.attrs
        out = self.outputs[0].data
        if self.compiled is not None and out.flags.c_contiguous:
            self.compiled(self.inputs[0].data, out)
            return
        self.outputs[0].data[...] = dequantize(self.inputs[0].data, self.inputs[1].data, self.zero_point(),
                                               a["axis"], a["block_size"], self.outputs[0].dtype)
