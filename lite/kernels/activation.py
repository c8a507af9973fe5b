"""The Activation kernel (every ActivationType of schema/ops.fbs), PReLUFusion, Clip with bounds read at
run time, and Shrink."""

from __future__ import annotations

import math

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import Unary, check_io, erf
from lite.kernels.fused import clip_ufunc
from lite.kernels.registry import register
from lite.ops.activation import ACTIVATION_TYPES, FUSED_CLIPS, GELU_TANH_CUBIC, SQRT_2_OVER_PI, SQRT_HALF
from lite.ops.dtypes import FLOATS, NUMBERS
from lite.tensor import Tensor

COMPILED_TYPES = ("GELU", "GELU_TANH", "SIGMOID", "SWISH", "HARD_SWISH")  # lite.kernels.fast.activation.COMPILED


@register("Activation", FLOATS)
class Activation(NativeKernel):
    """activation_type applied element-wise; alpha, beta, min_val and max_val as ops.fbs says.

    Each type is the method named after it in lower case, e.g. ``leaky_relu(x, out)``.
    """

    compiled = None  # the type's function in lite.kernels.fast.activation where it runs (set by resize)

    def check_attrs(self) -> None:
        check_io(self, 1)
        kind = self.attrs["activation_type"]
        if kind not in ACTIVATION_TYPES:
            self.fail(f"unknown activation_type {kind!r}; expected one of {ACTIVATION_TYPES}")
        self.function = getattr(self, kind.lower())
        self.alpha, self.beta = self.attrs["alpha"], self.attrs["beta"]
        # NOTE: leaky relu is max(x, alpha * x) for alpha <= 1 and min(x, alpha * x) above.
        self.leaky_select = np.maximum if self.alpha <= 1 else np.minimum
        self.min_val, self.max_val = self.attrs["min_val"], self.attrs["max_val"]

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self.inputs[0].shape]

    def no_activation(self, x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x)

    def relu(self, x: np.ndarray, out: np.ndarray) -> None:
        clip_ufunc(x, *FUSED_CLIPS["RELU"], out=out)  # NOTE: faster than np.maximum(x, 0); NaN stays NaN

    def relu6(self, x: np.ndarray, out: np.ndarray) -> None:
        clip_ufunc(x, *FUSED_CLIPS["RELU6"], out=out)

    def leaky_relu(self, x: np.ndarray, out: np.ndarray) -> None:
        np.multiply(x, self.alpha, out=out)
        self.leaky_select(out, x, out=out)

    def sigmoid(self, x: np.ndarray, out: np.ndarray) -> None:
        # NOTE: with e = exp(-|x|) in (0, 1], sigmoid is 1 / (1 + e) for x >= 0 and e / (1 + e)
        # below: nothing overflows and tiny results keep their relative precision.
        denominator = self.workspace.array(x.shape, x.dtype, 0)
        np.abs(x, out=out)
        np.negative(out, out=out)
        np.exp(out, out=out)
        np.add(out, 1, out=denominator)
        np.copyto(out, 1, where=x >= 0)
        np.divide(out, denominator, out=out)

    def tanh(self, x: np.ndarray, out: np.ndarray) -> None:
        np.tanh(x, out=out)

    def hard_sigmoid(self, x: np.ndarray, out: np.ndarray) -> None:
        np.multiply(x, self.alpha, out=out)
        np.add(out, self.beta, out=out)
        np.clip(out, 0, 1, out=out)

    def hard_swish(self, x: np.ndarray, out: np.ndarray) -> None:
        np.divide(x, 6, out=out)
        np.add(out, 0.5, out=out)
        np.clip(out, 0, 1, out=out)
        np.multiply(out, x, out=out)

    def clip(self, x: np.ndarray, out: np.ndarray) -> None:
        np.clip(x, self.min_val, self.max_val, out=out)

    def elu(self, x: np.ndarray, out: np.ndarray) -> None:
        # NOTE: alpha * expm1(min(x, 0)) + max(x, 0) is exactly x for x >= 0 and alpha * (exp(x) - 1) below.
        positive = self.workspace.array(x.shape, x.dtype, 1)
        np.maximum(x, 0, out=positive)
        np.minimum(x, 0, out=out)
        np.expm1(out, out=out)
        np.multiply(out, self.alpha, out=out)
        np.add(out, positive, out=out)

    def selu(self, x: np.ndarray, out: np.ndarray) -> None:
        self.elu(x, out)
        np.multiply(out, self.beta, out=out)

    def celu(self, x: np.ndarray, out: np.ndarray) -> None:
        # NOTE: min(0, alpha * expm1(x / alpha)) is 0 for x >= 0 whatever alpha's sign: x clamped to <= 0 first
        # gives the same without overflowing.
        positive = self.workspace.array(x.shape, x.dtype, 1)
        np.maximum(x, 0, out=positive)
        np.minimum(x, 0, out=out)
        np.divide(out, self.alpha, out=out)
        np.expm1(out, out=out)
        np.multiply(out, self.alpha, out=out)
        np.minimum(out, 0, out=out)
        np.add(out, positive, out=out)

    def softplus(self, x: np.ndarray, out: np.ndarray) -> None:
        np.logaddexp(x, 0, out=out)  # NOTE: log(exp(x) + exp(0)) without overflow

    def softsign(self, x: np.ndarray, out: np.ndarray) -> None:
        np.abs(x, out=out)
        np.add(out, 1, out=out)
        np.divide(x, out, out=out)

    def resize(self) -> None:
        self.compiled = None
        kind = self.attrs["activation_type"]
        if kind in COMPILED_TYPES and self.inputs[0].dtype == np.float32 and fast.enabled():
            from lite.kernels.fast import activation  # NOTE: imports the compiler: only when used

            activation.warm(kind)
            self.compiled = activation.COMPILED[kind]

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.compiled is not None and fast.takes(x, out):
            self.compiled(x.reshape(-1), out.reshape(-1), np.float32(self.alpha))
        else:
            self.function(x, out)

    def gelu(self, x: np.ndarray, out: np.ndarray) -> None:
        np.multiply(x, SQRT_HALF, out=out)
        erf(out, out, self.workspace)
        self._half_x_times_one_plus(x, out)

    def gelu_tanh(self, x: np.ndarray, out: np.ndarray) -> None:
        np.multiply(x, x, out=out)
        np.multiply(out, GELU_TANH_CUBIC, out=out)
        np.add(out, 1, out=out)
        np.multiply(out, x, out=out)
        np.multiply(out, SQRT_2_OVER_PI, out=out)
        np.tanh(out, out=out)
        self._half_x_times_one_plus(x, out)

    def _half_x_times_one_plus(self, x: np.ndarray, out: np.ndarray) -> None:
        """out = x * (1 + out) / 2."""
        np.add(out, 1, out=out)
        np.multiply(out, x, out=out)
        np.multiply(out, 0.5, out=out)

    def mish(self, x: np.ndarray, out: np.ndarray) -> None:
        np.logaddexp(x, 0, out=out)
        np.tanh(out, out=out)
        np.multiply(out, x, out=out)

    def thresholded_relu(self, x: np.ndarray, out: np.ndarray) -> None:
        out.fill(0)
        np.copyto(out, x, where=np.greater(x, self.alpha, out=self.workspace.array(x.shape, np.bool_, 1)))

    def swish(self, x: np.ndarray, out: np.ndarray) -> None:
        scaled = self.workspace.array(x.shape, x.dtype, 1)
        np.multiply(x, self.alpha, out=scaled)
        self.sigmoid(scaled, out)
        np.multiply(out, x, out=out)


@register("PReLUFusion", NUMBERS)
class PReLUFusion(NativeKernel):
    """x where x >= 0, slope * x below; the slope broadcasts to x's shape (ONNX PRelu)."""

    def check_attrs(self) -> None:
        check_io(self, 2)
        if self.inputs[1].dtype != self.inputs[0].dtype:
            self.fail(f"slope is {self.inputs[1].dtype.name}, x is {self.inputs[0].dtype.name}; they must match")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x, slope = self.inputs[0].shape, self.inputs[1].shape
        try:
            fits = np.broadcast_shapes(x, slope) == tuple(x)
        except ValueError:
            fits = False
        if not fits:
            self.fail(f"slope shape {slope} does not broadcast to x shape {x}")
        return [x]

    def execute(self) -> None:
        x, slope, out = self.inputs[0].data, self.inputs[1].data, self.outputs[0].data
        np.copyto(out, x)
        np.multiply(x, slope, out=out, where=np.less(x, 0, out=self.workspace.array(x.shape, np.bool_)))


@register("Clip", NUMBERS)
class Clip(NativeKernel):
    """min(max(x, min), max) with the bounds, one value each, read when it runs (an absent bound is no bound;
    min above max gives max everywhere, as ONNX Clip)."""

    def check_attrs(self) -> None:
        check_io(self, 1, optional=2)
        x = self.inputs[0]
        for bound in self.bounds():
            if bound.dtype != x.dtype:
                self.fail(f"bound {bound.name!r} is {bound.dtype.name}, x is {x.dtype.name}; they must match")

    def bounds(self) -> list[Tensor]:
        return [t for t in self.inputs[1:] if t is not None]

    def infer_shapes(self) -> list[tuple[int, ...]]:
        for bound in self.bounds():
            if math.prod(bound.shape) != 1:
                self.fail(f"bound {bound.name!r} must hold one value, got shape {bound.shape}")
        return [self.inputs[0].shape]

    def execute(self) -> None:
        source, out = self.inputs[0].data, self.outputs[0].data
        for bound, ufunc in zip(self.inputs[1:], (np.maximum, np.minimum), strict=False):
            if bound is not None:
                ufunc(source, bound.data.reshape(()), out=out)
                source = out
        if source is not out:
            np.copyto(out, source)


@register("Shrink", NUMBERS)
class Shrink(Unary):
    """x + bias where x < -lambd, x - bias where x > lambd, else 0 (integers computed in float64, then
    truncated, as onnxruntime does)."""

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        bias, lambd = self.attrs["bias"], self.attrs["lambd"]
        mask = self.workspace.array(x.shape, np.bool_)
        out.fill(0)
        np.add(x, bias, out=out, where=np.less(x, -lambd, out=mask), casting="unsafe")
        np.subtract(x, bias, out=out, where=np.greater(x, lambd, out=mask), casting="unsafe")
