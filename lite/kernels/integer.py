"""Native kernels of ONNX DynamicQuantizeLinear, MatMulInteger and ConvInteger (the meaning is
lite/ops/integer.py).

MatMulInteger and ConvInteger run the float64 kernels of MatMulFusion and Conv2DFusion on their
operands less the zero points (exact in float64; a constant weight is centered once), then round
the float64 sums to int32 (``lite.ops.integer.exact_int32``): one product and one convolution
implementation, with their threads and algorithms, serve both.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import numpy as np

from lite.errors import ModelFormatError
from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.fast.int8_plans import FLOAT32_EXACT, integer_conv_plan, integer_product_plan, quads_run
from lite.kernels.registry import find_kernel, register
from lite.ops.dtypes import FLOAT32
from lite.ops.integer import (
    INTEGER_DTYPES,
    centered,
    channel_zero_point,
    dynamic_quantize,
    exact_int32,
    row_zero_point,
    tensor_zero_point,
)
from lite.primitive import Primitive
from lite.tensor import Tensor

_WIDE = np.dtype(np.float64)
_MAX_OFFSET = 255  # the largest |q - zero_point| of 8-bit values


@register("DynamicQuantizeLinear", FLOAT32)
class DynamicQuantizeLinear(NativeKernel):
    """x (float32) -> y (uint8, x's shape), y_scale (float32 scalar), y_zero_point (uint8 scalar)."""

    def check_attrs(self) -> None:
        check_io(self, 1, 0, outputs=3)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self.inputs[0].shape, (), ()]

    def output_dtypes(self) -> list[np.dtype]:
        return [np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.uint8)]

    compiled: _CompiledDynamicQuantize | None = None

    def prepare(self) -> None:
        if fast.enabled():
            self.compiled = _CompiledDynamicQuantize(self)

    def execute(self) -> None:
        x, (y, y_scale, y_zero) = self.inputs[0].data, self.outputs
        if fast.enabled() and x.size and fast.takes(x, y.data):
            self.compiled = self.compiled or _CompiledDynamicQuantize(self)
            if self.compiled(x, y.data):  # NOTE: False where x holds a NaN or an infinity: numpy's IEEE path
                y_scale.data[...], y_zero.data[...] = self.compiled.terms[0], np.uint8(self.compiled.terms[1])
                return
        for tensor, value in zip(self.outputs, dynamic_quantize(x), strict=True):
            tensor.data[...] = value


class _CompiledDynamicQuantize:
    """DynamicQuantizeLinear on ``int8_dynamic``'s two passes (the range, then the quantization),
    their chunks shared out among the kernel's threads; the steps are made again when x or y is
    another array."""

    def __init__(self, kernel: NativeKernel) -> None:
        from lite.kernels.fast import crew, int8_dynamic

        int8_dynamic.warm()
        if kernel.threads.crew() is not None:
            crew.warm(int8_dynamic.dynamic_job)
        self.kernel, self.terms, self.keys = kernel, np.zeros(4, np.float32), np.zeros(2, np.int32)
        self.arrays: tuple[np.ndarray, ...] = ()
        self.ranges = np.zeros((1, 2), np.int32)
        self.steps: tuple[Callable[[], None], Callable[[], None]] | None = None

    def __call__(self, x: np.ndarray, y: np.ndarray) -> bool:
        """Writes x (float32) quantized into y (uint8, both C-contiguous), its scale and zero point
        into ``terms``, and True; False, nothing written, where x holds a NaN or an infinity."""
        from lite.kernels.fast.int8_dynamic import range_terms

        if self.steps is None or self.arrays[0] is not x or self.arrays[1] is not y:
            self.arrays, self.steps = (x, y), self._steps(x.reshape(-1), y.reshape(-1))
        find_range, quantize = self.steps
        self.ranges[...] = 0  # NOTE: +0.0's key: a slot no piece wrote this time counts as 0, inside every range
        find_range()
        if not range_terms(self.ranges, self.keys, self.keys.view(np.float32), self.terms):
            return False
        quantize()
        return True

    def _steps(self, x: np.ndarray, y: np.ndarray) -> tuple[Callable[[], None], Callable[[], None]]:
        from lite.kernels.fast import int8_dynamic as passes

        threads, chunks = self.kernel.threads, -(-x.size // passes.CHUNK)
        self.ranges = np.zeros((threads.loop_pieces(chunks), 2), np.int32)
        bits, ranges, terms = x.view(np.int32), self.ranges, self.terms

        def range_piece(index: int, first: int, last: int) -> Callable[[], None]:
            return partial(passes.range_chunks, bits, ranges, index, first, last)

        def quantize_piece(_: int, first: int, last: int) -> Callable[[], None]:
            return partial(passes.quantize_chunks, x, terms, y, first, last)

        def jobs(quantizing: bool) -> Callable[[list[tuple[int, int]]], Callable[[], None]]:
            return partial(passes.crew_jobs, quantizing, x, y, ranges, terms)

        return (threads.crew_loop(chunks, range_piece, jobs(False), per_thread=1),
                threads.crew_loop(chunks, quantize_piece, jobs(True), per_thread=1))


def _twin(tensor: Tensor, dtype: np.dtype) -> Tensor:
    """A float tensor of ``tensor``'s name and shape for the float kernel to read or write."""
    return Tensor(tensor.name, dtype, tensor.shape, tensor.format)


class IntegerProduct(NativeKernel):
    """Inputs x (int8/uint8), w (int8/uint8), x_zero_point and w_zero_point optional (the types of
    x and w); output int32. Runs ``float_op``'s float64 kernel (``inner``) on float64 twins of x,
    w and the output: ``centered`` fills them, ``exact_int32`` reads the result back.

    Subclasses give ``float_op``, ``float_attrs`` and ``shaped_zero_point``.
    """

    float_op: ClassVar[str] = ""

    def check_attrs(self) -> None:
        check_io(self, 2, 2)
        for i, what in ((0, "x"), (1, "w")):
            if self.inputs[i].dtype not in INTEGER_DTYPES:
                self.fail(f"input {what} is {self.inputs[i].dtype.name}; expected int8 or uint8")
            zero_point = self.zero_point_tensor(i)
            if zero_point is not None and zero_point.dtype != self.inputs[i].dtype:
                self.fail(f"the zero point {zero_point.name!r} of input {what} is {zero_point.dtype.name}, "
                          f"but the input is {self.inputs[i].dtype.name}")
        self.wide = self.float_dtype()
        self.twins = [_twin(self.inputs[0], self.wide), _twin(self.inputs[1], self.wide)]
        self.twins[1].is_const = self.twins[1].value_known = self.const_weight()
        self.out_twin = _twin(self.outputs[0], self.wide)
        self.inner = self.guarded(lambda: find_kernel(self.float_op, self.wide)(
            self.twins, [self.out_twin], Primitive(self.float_op, self.float_attrs()), self.name))

    def float_attrs(self) -> dict[str, Any]:
        """The float kernel's attributes."""
        raise NotImplementedError

    def float_dtype(self) -> np.dtype:
        """The float kernel's type: float64, whose sums of these products are exact in any order."""
        return _WIDE

    def shaped_zero_point(self, i: int, value: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
        """The zero point of input ``i`` (0: x, 1: w) shaped to broadcast against that input's
        ``shape`` (None where absent); ValueError where it does not fit."""
        raise NotImplementedError

    def zero_point_tensor(self, i: int) -> Tensor | None:
        """The zero point tensor of input ``i`` (0: x, 1: w), or None."""
        return self.inputs[i + 2] if len(self.inputs) > i + 2 else None

    def guarded(self, call: Callable[[], Any]) -> Any:
        """``call()``, the float kernel's ModelFormatError reported as this node's."""
        try:
            return call()
        except ModelFormatError as exc:
            self.fail(f"as a {self.wide.name} {self.float_op}: "
                      + str(exc).removeprefix(f"node {self.name!r} ({self.float_op}): "))

    def const_weight(self) -> bool:
        """Whether the centered weight is a constant: w and its zero point are."""
        zero_point = self.zero_point_tensor(1)
        return self.inputs[1].is_const and (zero_point is None or zero_point.is_const)

    def sync_shapes(self) -> None:
        """The twins take the current shapes of x, w and the output."""
        for tensor, twin in ((self.inputs[0], self.twins[0]), (self.inputs[1], self.twins[1]),
                             (self.outputs[0], self.out_twin)):
            twin.shape = tensor.shape
        self.twins[0].value_known = self.inputs[0].value_known

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self.sync_shapes()
        self.inner.runtime_shapes = self.runtime_shapes
        shapes = self.guarded(self.inner.infer_shapes)
        for i in (0, 1):
            self.check_zero_point(i)
        return shapes

    def check_zero_point(self, i: int) -> None:
        """Fails unless input ``i``'s zero point broadcasts against it without growing it."""
        tensor, shape = self.zero_point_tensor(i), self.inputs[i].shape
        if tensor is None or -1 in shape:
            return
        try:
            zero_point = self.shaped_zero_point(i, np.zeros(tensor.shape, tensor.dtype), shape)
            fits = np.broadcast_shapes(zero_point.shape, shape) == shape
        except ValueError as exc:
            self.fail(str(exc))
        if not fits:
            self.fail(f"the zero point {tensor.name!r} of shape {list(tensor.shape)} does not broadcast to "
                      f"{'xw'[i]}'s shape {list(shape)}")

    def output_dtypes(self) -> list[np.dtype]:
        return [np.dtype(np.int32)]

    def prepare(self) -> None:
        self.share_context()
        if self.const_weight():
            self.twins[1].data = self.centered(1).astype(self.wide)
        self.inner.prepare()

    def resize(self) -> None:
        self.share_context()
        self.sync_shapes()
        self.twins[0].data = np.empty(self.inputs[0].shape, self.wide)
        if not self.const_weight():
            self.twins[1].data = np.empty(self.inputs[1].shape, self.wide)
        self.out_twin.data = np.empty(self.outputs[0].shape, self.wide)
        self.inner.resize()

    def share_context(self) -> None:
        """The float kernel works in this kernel's workspace on its threads."""
        self.inner.workspace, self.inner.threads = self.workspace, self.threads

    def centered(self, i: int) -> np.ndarray:
        """Input ``i`` (0: x, 1: w) less its zero point, in float64."""
        data, tensor = self.inputs[i].data, self.zero_point_tensor(i)
        return centered(data, self.shaped_zero_point(i, None if tensor is None else tensor.data, data.shape))

    def execute(self) -> None:
        if self.twins[0].data is None or self.twins[0].data.shape != self.inputs[0].data.shape:
            self.resize()
        self.center_into(0)
        if not self.const_weight():
            self.center_into(1)
        self.inner.execute()
        if self.wide == np.float32:  # NOTE: exact integers below 2 ** 24: a cast, no rounding
            np.copyto(self.outputs[0].data, self.out_twin.data, casting="unsafe")
        else:
            self.outputs[0].data[...] = exact_int32(self.out_twin.data)

    def center_into(self, i: int) -> None:
        """Input ``i`` (0: x, 1: w) less its zero point into its twin, exact in either float type
        (8-bit values less 8-bit zero points), without a float64 temporary."""
        data, tensor = self.inputs[i].data, self.zero_point_tensor(i)
        zero_point = self.shaped_zero_point(i, None if tensor is None else tensor.data, data.shape)
        np.subtract(data, 0 if zero_point is None else zero_point, out=self.twins[i].data, dtype=self.wide)

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        return self.inner.matmul_shapes()


class CompiledIntegerProduct(IntegerProduct):
    """An ``IntegerProduct`` that runs a compiled plan where ``compiled_plan`` makes one at resize,
    and its float64 kernel otherwise (prepared only then: a constant weight the plan packed has no
    float64 copy)."""

    compiled: Callable[[], None] | None = None

    def compiled_plan(self) -> Callable[[], None] | None:
        """The compiled plan at the current shapes, or None."""
        raise NotImplementedError

    def plan_possible(self) -> bool:
        """Whether ``compiled_plan`` may give a plan (checked at prepare, before the shapes)."""
        raise NotImplementedError

    def prepare(self) -> None:
        self.share_context()
        self.float_ready = False
        if self.const_weight() and self.inputs[1].data is not None and self.plan_possible():
            return  # NOTE: the float64 weight only if resize falls back to it
        self._prepare_float()

    def _prepare_float(self) -> None:
        if not self.float_ready:
            super().prepare()
            self.float_ready = True

    def resize(self) -> None:
        self.share_context()
        self.compiled = self.compiled_plan()
        if self.compiled is None:
            self._prepare_float()
            super().resize()

    def execute(self) -> None:
        if self.compiled is not None:
            self.compiled()
            return
        super().execute()

    def packed_constants(self) -> list[Tensor]:
        """The weight where the compiled plan runs: it packed it and never reads it again."""
        return [self.inputs[1]] if self.compiled is not None and self.inputs[1].is_const else []


@register("MatMulInteger", INTEGER_DTYPES)
class MatMulInteger(CompiledIntegerProduct):
    """(a - a_zero_point) @ (b - b_zero_point) in int32: a_zero_point per tensor or per row of a,
    b_zero_point per tensor or per column of b.

    A constant 2-D b whose offsets fit int8 and a per-tensor a_zero_point run on VNNI's byte quads
    where the machine has them (``int8_plans.integer_product_plan``: the weight packed once, no
    float64 copy of it); else the float64 product."""

    float_op = "MatMulFusion"

    def compiled_plan(self) -> Callable[[], None] | None:
        return integer_product_plan(self)

    def plan_possible(self) -> bool:
        return quads_run()

    def float_attrs(self) -> dict[str, Any]:
        return {"transpose_a": False, "transpose_b": False, "activation_type": "NO_ACTIVATION"}

    def shaped_zero_point(self, i: int, value: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
        return row_zero_point(value, shape) if i == 0 else value


@register("ConvInteger", INTEGER_DTYPES)
class ConvInteger(CompiledIntegerProduct):
    """The convolution of x - x_zero_point by w - w_zero_point in int32 (ONNX ConvInteger; the
    attributes are Conv2DFusion's): x_zero_point per tensor, w_zero_point per tensor or per output
    channel; the padding is zeros after the subtraction.

    A constant weight of a 2-D convolution runs on compiled int16 pairs where compiled kernels run
    (``int8_plans.integer_conv_plan``: the weight packed once, no float64 copy of it); else the
    float64 convolution."""

    float_op = "Conv2DFusion"

    def compiled_plan(self) -> Callable[[], None] | None:
        return None if self.wide == np.float32 else integer_conv_plan(self)

    def plan_possible(self) -> bool:
        return fast.enabled() and self.wide != np.float32

    def float_dtype(self) -> np.dtype:
        """float32 for a depthwise convolution (one input channel a group) whose sums stay below
        ``FLOAT32_EXACT`` where compiled kernels run: its window's products, integers, sum exactly
        in float32 in any order, and the float32 depthwise kernels are compiled (the pair tiles
        would fill one row of eight); else float64."""
        w = self.inputs[1].shape
        if fast.enabled() and len(w) == 4 and w[1] == 1 and w[2] * w[3] * _MAX_OFFSET ** 2 < FLOAT32_EXACT:
            return np.dtype(np.float32)
        return _WIDE

    def float_attrs(self) -> dict[str, Any]:
        return {**self.attrs, "activation_type": "NO_ACTIVATION"}

    def shaped_zero_point(self, i: int, value: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
        return tensor_zero_point(value) if i == 0 else channel_zero_point(value, shape)
