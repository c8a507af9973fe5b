"""Quantized ops on the native backend: every op that has a float kernel also runs on quantized
tensors, by the meaning ``lite/ops/quant.py`` gives them (dequantize, the float op, quantize).

``QuantizedOp`` wraps the op's float kernel: it dequantizes each quantized input into a float
array of its own (constants once, at build), runs the float kernel on them and quantizes its
outputs by their QuantParams. Convolutions, products and average pools run their float kernel in
float64, where the integer accumulation ONNX defines (and a pool's sum) is exact. Faster kernels
register for an op with ``register_quantized`` and take precedence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.fast.int8_plans import (
    compiled_product,
    exact_activation_product,
    exact_in_float32,
    requantization_terms,
)
from lite.kernels.quant import byte_dequantizer, byte_quantizer
from lite.kernels.registry import find_kernel, find_quantized_kernel
from lite.ops.quant import (
    ACCUMULATING_OPS,
    activation_bounds,
    dequantize_tensor,
    per_tensor_terms,
    quantize_tensor,
    requantize,
    requantize_multiplier,
)
from lite.primitive import Primitive
from lite.tensor import Tensor


def quantized_kernel_class(op_type: str, dtype: np.dtype) -> type[NativeKernel] | None:
    """The kernel class of quantized ``op_type`` on ``dtype`` inputs: a registered one, else
    ``QuantizedOp`` where the op has a float kernel; None where neither."""
    registered = find_quantized_kernel(op_type, dtype)
    if registered is not None:
        return registered
    if op_type in _PRODUCTS:
        return QuantizedProduct
    return QuantizedOp if float_kernel_class(op_type) is not None else None


_PRODUCTS = ("Conv2DFusion", "MatMulFusion")


def _float_dtype(op_type: str) -> np.dtype:
    wide = op_type in ACCUMULATING_OPS and find_kernel(op_type, np.float64) is not None
    return np.dtype(np.float64 if wide else np.float32)


def float_kernel_class(op_type: str) -> type[NativeKernel] | None:
    return find_kernel(op_type, _float_dtype(op_type))


def _float_twin(tensor: Tensor | None, dtype: np.dtype) -> Tensor | None:
    """The float tensor the float kernel reads in place of a quantized one (constants
    dequantized now); other tensors are shared as they are."""
    if tensor is None or tensor.quant_params is None:
        return tensor
    twin = Tensor(tensor.name, dtype, tensor.shape, tensor.format, is_const=tensor.is_const)
    if tensor.is_const and tensor.data is not None:
        twin.data = dequantize_tensor(tensor.data, tensor.quant_params, dtype)
    return twin


class QuantizedOp(NativeKernel):
    """Any op on quantized tensors, computed as ``quantize(op(dequantize(inputs)))`` by the op's
    float kernel (float64 for convolutions, products and average pools, float32 otherwise)."""

    def __init__(self, inputs: list[Tensor | None], outputs: list[Tensor], primitive: Primitive, name: str = ""):
        self.float_dtype = _float_dtype(primitive.type)
        self.float_inputs = [_float_twin(t, self.float_dtype) for t in inputs]
        self.float_outputs = [_float_twin(t, self.float_dtype) for t in outputs]
        float_class = float_kernel_class(primitive.type)
        self.inner = float_class(self.float_inputs, self.float_outputs, primitive, name)
        self.value_inputs = float_class.value_inputs
        super().__init__(inputs, outputs, primitive, name)
        self.constants = [t for t in inputs if t is not None and t.is_const and t.quant_params is None]
        self.dequantizers: dict[Tensor, Callable | None] = {}  # NOTE: made at the first execute, per tensor
        self.quantizers: dict[Tensor, Callable | None] = {}

    def check_attrs(self) -> None:
        for tensor in self.outputs:
            if tensor.quant_params is None:
                self.fail(f"output {tensor.name!r} of a quantized op has no quantization parameters")

    def _sync_inputs(self) -> None:
        for tensor, twin in zip(self.inputs, self.float_inputs, strict=True):
            if twin is not tensor and twin is not None:
                twin.shape, twin.value_known = tensor.shape, tensor.value_known

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self._sync_inputs()
        self.inner.runtime_shapes = self.runtime_shapes
        return self.inner.infer_shapes()

    def output_dtypes(self) -> list[np.dtype]:
        return [t.dtype for t in self.outputs]

    def prepare(self) -> None:
        self._share_context()
        self.inner.prepare()

    def resize(self) -> None:
        self._share_context()
        self._sync_inputs()
        for tensor, twin in zip(self.inputs, self.float_inputs, strict=True):
            if twin is not tensor and twin is not None and not twin.is_const:
                twin.data = np.empty(tensor.shape, self.float_dtype)
        for tensor, twin in zip(self.outputs, self.float_outputs, strict=True):
            twin.shape = tensor.shape
            twin.data = np.empty(tensor.shape, self.float_dtype)
        self.inner.resize()

    def _share_context(self) -> None:
        self.inner.workspace, self.inner.threads = self.workspace, self.threads

    def execute(self) -> None:
        for tensor, twin in zip(self.inputs, self.float_inputs, strict=True):
            if twin is not tensor and twin is not None and not twin.is_const:
                self._dequantize(tensor, twin.data)
        self.inner.execute()
        for tensor, twin in zip(self.outputs, self.float_outputs, strict=True):
            self._quantize(twin.data, tensor)

    def _dequantize(self, tensor: Tensor, out: np.ndarray) -> None:
        """``dequantize_tensor`` of a quantized input into its float twin's array (a compiled table
        lookup where it is an 8-bit tensor with per-tensor parameters, dequantized to float32)."""
        if tensor not in self.dequantizers:
            params = tensor.quant_params
            self.dequantizers[tensor] = byte_dequantizer(tensor.dtype, lambda v: dequantize_tensor(
                v, params, self.float_dtype)) if params.per_tensor and self.float_dtype == np.float32 else None
        dequantize = self.dequantizers[tensor]
        if dequantize is not None:
            dequantize(tensor.data, out)
        else:
            out[...] = dequantize_tensor(tensor.data, tensor.quant_params, self.float_dtype)

    def _quantize(self, x: np.ndarray, tensor: Tensor) -> None:
        """``quantize_tensor`` of a float output into the quantized one (compiled where x is
        float32, the output 8-bit, the parameters per tensor with a finite positive scale)."""
        if tensor not in self.quantizers:
            params = tensor.quant_params
            scale, zero_point = per_tensor_terms(params)
            self.quantizers[tensor] = byte_quantizer(float(scale), float(zero_point), tensor.dtype, params.bits) \
                if params.per_tensor and self.float_dtype == np.float32 else None
        quantize = self.quantizers[tensor]
        if quantize is not None and fast.takes(x, tensor.data):
            quantize(x, tensor.data)
        else:
            tensor.data[...] = quantize_tensor(x, tensor.quant_params, tensor.dtype)


class QuantizedProduct(QuantizedOp):
    """A quantized convolution or matrix product (Conv2DFusion, MatMulFusion) computed as ONNX's
    QLinearConv and QLinearMatMul define it: ``(x - x_zero_point)`` times ``(w - w_zero_point)``
    accumulated exactly (the float kernel in float64), the int32 bias added, then
    ``lite.ops.quant.requantize`` with one multiplier per output channel.

    Where the parameters do not have that form (x or the output per axis, w per axis along another
    axis than the output channels', blocked scales, an activation no output range expresses),
    the op runs as ``QuantizedOp``: dequantized, in float64.
    """

    def __init__(self, inputs: list[Tensor | None], outputs: list[Tensor], primitive: Primitive, name: str = ""):
        self.layout = _integer_layout(inputs, outputs, primitive)
        if self.layout is None:
            super().__init__(inputs, outputs, primitive, name)
            return
        self.exact32 = primitive.type == "Conv2DFusion" and exact_in_float32(inputs[0], inputs[1], primitive)
        self._build_float_kernel(inputs, outputs, primitive, name, np.float32 if self.exact32 else np.float64)
        NativeKernel.__init__(self, inputs, outputs, primitive, name)
        self.bias = inputs[2] if len(inputs) > 2 else None
        self.constants = []
        self.compiled: Callable[[], None] | None = None

    def _build_float_kernel(self, inputs: list[Tensor | None], outputs: list[Tensor], primitive: Primitive, name: str,
                            dtype) -> None:
        """The float kernel of the offsets (``x - x_zero_point`` by ``w - w_zero_point``) in ``dtype``."""
        self.float_dtype = np.dtype(dtype)
        self.float_inputs = [_offset_twin(inputs[0], self.float_dtype), _offset_twin(inputs[1], self.float_dtype)]
        self.float_outputs = [Tensor(outputs[0].name, self.float_dtype, outputs[0].shape, outputs[0].format)]
        plain = Primitive(primitive.type, {**primitive.attrs, "activation_type": "NO_ACTIVATION"})
        float_class = find_kernel(primitive.type, self.float_dtype)
        self.inner = float_class(self.float_inputs, self.float_outputs, plain, name)
        self.value_inputs = float_class.value_inputs

    def _choose_float_dtype(self) -> None:
        """A product of two activations sums in float32 where every sum is exact there
        (``exact_activation_product``), else float64: decided at each input shape (its K may change)."""
        if self.inputs[1].is_const:
            return
        exact = exact_activation_product(self, self._inner_terms())
        if exact != self.exact32:
            self.exact32 = exact
            self._build_float_kernel(self.inputs, self.outputs, self.primitive, self.name,
                                     np.float32 if exact else np.float64)
            self._share_context()  # NOTE: _prepare_float_path prepares it (its twins hold no data yet)

    def _inner_terms(self) -> int:
        """K, the terms of each sum of a product (its inputs' shapes as they are now)."""
        shape = self.inputs[0].shape
        return shape[-2] if self.attrs.get("transpose_a") and len(shape) > 1 else shape[-1]

    def packed_constants(self) -> list[Tensor]:
        """The constant weight where a compiled plan runs: every plan keeps its own packed (or
        float32) copy and never reads the original again at these shapes."""
        weight = self.inputs[1]
        return [weight] if getattr(self, "compiled", None) is not None and weight.is_const else []

    def _sync_inputs(self) -> None:
        if self.layout is None:
            super()._sync_inputs()
            return
        for tensor, twin in zip(self.inputs, self.float_inputs, strict=False):
            twin.shape, twin.value_known = tensor.shape, tensor.value_known

    def resize(self) -> None:
        if self.layout is None:
            super().resize()
            return
        self._share_context()
        self._choose_float_dtype()
        self._sync_inputs()
        self._plan_requantization()
        self.compiled = compiled_product(self)  # NOTE: exact32 layers: the depthwise plan, or None
        if self.compiled is not None:
            return
        self._prepare_float_path()
        for tensor, twin in zip(self.inputs, self.float_inputs, strict=False):
            if not twin.is_const:
                twin.data = np.empty(tensor.shape, self.float_dtype)
        out, twin = self.outputs[0], self.float_outputs[0]
        twin.shape, twin.data = out.shape, np.empty(out.shape, self.float_dtype)
        self.inner.resize()

    def prepare(self) -> None:
        if self.layout is None:
            super().prepare()
            return
        self._share_context()  # NOTE: the float kernel is prepared only if resize chooses the float path

    def _prepare_float_path(self) -> None:
        """The float kernel's weight offsets and its own prepare, once (the compiled path needs neither)."""
        if self.float_inputs[1].data is not None:
            return
        for twin, tensor in zip(self.float_inputs, self.inputs, strict=False):
            if twin.is_const:
                _fill_offsets(twin, tensor)
        self.inner.prepare()

    def _plan_requantization(self) -> None:
        x, w, out = (t.quant_params for t in (self.inputs[0], self.inputs[1], self.outputs[0]))
        channels = self.outputs[0].shape[self.layout.channel_axis]
        shape = [1] * len(self.outputs[0].shape)
        shape[self.layout.channel_axis] = channels
        self.multiplier = np.broadcast_to(requantize_multiplier(x.scale[0], w.scale, out.scale[0]),
                                          (channels,)).reshape(shape)
        self.bias_acc = None if self.bias is None else self._bias_in_accumulator(x, w).reshape(shape)
        zero_point = int(out.zero_point[0]) if out.zero_point.size else 0
        self.zero_point = zero_point
        self.bounds = activation_bounds(self.activation_name, self.outputs[0].dtype, float(out.scale[0]),
                                        zero_point, out.bits)

    @property
    def activation_name(self) -> str:
        return self.attrs.get("activation_type", "NO_ACTIVATION")

    def _bias_in_accumulator(self, x, w) -> np.ndarray:
        """The bias in the accumulator's units (scale x_scale * w_scale): the int32 values where
        its scale is that (to float32 rounding), else its real value divided by it, rounded half to even."""
        bias = self.bias.data
        unit = (np.float32(x.scale[0]) * w.scale).astype(np.float32)
        unit = np.broadcast_to(unit, bias.shape)
        params = self.bias.quant_params
        if params is not None and not params.zero_point.any() and np.allclose(
                np.broadcast_to(params.scale, bias.shape), unit, rtol=1e-6, atol=0):
            return bias.astype(np.float64)
        real = bias.astype(np.float64) if params is None else dequantize_tensor(bias, params, np.float64)
        return np.rint(real / unit.astype(np.float64))

    def execute(self) -> None:
        if self.layout is None:
            super().execute()
            return
        if self.compiled is not None:
            self.compiled()
            return
        for tensor, twin, zero_point in zip(self.inputs, self.float_inputs, self.layout.zero_points, strict=False):
            if not twin.is_const:
                np.subtract(tensor.data, zero_point, out=twin.data, dtype=self.float_dtype)
        self.inner.execute()
        acc = self.float_outputs[0].data
        if self.exact32:
            self._requantize_sums(acc)
            return
        if self.bias_acc is not None:
            acc += self.bias_acc
        self.outputs[0].data[...] = requantize(acc, self.multiplier, self.zero_point, self.outputs[0].dtype,
                                               self.bounds)


    def _requantize_sums(self, sums: np.ndarray) -> None:
        """The output from exact float32 sums (integers), the bias added in int64 (``fast.int8``)."""
        from lite.kernels.fast.int8 import requantize_planes

        out = self.outputs[0].data
        terms = requantization_terms(self)
        if self.layout.channel_axis == 1:
            requantize_planes(sums.reshape(*sums.shape[:2], -1), *terms, out.reshape(*out.shape[:2], -1))
            return
        bias, multiplier, *bounds = terms  # NOTE: a product of two activations: one multiplier, no bias
        requantize_planes(sums.reshape(1, 1, -1), bias[:1], multiplier[:1], *bounds, out.reshape(1, 1, -1))


class _Layout:
    """What the integer form of a quantized product needs: the output's channel axis and x's zero
    point (``zero_points``: x's and, where w is not a constant, w's)."""

    def __init__(self, channel_axis: int, x_zero_point: int, w_zero_point: int = 0):
        self.channel_axis, self.x_zero_point = channel_axis, x_zero_point
        self.zero_points = (x_zero_point, w_zero_point)


def _zero_point(params) -> int:
    return int(params.zero_point[0]) if params.zero_point.size else 0


def _integer_layout(inputs: list[Tensor | None], outputs: list[Tensor], primitive: Primitive) -> _Layout | None:
    """The layout where the op has the integer form (see QuantizedProduct), else None."""
    if len(inputs) < 2 or inputs[1] is None or len(outputs) != 1:
        return None
    x, w, out = (t.quant_params for t in (inputs[0], inputs[1], outputs[0]))
    if x is None or w is None or out is None or not (x.per_tensor and out.per_tensor) or w.block_size:
        return None
    if not inputs[1].is_const:
        return _activation_layout(inputs, primitive)
    if activation_bounds(primitive.attrs.get("activation_type", "NO_ACTIVATION"), outputs[0].dtype, 1.0, 0) is None:
        return None
    rank = len(inputs[1].shape)
    if primitive.type == "Conv2DFusion":
        weight_axis, channel_axis = 0, 1
    else:
        weight_axis = rank - 2 if primitive.attrs.get("transpose_b") else rank - 1
        channel_axis = -1
    if not w.per_tensor and w.axis != weight_axis:
        return None
    bias = inputs[2] if len(inputs) > 2 else None
    if bias is not None and (not bias.is_const or len(bias.shape) != 1):
        return None
    return _Layout(channel_axis, _zero_point(x))


def _activation_layout(inputs: list[Tensor | None], primitive: Primitive) -> _Layout | None:
    """The layout of a product of two activations (w not a constant): a MatMul, w per tensor, no bias."""
    if primitive.type != "MatMulFusion" or not inputs[1].quant_params.per_tensor or len(inputs) > 2:
        return None
    return _Layout(-1, _zero_point(inputs[0].quant_params), _zero_point(inputs[1].quant_params))


def _offset_twin(tensor: Tensor, dtype: np.dtype) -> Tensor:
    """The float tensor that holds ``tensor - zero_point`` in ``dtype`` (a constant's values are
    computed by ``_fill_offsets`` when the float path is chosen: the compiled path never needs them)."""
    return Tensor(tensor.name, dtype, tensor.shape, tensor.format, is_const=tensor.is_const)


def _fill_offsets(twin: Tensor, tensor: Tensor) -> None:
    if twin.data is None and tensor.data is not None:
        offsets = dequantize_tensor(tensor.data, _unit_scale(tensor.quant_params), np.float64)
        twin.data = offsets.astype(twin.dtype)


def _unit_scale(params):
    """``params`` with every scale 1: dequantizing by it subtracts the zero point only."""
    from dataclasses import replace

    return replace(params, scale=np.ones_like(params.scale))
