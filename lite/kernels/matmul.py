"""MatMulFusion: numpy matmul (ONNX MatMul broadcasting, 1-D operands) with transposes, bias, activation."""

from __future__ import annotations

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.fused import apply_fused_activation, fused_activation
from lite.kernels.registry import register
from lite.ops.dtypes import FLOATS


def transposed(shape: tuple[int, ...], flag: bool) -> tuple[int, ...]:
    """``shape`` with its last two axes swapped when ``flag`` is set and it has two or more."""
    return (*shape[:-2], shape[-1], shape[-2]) if flag and len(shape) >= 2 else shape


@register("MatMulFusion", dtypes=FLOATS)
class MatMulFusion(NativeKernel):
    """y = op(a) @ op(b) + bias, then the fused activation.

    op swaps the last two axes of a (transpose_a) or b (transpose_b) as a view, which BLAS
    reads transposed without a copy. A 1-D a is a row vector and a 1-D b a column vector
    whose unit axis is dropped from the result, as in numpy and ONNX MatMul; batch axes
    broadcast. bias (optional third input) must broadcast to the result's shape.
    """

    def check_attrs(self) -> None:
        check_io(self, 2, 1)
        self.transpose_a = bool(self.attrs["transpose_a"])
        self.transpose_b = bool(self.attrs["transpose_b"])
        self.activation = fused_activation(self)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        a = transposed(self.input_shape(0), self.transpose_a)
        b = transposed(self.input_shape(1), self.transpose_b)
        if not a or not b:
            self.fail(f"operands must have at least one dim, got shapes {list(a)} and {list(b)}")
        a2, b2 = (1, *a) if len(a) == 1 else a, (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            self.fail(f"inner dims differ: op(a) has shape {list(a)}, op(b) {list(b)}")
        try:
            batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        except ValueError:
            self.fail(f"batch dims of {list(a)} and {list(b)} do not broadcast")
        rows = () if len(a) == 1 else (a[-2],)
        cols = () if len(b) == 1 else (b[-1],)
        shape = (*batch, *rows, *cols)
        if len(self.inputs) > 2 and self.inputs[2] is not None:
            self.check_bias(self.input_shape(2), shape)
        return [shape]

    def check_bias(self, bias: tuple[int, ...], shape: tuple[int, ...]) -> None:
        try:
            fits = np.broadcast_shapes(bias, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            self.fail(f"bias of shape {list(bias)} does not broadcast to the result shape {list(shape)}")

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        return [(transposed(self.input_shape(0), self.transpose_a), transposed(self.input_shape(1), self.transpose_b))]

    def execute(self) -> None:
        a, b = self.inputs[0].data, self.inputs[1].data
        if self.transpose_a and a.ndim >= 2:
            a = a.swapaxes(-1, -2)
        if self.transpose_b and b.ndim >= 2:
            b = b.swapaxes(-1, -2)
        out = self.outputs[0].data
        np.matmul(a, b, out=out)
        if len(self.inputs) > 2 and self.inputs[2] is not None:
            np.add(out, self.inputs[2].data, out=out)
        apply_fused_activation(out, self.activation)
