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
from lite.ops.quant import DEQUANT_DTYPES, QUANT_DTYPES, broadcast_param, byte_values, dequantize, qrange, quantize
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

    def per_tensor_constants(self) -> bool:
        """Whether the scale and the zero point (where given) are constants of one value, no blocks."""
        zero_point = self.inputs[2] if len(self.inputs) > 2 else None
        return not self.attrs["block_size"] and _one_constant(self.inputs[1]) and \
            (zero_point is None or _one_constant(zero_point))


@register("QuantizeLinear", FLOATS + (np.dtype(np.int32),))
class QuantizeLinear(_Linear):
    """y = saturate(round_half_even(x / y_scale) + y_zero_point) in ``output_type`` (to float8/float4:
    x / y_scale + y_zero_point cast, clipped to the largest finite value where ``saturate``)."""

    compiled: Callable[[np.ndarray, np.ndarray], None] | None = None

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
                or not self.per_tensor_constants()):
            return None
        zero = 0 if zero_point is None else zero_point.data.reshape(-1)[0]
        return byte_quantizer(float(scale.data.reshape(-1)[0]), float(zero), y.dtype)

    def execute(self) -> None:
        if self.compiled is not None and fast.takes(self.inputs[0].data, self.outputs[0].data):
            self.compiled(self.inputs[0].data, self.outputs[0].data)
            return
        a = self.attrs
        self.outputs[0].data[...] = quantize(self.inputs[0].data, self.inputs[1].data, self.zero_point(),
                                             self.outputs[0].dtype, a["axis"], a["block_size"], a["saturate"])


def _one_constant(tensor: Tensor) -> bool:
    return tensor.is_const and tensor.data is not None and tensor.data.size == 1


def byte_quantizer(scale: float, zero_point: float, dtype: np.dtype | type, bits: int | None = None
                   ) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """A call writing ``quantize`` of a float32 array by one ``scale`` and ``zero_point`` into an
    8-bit array of ``dtype`` of its size (both C-contiguous), compiled (``quantize_floats``,
    bit-identical); None where compiled kernels are off, the type is not 8-bit, or the scale is not
    finite and positive (numpy's path says what such a file gets)."""
    if not fast.enabled() or np.dtype(dtype) not in INT8_TYPES or not (np.isfinite(scale) and scale > 0):
        return None
    from lite.kernels.fast import int8_elementwise

    int8_elementwise.warm_quantize(np.dtype(dtype))
    terms = (np.float32(scale), np.float32(zero_point), *(np.float32(bound) for bound in qrange(dtype, bits)))
    return partial(_quantize_flat, int8_elementwise.quantize_floats, terms)


def _quantize_flat(kernel, terms: tuple, x: np.ndarray, out: np.ndarray) -> None:
    kernel(x.reshape(-1), *terms, out.reshape(-1))


def byte_lookup(table: np.ndarray) -> Callable[[np.ndarray, np.ndarray], None]:
    """A call writing ``table[b]`` for each byte b of an 8-bit array into an array of its size and of
    the table's type (256 values, in byte order: ``lite.ops.quant.byte_values``): the compiled lookup
    where compiled kernels run and both arrays are C-contiguous, numpy's take elsewhere."""
    lookup = None
    if fast.enabled():
        from lite.kernels.fast import int8_elementwise

        int8_elementwise.warm_lookup(table.dtype.type)
        lookup = int8_elementwise.lookup
    return partial(_look_up, lookup, np.ascontiguousarray(table))


def _look_up(lookup, table: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    index = x.view(np.uint8)
    if lookup is not None and index.flags.c_contiguous and out.flags.c_contiguous:
        lookup(table, index.reshape(-1), out.reshape(-1))
    else:
        out[...] = np.take(table, index).reshape(out.shape)


def byte_dequantizer(x_dtype: np.dtype, dequantize_values: Callable[[np.ndarray], np.ndarray]
                     ) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """A call writing the dequantized values of an 8-bit array into a float32 one of its shape, by a
    table of the 256 values ``dequantize_values`` gives (so bit-identical to it; ``byte_lookup``);
    None where compiled kernels are off or x is not 8-bit."""
    if not fast.enabled() or np.dtype(x_dtype) not in INT8_TYPES:
        return None
    return byte_lookup(np.asarray(dequantize_values(byte_values(x_dtype)), np.float32))


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
        self.compiled = None
        if y.dtype == np.float32 and self.per_tensor_constants():
            self.compiled = byte_dequantizer(x.dtype, lambda values: dequantize(
                values, scale.data, self.zero_point(), 0, 0, y.dtype))

    def execute(self) -> None:
        a = self.attrs
        if self.compiled is not None:
            self.compiled(self.inputs[0].data, self.outputs[0].data)
            return
        self.outputs[0].data[...] = dequantize(self.inputs[0].data, self.inputs[1].data, self.zero_point(),
                                               a["axis"], a["block_size"], self.outputs[0].dtype)
