"""The Activation kernel: every ActivationType of schema/ops.fbs."""

from __future__ import annotations

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.fused import clip_ufunc
from lite.kernels.registry import register
from lite.ops.activation import ACTIVATION_TYPES, FUSED_CLIPS
from lite.ops.dtypes import FLOATS


@register("Activation", FLOATS)
class Activation(NativeKernel):
    """activation_type applied element-wise; alpha, beta, min_val and max_val as ops.fbs says.

    Each type is the method named after it in lower case, e.g. ``leaky_relu(x, out)``.
    """

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

    def execute(self) -> None:
        self.function(self.inputs[0].data, self.outputs[0].data)

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
