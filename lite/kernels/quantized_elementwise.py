"""Quantized ops that need no float copy of their tensors (``QuantizedOp``'s general form keeps one
per input and output):

- data movement (Reshape, Transpose, Concat, MaxPool...) where every quantized input has the
  output's parameters: quantizing is monotonic and moving values changes none, so the op's own
  integer kernel computes ``quantize(op(dequantize(x)))`` exactly;
- one-input element-wise ops on 8-bit tensors (Activation, Erf...): the op takes 256 values at
  most, so its result is a table made once from the float op, as onnxruntime's QLinearSigmoid
  and QLinearLeakyRelu do;
- Add, Sub and Mul of per-tensor parameters: ``lite.ops.quantized_arithmetic`` on the fly (8-bit
  Add and Mul as onnxruntime's QLinearAdd and QLinearMul compute them; Sub as ``QuantizedOp``);
- a softmax over trailing axes of an 8-bit tensor: ``lite.ops.quantized_softmax`` (onnxruntime's
  QLinearSoftmax: each value's exponential from a table of the 256 offsets below its row's
  largest value), within a step of ``QuantizedOp``'s float32 softmax where the output scale's
  inverse is a whole number;
- a layer norm of an 8-bit tensor: each row dequantized, normalized and quantized in one pass;
- a global average pool: each plane's integer sum, then the float64 terms of ``QuantizedOp``'s
  float64 reference (bit-identical to it: that reference's sum is exact).
"""

from __future__ import annotations

import math

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.quant import byte_lookup
from lite.kernels.quantized import QuantizedOp, float_kernel_class
from lite.kernels.registry import find_kernel, register_quantized
from lite.ops.quant import (
    byte_values,
    dequantize_tensor,
    per_tensor_terms,
    qrange,
    quantize_tensor,
    same_quantization,
)
from lite.ops.quantized_arithmetic import FLOAT_OPS, quantized_arithmetic
from lite.ops.quantized_softmax import SUM_LANES, exponent_table, output_multiplier, quantized_softmax
from lite.primitive import Primitive
from lite.tensor import Tensor

BYTES = (np.dtype(np.int8), np.dtype(np.uint8))
MOVEMENT_OPS = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat", "StridedSlice", "Gather",
                "Split", "MaxPoolFusion", "DepthToSpace", "SpaceToDepth", "Identity", "BroadcastTo", "TileFusion")
TABLE_OPS = ("Activation", "Erf", "ExpFusion", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Sin", "Cos", "Floor",
             "Ceil", "Round", "Sign")


class _Delegating(NativeKernel):
    """A quantized op run by another kernel (``self.inner``) where its form allows; else by
    ``QuantizedOp``. Subclasses say which in ``_inner``."""

    def __init__(self, inputs: list[Tensor | None], outputs: list[Tensor], primitive: Primitive, name: str = ""):
        self.inner = self._inner(inputs, outputs, primitive, name) or QuantizedOp(inputs, outputs, primitive, name)
        self.value_inputs = self.inner.value_inputs
        super().__init__(inputs, outputs, primitive, name)

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        raise NotImplementedError

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self.inner.runtime_shapes = self.runtime_shapes
        return self.inner.infer_shapes()

    def output_dtypes(self) -> list[np.dtype]:
        return [t.dtype for t in self.outputs]

    def prepare(self) -> None:
        self.inner.workspace, self.inner.threads = self.workspace, self.threads
        self.inner.prepare()

    def resize(self) -> None:
        self.inner.workspace, self.inner.threads = self.workspace, self.threads
        self.inner.resize()

    def execute(self) -> None:
        self.inner.execute()


def _register(ops, cls):
    for op in ops:
        register_quantized(op, BYTES)(cls)
    return cls


class QuantizedMovement(_Delegating):
    """Data movement on quantized tensors of equal parameters: the op's integer kernel."""

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        params = outputs[0].quant_params
        quantized = [t for t in inputs if t is not None and t.quant_params is not None]
        if not all(same_quantization(t.quant_params, params) and t.dtype == outputs[0].dtype for t in quantized):
            return None
        if not all(same_quantization(t.quant_params, params) for t in outputs):
            return None
        kernel = find_kernel(primitive.type, inputs[0].dtype)
        return None if kernel is None else kernel(inputs, outputs, primitive, name)


class QuantizedTable(_Delegating):
    """A one-input element-wise op on an 8-bit tensor: a 256-entry table of
    ``quantize(op(dequantize(q)))``, made at build by the op's float kernel."""

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        present = [t for t in inputs if t is not None]
        if len(present) != 1 or len(outputs) != 1 or float_kernel_class(primitive.type) is None:
            return None
        return _Table(inputs, outputs, primitive, name)


class _Table(NativeKernel):
    """``quantize(f(dequantize(x)))`` of an 8-bit x as a table of x's 256 values (``_results``),
    made at prepare; ``f`` the op's float kernel (``_real_results``)."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self.inputs[0].shape]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.outputs[0].dtype]

    @property
    def table_input(self) -> Tensor:
        return self.inputs[0]

    def _real_results(self, real: np.ndarray) -> np.ndarray:
        """f of the float32 values ``real``."""
        x = Tensor("x", np.float32, real.shape, data=real)
        out = Tensor("y", np.float32, real.shape, data=np.empty(real.shape, np.float32))
        op = float_kernel_class(self.type)([x], [out], self.primitive, self.name)
        op.resize()
        op.execute()
        return out.data

    def _results(self) -> np.ndarray:
        """The output for each of x's 256 values, in byte order."""
        x, y = self.table_input, self.outputs[0]
        real = self._real_results(dequantize_tensor(byte_values(x.dtype), x.quant_params))
        return quantize_tensor(real, y.quant_params, y.dtype)

    def prepare(self) -> None:
        with np.errstate(all="ignore"):
            self.lookup = byte_lookup(self._results().view(np.uint8))

    def execute(self) -> None:
        self.lookup(self.table_input.data, self.outputs[0].data.view(np.uint8))


class _ConstantArithmetic(_Table):
    """Add, Sub or Mul of an 8-bit tensor and a one-value constant: a table (``_Table``) of the op
    (``lite.ops.quantized_arithmetic``) of each of x's 256 values and the constant, the operands
    in the op's order."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(np.broadcast_shapes(self.inputs[0].shape, self.inputs[1].shape))]

    @property
    def table_input(self) -> Tensor:
        return self.inputs[1] if self.inputs[0].is_const else self.inputs[0]

    def _results(self) -> np.ndarray:
        x, y = self.table_input, self.outputs[0]
        constant = next(t for t in self.inputs if t is not x)
        values = (byte_values(x.dtype), x.quant_params)
        c = (constant.data.reshape(()), constant.quant_params)
        operands = (*c, *values) if constant is self.inputs[0] else (*values, *c)
        return quantized_arithmetic(self.type, *operands, y.quant_params, y.dtype)


class QuantizedArithmetic(_Delegating):
    """Add, Sub, Mul of two quantized tensors (per-tensor parameters), no activation, as
    ``lite.ops.quantized_arithmetic`` computes them (8-bit Add and Mul as onnxruntime's QLinearAdd
    and QLinearMul)."""

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        tensors = [*inputs, *outputs]
        if (len(inputs) != 2 or None in inputs or primitive.attrs.get("activation_type", "NO_ACTIVATION")
                != "NO_ACTIVATION" or not all(t.quant_params is not None and t.quant_params.per_tensor
                                              for t in tensors)):
            return None
        if _one_value_constant(inputs) and _one_size(inputs, outputs) and all(t.dtype in BYTES for t in tensors):
            return _ConstantArithmetic(inputs, outputs, primitive, name)
        return _Arithmetic(inputs, outputs, primitive, name)


def _one_value_constant(inputs: list[Tensor]) -> bool:
    """Whether exactly one of the two inputs is a constant of one value."""
    return sum(t.is_const and t.data is not None and t.data.size == 1 for t in inputs) == 1


def _one_size(inputs: list[Tensor], outputs: list[Tensor]) -> bool:
    """Whether the output has as many values as the input that is not the constant, at every
    shape: the constant's rank is no higher than the other input's."""
    constant = next(t for t in inputs if t.is_const and t.data is not None and t.data.size == 1)
    other = inputs[1] if constant is inputs[0] else inputs[0]
    return len(constant.shape) <= len(other.shape) and len(outputs) == 1


class _Arithmetic(NativeKernel):
    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(np.broadcast_shapes(self.inputs[0].shape, self.inputs[1].shape))]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.outputs[0].dtype]

    def resize(self) -> None:
        self.compiled = _compiled_arithmetic(self)

    def execute(self) -> None:
        if self.compiled is not None:
            self.compiled()
            return
        (a, b), y = self.inputs, self.outputs[0]
        y.data[...] = quantized_arithmetic(self.type, a.data, a.quant_params, b.data, b.quant_params, y.quant_params,
                                           y.dtype)


def _compiled_arithmetic(kernel: _Arithmetic):
    """A call computing the op on ``lite.kernels.fast.int8_elementwise`` (bit-identical), or None
    where it does not apply: compiled kernels off, other shapes or types, scales not finite."""
    from lite.kernels import fast

    (a, b), y = kernel.inputs, kernel.outputs[0]
    tensors = (a, b, y)
    if not fast.enabled() or any(t.dtype not in BYTES for t in tensors) or not a.shape == b.shape == y.shape:
        return None
    params = [per_tensor_terms(t.quant_params) for t in tensors]
    if not all(np.isfinite(scale) and scale != 0 for scale, _ in params):
        return None
    from lite.kernels.fast import int8_elementwise

    int8_elementwise.warm(np.dtype(a.dtype), np.dtype(b.dtype), np.dtype(y.dtype))
    low, high = qrange(y.dtype, y.quant_params.bits)
    terms = (*params[0], *params[1], *params[2], np.float32(low), np.float32(high))
    return _ArithmeticRun(kernel, int8_elementwise.OPS[kernel.type], terms)


class _ArithmeticRun:
    """The compiled op on the kernel's current arrays: its chunks shared out among the model's
    threads (``int8_elementwise.crew_jobs`` where the three are of one byte type), made again
    when an array changes; arrays compiled code does not take go through contiguous copies."""

    def __init__(self, kernel: _Arithmetic, op: int, terms: tuple):
        self.kernel, self.op, self.terms = kernel, op, terms
        self.arrays: tuple[np.ndarray, ...] = ()
        self.step = None
        same = len({t.dtype for t in (*kernel.inputs, *kernel.outputs)}) == 1
        if same and kernel.threads.crew() is not None:
            from lite.kernels.fast import crew, int8_elementwise

            crew.warm(int8_elementwise.arithmetic_job)

    def __call__(self) -> None:
        from lite.kernels import fast

        (a, b), out = (t.data for t in self.kernel.inputs), self.kernel.outputs[0].data
        if fast.takes(a, b, out):
            if self.step is None or any(x is not y for x, y in zip((a, b, out), self.arrays, strict=True)):
                self.arrays, self.step = (a, b, out), self._step(a.reshape(-1), b.reshape(-1), out.reshape(-1))
            self.step()
            return
        result = np.empty(out.shape, out.dtype)
        self._step(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), result.reshape(-1))()
        out[...] = result

    def _step(self, a: np.ndarray, b: np.ndarray, out: np.ndarray):
        from functools import partial

        from lite.kernels.fast import int8_elementwise

        terms, chunks = self.terms, -(-out.size // int8_elementwise.CHUNK)
        shared = (self.op, a, *terms[:2], b, *terms[2:6], *terms[6:], out)

        def piece(_: int, first: int, last: int):
            return partial(int8_elementwise.arithmetic_chunks, *shared, first, last)

        def jobs(bounds: list[tuple[int, int]]):
            return int8_elementwise.crew_jobs(self.op, a, b, out, terms, bounds)

        same = a.dtype == b.dtype == out.dtype
        return self.kernel.threads.crew_loop(chunks, piece, jobs if same else None, per_thread=1)


class QuantizedAverage(_Delegating):
    """A quantized average pool: a global one of an 8-bit tensor with per-tensor parameters on the compiled
    ``int8_elementwise.global_average`` (its integer sums), others as ``QuantizedOp`` (float64 sums)."""

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        from lite.kernels import fast

        tensors = [*inputs, *outputs]
        if (not fast.enabled() or not primitive.attrs.get("is_global") or len(inputs) != 1 or len(outputs) != 1
                or not all(t is not None and t.dtype in BYTES and t.quant_params is not None
                           and t.quant_params.per_tensor for t in tensors)):
            return None
        return _GlobalAverage(inputs, outputs, primitive, name)


class _GlobalAverage(NativeKernel):
    def check_attrs(self) -> None:
        if len(self.inputs[0].shape) < 3:
            self.fail(f"a global pool needs an input of rank 3 or more, got rank {len(self.inputs[0].shape)}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape = self.inputs[0].shape
        return [(*shape[:2], *(1 for _ in shape[2:]))]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.outputs[0].dtype]

    def prepare(self) -> None:
        from lite.kernels.fast import int8_elementwise

        (x_scale, x_zero), (y_scale, y_zero) = (per_tensor_terms(t.quant_params) for t in (*self.inputs, *self.outputs))
        low, high = qrange(self.outputs[0].dtype, self.outputs[0].quant_params.bits)
        self.terms = (float(x_zero), float(x_scale), float(y_scale), float(y_zero), float(low), float(high))
        int8_elementwise.warm_average(self.inputs[0].dtype, self.outputs[0].dtype)

    def execute(self) -> None:
        from lite.kernels.fast import int8_elementwise

        x, out = self.inputs[0].data, self.outputs[0].data
        rows, count = x.shape[0] * x.shape[1], x.size // max(x.shape[0] * x.shape[1], 1)
        x_zero, x_scale, y_scale, y_zero, low, high = self.terms
        flat = out.reshape(rows)
        int8_elementwise.global_average(np.ascontiguousarray(x).reshape(rows, count), x_zero, x_scale,
                                        1.0 / max(count, 1), y_scale, y_zero, low, high, flat)


class QuantizedSoftmax(_Delegating):
    """A quantized Softmax of an 8-bit tensor with per-tensor parameters: ``lite.ops.quantized_softmax``
    over its trailing axes or over one other axis (its values moved last, as onnxruntime's
    QLinearSoftmax transposes them; on the compiled ``int8_elementwise.softmax_rows`` where compiled
    kernels are on), else ``QuantizedOp``."""

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        tensors = [*inputs, *outputs]
        if (primitive.type != "Softmax" or len(inputs) != 1 or len(outputs) != 1
                or not all(t is not None and t.dtype in BYTES and t.quant_params is not None
                           and t.quant_params.per_tensor for t in tensors)
                or not all(np.isfinite(s) and s > 0 for s in (per_tensor_terms(t.quant_params)[0] for t in tensors))):
            return None
        return _Softmax(inputs, outputs, primitive, name)


class _GeneralBacked(NativeKernel):
    """A compiled quantized op that keeps the general kernel (``general``, a ``QuantizedOp``) for its
    shapes, its float kernel's attributes and the forms it does not run itself."""

    def check_attrs(self) -> None:
        self.general = QuantizedOp(self.inputs, self.outputs, self.primitive, self.name)
        self.value_inputs = self.general.value_inputs

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self.general.runtime_shapes = self.runtime_shapes
        return self.general.infer_shapes()

    def output_dtypes(self) -> list[np.dtype]:
        return [self.outputs[0].dtype]


class _Softmax(_GeneralBacked):
    def prepare(self) -> None:
        from lite.kernels import fast

        x, y = self.inputs[0], self.outputs[0]
        (y_scale, y_zero), (low, high) = per_tensor_terms(y.quant_params), qrange(y.dtype, y.quant_params.bits)
        self.scales = (per_tensor_terms(x.quant_params)[0], y_scale)
        self.terms = (output_multiplier(y_scale), y_zero, np.float32(low), np.float32(high))
        self.flip = np.uint8(0x80 if x.dtype == np.int8 else 0)
        self.compiled = fast.enabled()
        self.general.workspace, self.general.threads = self.workspace, self.threads
        if not self.compiled:
            return
        from lite.kernels.fast import int8_elementwise

        int8_elementwise.warm_softmax(y.dtype)
        if self.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(int8_elementwise.softmax_job)

    def resize(self) -> None:
        from lite.kernels.shape import normalize_axes

        shape = self.inputs[0].shape
        axes = sorted(normalize_axes(self, self.attrs["axis"], len(shape)))
        self.moved = axes[0] if len(axes) == 1 and axes[0] != len(shape) - 1 else None
        self.width = shape[self.moved] if self.moved is not None else math.prod(shape[len(shape) - len(axes):])
        trailing = axes == list(range(len(shape) - len(axes), len(shape)))
        self.trailing = (trailing or self.moved is not None) and self.width > 0
        if not self.trailing:
            self.general.prepare()
            self.general.resize()
            return
        self.rows = math.prod(shape) // self.width
        self.table = exponent_table(self.scales[0], self.width)
        self.exps = [np.zeros(self.width + SUM_LANES, np.float32)
                     for _ in range(self.threads.loop_pieces(self.rows))]
        self.arrays: tuple = ()

    def execute(self) -> None:
        if not self.trailing:
            self.general.execute()
            return
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.moved is not None:  # NOTE: one axis not the last: its values made rows, as onnxruntime transposes
            x, out = np.moveaxis(x, self.moved, -1), np.moveaxis(out, self.moved, -1)
        if not self.compiled:
            y = self.outputs[0]
            out[...] = quantized_softmax(x, *self.scales, int(self.terms[1]), y.dtype, self.width, y.quant_params.bits)
            return
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            x = np.ascontiguousarray(x)
            result = np.empty(x.shape, out.dtype)
            self._step(x, result)()
            out[...] = result
            return
        if self.arrays != (x, out):
            self.arrays, self.step = (x, out), self._step(x, out)
        self.step()

    def _step(self, x: np.ndarray, out: np.ndarray):
        from functools import partial

        from lite.kernels.fast import int8_elementwise

        shared = (x.reshape(-1).view(np.uint8), self.width, self.flip, self.table, *self.terms,
                  out.reshape(-1).view(np.uint8))

        def piece(index: int, first: int, last: int):
            return partial(int8_elementwise.softmax_rows, *shared, self.exps[index], first, last)

        def jobs(bounds: list[tuple[int, int]]):
            return int8_elementwise.softmax_crew_jobs(shared[0], self.table, shared[-1], self.width, self.flip,
                                                      self.terms, self.exps, bounds)

        return self.threads.crew_loop(self.rows, piece, jobs, per_thread=1)


class QuantizedLayerNorm(_Delegating):
    """A quantized LayerNormFusion of an 8-bit tensor with per-tensor parameters, one output, on the
    compiled ``int8_elementwise.layer_norm_rows`` (each row dequantized, normalized and quantized
    while in cache), else ``QuantizedOp``."""

    def _inner(self, inputs, outputs, primitive, name) -> NativeKernel | None:
        from lite.kernels import fast

        x, y = inputs[0], outputs[0]
        if (not fast.enabled() or len(outputs) != 1 or x is None
                or not all(t.dtype in BYTES and t.quant_params is not None and t.quant_params.per_tensor
                           for t in (x, y))
                or not all(np.isfinite(s) and s > 0 for s in (per_tensor_terms(t.quant_params)[0] for t in (x, y)))):
            return None
        return _LayerNorm(inputs, outputs, primitive, name)


class _LayerNorm(_GeneralBacked):
    """The general kernel's float LayerNormFusion (its constants dequantized) gives the axis, the
    epsilon and the scale and bias; the rows run compiled."""

    def prepare(self) -> None:
        from lite.kernels.fast import int8_elementwise

        x, y = self.inputs[0], self.outputs[0]
        self.table = np.ascontiguousarray(dequantize_tensor(byte_values(x.dtype), x.quant_params), np.float32)
        y_scale, y_zero = per_tensor_terms(y.quant_params)
        low, high = qrange(y.dtype, y.quant_params.bits)
        self.terms = (y_scale, y_zero, np.float32(low), np.float32(high))
        int8_elementwise.warm_layer_norm()
        if self.threads.crew() is not None:
            from lite.kernels.fast import crew

            crew.warm(int8_elementwise.layer_norm_job)

    def resize(self) -> None:
        inner = self.general.inner
        self.general.infer_shapes()
        width = math.prod(self.inputs[0].shape[inner.axis:])
        self.width = width
        self.scale, self.bias = (np.ascontiguousarray(v, np.float32) for v in inner.affine())
        self.epsilon = np.float32(inner.epsilon)
        self.count = math.prod(self.inputs[0].shape) // width if width else 0
        self.rows = [np.zeros(width, np.float32) for _ in range(self.threads.loop_pieces(max(self.count, 1)))]
        self.arrays: tuple = ()

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.count == 0:
            return
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            result = np.empty(out.shape, out.dtype)
            self._step(np.ascontiguousarray(x), result)()
            out[...] = result
            return
        if len(self.arrays) != 2 or self.arrays[0] is not x or self.arrays[1] is not out:
            self.arrays, self.step = (x, out), self._step(x, out)
        self.step()

    def _step(self, x: np.ndarray, out: np.ndarray):
        from functools import partial

        from lite.kernels.fast import int8_elementwise

        flat, target = x.view(np.uint8).reshape(self.count, self.width), out.view(np.uint8).reshape(self.count,
                                                                                                    self.width)
        shared = (flat, self.table, self.scale, self.bias, self.epsilon, *self.terms, target)

        def piece(index: int, first: int, last: int):
            return partial(int8_elementwise.layer_norm_rows, *shared, self.rows[index], first, last)

        def jobs(bounds: list[tuple[int, int]]):
            return int8_elementwise.layer_norm_crew_jobs(flat, self.table, self.scale, self.bias,
                                                         (self.epsilon, *self.terms), target, self.rows, bounds)

        return self.threads.crew_loop(self.count, piece, jobs, per_thread=1)


_register(MOVEMENT_OPS, QuantizedMovement)
_register(TABLE_OPS, QuantizedTable)
_register(FLOAT_OPS, QuantizedArithmetic)
_register(("AvgPoolFusion",), QuantizedAverage)
_register(("Softmax",), QuantizedSoftmax)
_register(("LayerNormFusion",), QuantizedLayerNorm)
