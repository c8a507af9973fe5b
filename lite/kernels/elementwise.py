"""Element-wise kernels with numpy broadcasting: arithmetic, comparisons, logic, bits, Where, unary math."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel, Workspace
from lite.kernels.fused import apply_fused_activation, fused_activation
from lite.kernels.registry import register
from lite.ops.activation import ERF32_ALPHA, ERF32_BETA
from lite.ops.broadcast import broadcast_shapes
from lite.ops.dtypes import ALL, BOOL, FLOATS, INTS, NUMBERS


def check_io(kernel: NativeKernel, required: int, optional: int = 0, outputs: int | None = 1) -> None:
    """Fails unless ``kernel`` has ``required`` present inputs, at most ``optional`` more
    (None where absent) and ``outputs`` outputs (None: any number, at least one)."""
    n = len(kernel.inputs)
    if not required <= n <= required + optional or None in kernel.inputs[:required]:
        allowed = f"{required}" if not optional else f"{required} to {required + optional}"
        kernel.fail(f"expects {allowed} inputs ({required} required), got "
                    f"{[None if t is None else t.name for t in kernel.inputs]}")
    if outputs is not None and len(kernel.outputs) != outputs:
        kernel.fail(f"expects {outputs} output(s), got {len(kernel.outputs)}")


class Elementwise(NativeKernel):
    """Base of element-wise ops: ``ufunc`` over the inputs, broadcast numpy-style.

    ``arity`` is the number of inputs (None: one or more); inputs from ``uniform_from`` on
    must share one dtype (None: no constraint).
    """

    ufunc: ClassVar[np.ufunc]
    arity: ClassVar[int | None] = 2
    uniform_from: ClassVar[int | None] = 0

    def check_attrs(self) -> None:
        check_io(self, self.arity or max(len(self.inputs), 1))
        if self.uniform_from is not None:
            dtypes = {t.dtype for t in self.inputs[self.uniform_from:]}
            if len(dtypes) > 1:
                self.fail(f"inputs must share one dtype, got {sorted(d.name for d in dtypes)}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shapes = [t.shape for t in self.inputs]
        try:
            return [broadcast_shapes(*shapes)]
        except ValueError:
            self.fail(f"input shapes {shapes} do not broadcast")

    def execute(self) -> None:
        self.ufunc(*[t.data for t in self.inputs], out=self.outputs[0].data)


class Arithmetic(Elementwise):
    """A binary op with an optional fused activation (NO_ACTIVATION, RELU, RELU6)."""

    def check_attrs(self) -> None:
        super().check_attrs()
        self.activation = fused_activation(self)

    def execute(self) -> None:
        out = self.outputs[0].data
        self.ufunc(self.inputs[0].data, self.inputs[1].data, out=out)
        if self.activation != "NO_ACTIVATION":
            apply_fused_activation(out, self.activation)


@register("AddFusion", NUMBERS)
class AddFusion(Arithmetic):
    """a + b."""

    ufunc = np.add


@register("SubFusion", NUMBERS)
class SubFusion(Arithmetic):
    """a - b."""

    ufunc = np.subtract


@register("MulFusion", NUMBERS)
class MulFusion(Arithmetic):
    """a * b."""

    ufunc = np.multiply


@register("DivFusion", FLOATS)
class DivFusion(Arithmetic):
    """a / b."""

    ufunc = np.divide


@register("DivFusion", INTS)
class IntDivFusion(Arithmetic):
    """a / b on integers, truncating toward zero (C and ONNX semantics)."""

    def execute(self) -> None:
        a, b, out = self.inputs[0].data, self.inputs[1].data, self.outputs[0].data
        # NOTE: a - fmod(a, b) is an exact multiple of b, so floor division is exact.
        np.fmod(a, b, out=out)
        np.subtract(a, out, out=out)
        np.floor_divide(out, b, out=out)
        if self.activation != "NO_ACTIVATION":
            apply_fused_activation(out, self.activation)


@register("PowFusion", NUMBERS)
class PowFusion(Elementwise):
    """base ** exponent; the output has the base's dtype (integer bases compute in float64,
    then truncate, as onnxruntime does)."""

    uniform_from = None

    def check_attrs(self) -> None:
        super().check_attrs()
        self.compute = np.float64 if self.inputs[0].dtype.kind in "iu" else None

    def execute(self) -> None:
        np.power(self.inputs[0].data, self.inputs[1].data, out=self.outputs[0].data,
                 dtype=self.compute, casting="unsafe")


class Variadic(Elementwise):
    """Folds ``ufunc`` over one or more broadcast inputs."""

    arity = None

    def execute(self) -> None:
        out = self.outputs[0].data
        first, *rest = self.inputs
        if not rest:
            np.copyto(out, first.data)
            return
        self.ufunc(first.data, rest[0].data, out=out)
        for tensor in rest[1:]:
            self.ufunc(out, tensor.data, out=out)


@register("AddN", NUMBERS)
class AddN(Variadic):
    """Sum of the inputs (ONNX Sum)."""

    ufunc = np.add


@register("Maximum", NUMBERS)
class Maximum(Variadic):
    """Element-wise maximum of the inputs (ONNX Max); NaN propagates."""

    ufunc = np.maximum


@register("Minimum", NUMBERS)
class Minimum(Variadic):
    """Element-wise minimum of the inputs (ONNX Min); NaN propagates."""

    ufunc = np.minimum


class Comparison(Elementwise):
    """A binary comparison with a bool output."""

    def output_dtypes(self) -> list[np.dtype]:
        return [np.dtype(np.bool_)]


@register("Equal", ALL)
class Equal(Comparison):
    """a == b."""

    ufunc = np.equal


@register("Less", NUMBERS)
class Less(Comparison):
    """a < b."""

    ufunc = np.less


@register("Greater", NUMBERS)
class Greater(Comparison):
    """a > b."""

    ufunc = np.greater


@register("LessEqual", NUMBERS)
class LessEqual(Comparison):
    """a <= b."""

    ufunc = np.less_equal


@register("GreaterEqual", NUMBERS)
class GreaterEqual(Comparison):
    """a >= b."""

    ufunc = np.greater_equal


@register("LogicalAnd", BOOL)
class LogicalAnd(Elementwise):
    """a and b (ONNX And)."""

    ufunc = np.logical_and


@register("LogicalOr", BOOL)
class LogicalOr(Elementwise):
    """a or b (ONNX Or)."""

    ufunc = np.logical_or


@register("LogicalXor", BOOL)
class LogicalXor(Elementwise):
    """a xor b (ONNX Xor)."""

    ufunc = np.logical_xor


@register("Mod", NUMBERS)
class Mod(Elementwise):
    """a mod b: with the divisor's sign (Python's %), or with fmod the dividend's (C fmod); ONNX Mod."""

    def check_attrs(self) -> None:
        super().check_attrs()
        self.ufunc = np.fmod if self.attrs["fmod"] else np.mod


@register("BitShift", INTS)
class BitShift(Elementwise):
    """x shifted left or right by y bits; a shift below 0 or of the bit width or more leaves 0 (-1 shifting
    a negative x right): ONNX BitShift of opset 28, whose right shift of a signed x is arithmetic."""

    def execute(self) -> None:
        x, y, out = self.inputs[0].data, self.inputs[1].data, self.outputs[0].data
        if self.attrs["left"]:
            # NOTE: on the unsigned view a signed x wraps instead of overflowing, and y < 0 is a huge shift.
            unsigned = np.dtype(f"u{x.dtype.itemsize}")
            np.left_shift(x.view(unsigned), y.view(unsigned), out=out.view(unsigned))
        else:
            np.right_shift(x, y, out=out)  # NOTE: numpy gives 0 or -1 for y < 0 and y >= the width, as ONNX


@register("BitwiseAnd", INTS)
class BitwiseAnd(Elementwise):
    """a & b."""

    ufunc = np.bitwise_and


@register("BitwiseOr", INTS)
class BitwiseOr(Elementwise):
    """a | b."""

    ufunc = np.bitwise_or


@register("BitwiseXor", INTS)
class BitwiseXor(Elementwise):
    """a ^ b."""

    ufunc = np.bitwise_xor


@register("Where", [np.bool_])
class Where(Elementwise):
    """condition ? x : y, all three broadcast."""

    arity = 3
    uniform_from = 1

    def output_dtypes(self) -> list[np.dtype]:
        return [self.inputs[1].dtype]

    def execute(self) -> None:
        condition, x, y = (t.data for t in self.inputs)
        out = self.outputs[0].data
        np.copyto(out, y)
        np.copyto(out, x, where=condition)


class Unary(Elementwise):
    """``ufunc`` of one input."""

    arity = 1


@register("ExpFusion", FLOATS)
class ExpFusion(Unary):
    """exp(x)."""

    ufunc = np.exp


@register("Log", FLOATS)
class Log(Unary):
    """Natural logarithm."""

    ufunc = np.log


@register("Sqrt", FLOATS)
class Sqrt(Unary):
    """Square root."""

    ufunc = np.sqrt


@register("Neg", NUMBERS)
class Neg(Unary):
    """-x."""

    ufunc = np.negative


@register("Abs", NUMBERS)
class Abs(Unary):
    """|x|."""

    ufunc = np.absolute


@register("Erf", FLOATS)
class Erf(Unary):
    """The error function: float32 rational approximation (compiled where compiled kernels run),
    Cody's algorithm for float64."""

    compiled = None  # lite.kernels.fast.activation's erf where it runs (set by resize)

    def resize(self) -> None:
        super().resize()
        self.compiled = None
        if self.outputs[0].dtype == np.float32 and fast.enabled():
            from lite.kernels.fast import activation  # NOTE: imports the compiler: only when used

            activation.warm("ERF")
            self.compiled = activation.COMPILED["ERF"]

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.compiled is not None and x.shape == out.shape and fast.takes(x, out):
            self.compiled(x.reshape(-1), out.reshape(-1), np.float32(1))
        else:
            erf(x, out, self.workspace)


@register("Floor", FLOATS)
class Floor(Unary):
    """Largest integer <= x."""

    ufunc = np.floor


@register("Ceil", FLOATS)
class Ceil(Unary):
    """Smallest integer >= x."""

    ufunc = np.ceil


@register("Round", FLOATS)
class Round(Unary):
    """Nearest integer, halves to even."""

    ufunc = np.rint


@register("Sin", FLOATS)
class Sin(Unary):
    ufunc = np.sin


@register("Cos", FLOATS)
class Cos(Unary):
    ufunc = np.cos


@register("Tan", FLOATS)
class Tan(Unary):
    ufunc = np.tan


@register("Asin", FLOATS)
class Asin(Unary):
    ufunc = np.arcsin


@register("Acos", FLOATS)
class Acos(Unary):
    ufunc = np.arccos


@register("Atan", FLOATS)
class Atan(Unary):
    ufunc = np.arctan


@register("Sinh", FLOATS)
class Sinh(Unary):
    ufunc = np.sinh


@register("Cosh", FLOATS)
class Cosh(Unary):
    ufunc = np.cosh


@register("Asinh", FLOATS)
class Asinh(Unary):
    ufunc = np.arcsinh


@register("Acosh", FLOATS)
class Acosh(Unary):
    ufunc = np.arccosh


@register("Atanh", FLOATS)
class Atanh(Unary):
    ufunc = np.arctanh


@register("Reciprocal", FLOATS)
class Reciprocal(Unary):
    """1 / x."""

    ufunc = np.reciprocal


@register("Sign", NUMBERS)
class Sign(Unary):
    """-1, 0 or 1 (NaN stays NaN)."""

    ufunc = np.sign


@register("BitwiseNot", INTS)
class BitwiseNot(Unary):
    """~x."""

    ufunc = np.invert


@register("LogicalNot", BOOL)
class LogicalNot(Unary):
    """not x (ONNX Not)."""

    ufunc = np.logical_not


class Predicate(Unary):
    """A test of each element with a bool output."""

    def output_dtypes(self) -> list[np.dtype]:
        return [np.dtype(np.bool_)]


@register("IsNaN", FLOATS)
class IsNaN(Predicate):
    ufunc = np.isnan


# (detect_positive, detect_negative) -> the test
_INF_TESTS = {(True, True): np.isinf, (True, False): np.isposinf, (False, True): np.isneginf, (False, False): None}


@register("IsInf", FLOATS)
class IsInf(Predicate):
    """x is +inf (when detect_positive) or -inf (when detect_negative)."""

    def check_attrs(self) -> None:
        super().check_attrs()
        self.test = _INF_TESTS[bool(self.attrs["detect_positive"]), bool(self.attrs["detect_negative"])]

    def execute(self) -> None:
        out = self.outputs[0].data
        if self.test is None:
            out.fill(False)
        else:
            self.test(self.inputs[0].data, out=out)


def erf(x: np.ndarray, out: np.ndarray, workspace: Workspace) -> None:
    """Writes erf(x) into ``out``: Cody's algorithm for float64, else a float32 rational approximation with
    scratch memory from ``workspace`` (slot 0); ``out`` may be ``x``."""
    if out.dtype == np.float64:
        erf_float64(x, out)
    else:
        erf_float32(x, out, workspace.array((4, *x.shape), np.float32))


def _horner(z: np.ndarray, coeffs: tuple[float, ...], out: np.ndarray) -> np.ndarray:
    """Writes the polynomial ``coeffs`` (highest power first) at ``z`` into ``out``."""
    np.multiply(z, coeffs[0], out=out)
    out += coeffs[1]
    for c in coeffs[2:]:
        out *= z
        out += c
    return out


def erf_float32(x: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """Writes erf(x) into ``out`` computing in float32 (relative error below 4e-7 for normal
    floats); ``scratch`` is float32 of shape (4, *x.shape)."""
    v = np.clip(x, -4.0, 4.0, out=scratch[0, ...])
    z = np.multiply(v, v, out=scratch[1, ...])
    ratio = _horner(z, ERF32_ALPHA, scratch[2, ...])
    ratio /= _horner(z, ERF32_BETA, scratch[3, ...])
    # NOTE: P/Q is about 2/sqrt(pi); multiplying v last keeps tiny x from underflowing.
    np.multiply(ratio, v, out=out)


# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23
# (1969), as in Netlib SPECFUN CALERF; highest power first.
_ERF_NUM = (1.85777706184603153e-1, 3.16112374387056560e0, 1.13864154151050156e2,
            3.77485237685302021e2, 3.20937758913846947e3)
_ERF_DEN = (1.0, 2.36012909523441209e1, 2.44024637934444173e2, 1.28261652607737228e3,
            2.84423683343917062e3)
_ERFC_NUM = (2.15311535474403846e-8, 5.64188496988670089e-1, 8.88314979438837594e0,
             6.61191906371416295e1, 2.98635138197400131e2, 8.81952221241769090e2,
             1.71204761263407058e3, 2.05107837782607147e3, 1.23033935479799725e3)
_ERFC_DEN = (1.0, 1.57449261107098347e1, 1.17693950891312499e2, 5.37181101862009858e2,
             1.62138957456669019e3, 3.29079923573345963e3, 4.36261909014324716e3,
             3.43936767414372164e3, 1.23033935480374942e3)
_TAIL_NUM = (1.63153871373020978e-2, 3.05326634961232344e-1, 3.60344899949804439e-1,
             1.25781726111229246e-1, 1.60837851487422766e-2, 6.58749161529837803e-4)
_TAIL_DEN = (1.0, 2.56852019228982242e0, 1.87295284992346047e0, 5.27905102951428412e-1,
             6.05183413124413191e-2, 2.33520497626869185e-3)
_INV_SQRT_PI = 5.6418958354775628695e-1


def _rational(z: np.ndarray, num: tuple[float, ...], den: tuple[float, ...]) -> np.ndarray:
    ratio = _horner(z, num, np.empty_like(z))
    ratio /= _horner(z, den, np.empty_like(z))
    return ratio


def erf_float64(x: np.ndarray, out: np.ndarray) -> None:
    """Writes erf(x) into ``out`` (float64, relative error about 1e-15)."""
    y = np.abs(x)
    result = np.empty_like(y)
    small = y <= 0.46875
    ys = y[small]
    result[small] = ys * _rational(ys * ys, _ERF_NUM, _ERF_DEN)
    large = ~small
    result[large] = 1.0 - _erfc_above(y[large])
    np.copysign(result, x, out=out)


def _erfc_above(y: np.ndarray) -> np.ndarray:
    """erfc(y) for y > 0.46875 (NaN stays NaN)."""
    result = np.empty_like(y)
    mid = y <= 4.0
    ym = y[mid]
    result[mid] = np.exp(-ym * ym) * _rational(ym, _ERFC_NUM, _ERFC_DEN)
    tail = ~mid
    yt = np.minimum(y[tail], 27.0)  # erfc(27) is below the smallest normal float64
    z = 1.0 / (yt * yt)
    result[tail] = np.exp(-yt * yt) * (_INV_SQRT_PI - z * _rational(z, _TAIL_NUM, _TAIL_DEN)) / yt
    return result
