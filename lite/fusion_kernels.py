"""The kernels runtime CPU fusion makes (``lite.fusion`` decides where; ``lite.blocking`` runs
chains of them on channel blocks): a convolution with its residual Add (``ConvResidual``), a
producer with the Activation it absorbs (``ProducerActivation``), a gate's Mul with the 1x1
convolution reading its product (``ScaledInput``), a squeeze-and-excitation gate as one call
(``SqueezeExcite``), a DequantizeLinear -> element-wise float ops -> QuantizeLinear run of an 8-bit
tensor as a table of its 256 values (``TableChain``), a MatMulInteger with the Cast, Mul and Add
that turn its sums into a dynamically quantized linear layer's float output
(``ScaledIntegerProduct``), a layer norm over a channels-first image's channels between two
Transposes (``ChannelNorm``). Each keeps its parts, runs them one after the other where its fused
form does not fit, and gives them back (``unfuse``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lite.aligned import aligned_array
from lite.kernel import Kernel
from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.fused import compiled_terms
from lite.kernels.quant import byte_lookup
from lite.ops.activation import FUSED_CLIPS
from lite.ops.quant import byte_values
from lite.tensor import Tensor


class ConvResidual(Kernel):
    """A Conv2DFusion and the AddFusion that adds ``residual`` to its output, run as one kernel.

    ``parts`` are the two native kernels (a profile charges the time to the convolution). When
    the shapes or the convolution's plan do not allow the fused epilogue, the two run one after
    the other, the convolution into an array of its own.
    """

    def __init__(self, conv: NativeKernel, add: NativeKernel, residual: Tensor):
        super().__init__([*conv.inputs, residual], list(add.outputs), name=f"{conv.name}+{add.name}")
        self.conv, self.add, self.residual = conv, add, residual
        self.producer, self.parts = conv, (conv, add)
        self.fused = False

    @property
    def type(self) -> str:
        return f"{self.conv.type}+{self.add.type}"

    def resize(self) -> None:
        conv, inner, out = self.conv, self.conv.outputs[0], self.outputs[0]
        self.fused = inner.shape == self.residual.shape == out.shape
        conv.set_epilogue(replace(conv.epilogue, residual=self.residual if self.fused else None,
                                  residual_activation=self.add.activation))
        conv.resize()
        if self.fused and not conv.plan.takes_residual:
            self.fused = False
            conv.set_epilogue(replace(conv.epilogue, residual=None))
        if not self.fused:
            inner.data = aligned_array(inner.shape, inner.dtype)
        self.add.resize()

    def unfuse(self) -> None:
        """Gives the convolution back its own epilogue (when the build does not fuse the pair after all)."""
        self.conv.set_epilogue(replace(self.conv.epilogue, residual=None))
        self.conv.resize()

    def packed_constants(self) -> list[Tensor]:
        return self.conv.packed_constants()

    def execute(self) -> None:
        if self.fused:
            self.conv.outputs[0].data = self.outputs[0].data
            self.conv.execute()
        else:
            self.conv.execute()
            self.add.execute()


class ProducerActivation(Kernel):
    """A Conv2DFusion or MatMulFusion and the Activation that alone reads its output, run as one
    kernel (``parts``: a profile charges the time to the producer)."""

    def __init__(self, producer: NativeKernel, activation: NativeKernel):
        super().__init__(list(producer.inputs), list(activation.outputs), name=f"{producer.name}+{activation.name}")
        self.producer, self.activation = producer, activation
        self.parts = (producer, activation)

    @property
    def type(self) -> str:
        return f"{self.producer.type}+{self.activation.type}"

    def resize(self) -> None:
        absorbed = (self.activation.attrs["activation_type"], float(self.activation.alpha))
        self.producer.set_epilogue(replace(self.producer.epilogue, absorbed=absorbed))
        self.producer.resize()

    def unfuse(self) -> None:
        """Gives the producer back its own epilogue (when the build does not fuse the pair after all)."""
        self.producer.set_epilogue(replace(self.producer.epilogue, absorbed=None))
        self.producer.resize()

    def packed_constants(self) -> list[Tensor]:
        return self.producer.packed_constants()

    def execute(self) -> None:
        self.producer.outputs[0].data = self.outputs[0].data
        self.producer.execute()


class ScaledInput(Kernel):
    """``MulFusion(x, gate)`` and the 1x1 convolution that alone reads the product (``consumer``: the
    Conv2DFusion, or the fused kernel whose producer it is), run as one kernel.

    Where the gate has one image, (1, C, 1, 1), and the convolution's output channels are fewer
    than x's plane has positions, each run scales the weight's columns by the gate into a buffer
    the convolution multiplies by x itself; else the Mul and the convolution run one after the
    other. MobileNetV3's and EfficientNet's projections after their gates: O x C multiplies (24 x
    144 up to 112 x 672) against the Mul's C x H x W (144 x 56 x 56 down to 672 x 14 x 14).
    """

    def __init__(self, mul: NativeKernel, consumer: Kernel, x: Tensor, gate: Tensor):
        super().__init__([x, gate, *consumer.inputs[1:]], list(consumer.outputs), name=f"{mul.name}+{consumer.name}")
        self.mul, self.consumer, self.x, self.gate = mul, consumer, x, gate
        self.conv = getattr(consumer, "producer", consumer)
        self.product = mul.outputs[0]
        self.parts = (*getattr(consumer, "parts", (consumer,)), mul)
        self.fused = False
        self.weight: np.ndarray | None = None  # the convolution's own arranged weight
        self.scaled: np.ndarray | None = None

    @property
    def type(self) -> str:
        return f"{self.mul.type}+{self.consumer.type}"

    def resize(self) -> None:
        n, c, h, w = self.x.shape
        conv = self.conv
        self.weight = conv.weights  # NOTE: its own, which prepare may have made again since the last resize
        self.fused = (n == 1 and self.gate.shape == (1, c, 1, 1) and self.weight is not None
                      and self.weight.shape[:1] == (1,) and self.weight.shape[1] < h * w)
        if self.fused:
            if self.scaled is None or self.scaled.shape != self.weight.shape:
                self.scaled = np.empty_like(self.weight)
            conv.read_weights(self.scaled)
        else:
            self._restore()
            self.product.data = aligned_array(self.product.shape, self.product.dtype)
            self.mul.resize()
        self.consumer.resize()

    def _restore(self) -> None:
        self.conv.read_weights(None)

    def unfuse(self) -> None:
        """Gives the convolution back its own weight (when the build does not fuse after all)."""
        self._restore()
        unfuse = getattr(self.consumer, "unfuse", None)
        if unfuse is not None:
            unfuse()
        else:
            self.conv.resize()

    def execute(self) -> None:
        if self.fused:
            np.multiply(self.weight, self.gate.data.reshape(1, 1, -1), out=self.scaled)
            self.product.data = self.x.data
        else:
            self.mul.execute()
        self.consumer.execute()


class SqueezeExcite(Kernel):
    """A squeeze-and-excitation gate's kernels (``parts``: the global average pool, the first 1x1
    convolution, its Activation if any, the second, its Activation if any) run as one compiled
    call; a profile charges the time to the pool."""

    def __init__(self, parts: list[NativeKernel]):
        pool, *rest = parts
        convs = [k for k in rest if k.type == "Conv2DFusion"]
        inputs = [pool.inputs[0], *(t for conv in convs for t in conv.inputs[1:])]
        super().__init__(inputs, list(parts[-1].outputs), name="+".join(k.name for k in parts))
        self.parts = tuple(parts)
        self.layers = [(conv, self._activation(conv, rest)) for conv in convs]
        self.terms: list = []

    @property
    def type(self) -> str:
        return "+".join(k.type for k in self.parts)

    @staticmethod
    def _activation(conv: NativeKernel, rest: list[NativeKernel]) -> NativeKernel | None:
        """The Activation that reads the convolution's output, if it is one of the parts."""
        return next((k for k in rest if k.type == "Activation" and k.inputs[0] is conv.outputs[0]), None)

    def resize(self) -> None:
        from lite.kernels.fast import gate

        gate.warm()
        self.terms = [term for conv, activation in self.layers for term in self._layer_terms(conv, activation)]
        channels = self.inputs[0].shape[1]
        self.pooled = np.empty(channels, np.float32)
        self.hidden = np.empty(self.layers[0][0].outputs[0].shape[1], np.float32)

    def _layer_terms(self, conv: NativeKernel, activation: NativeKernel | None) -> tuple:
        """(weight, bias, lo, hi, code, alpha, beta) of one product as ``gate`` takes them (the
        second's weight transposed)."""
        from lite.kernels.fast.gate import GATE_CODES, IDENTITY

        weight = conv.inputs[1].data.reshape(conv.inputs[1].shape[0], -1)
        weight = np.ascontiguousarray(weight.T if conv is self.layers[1][0] else weight, np.float32)
        bias = conv.bias()
        kind = "NO_ACTIVATION" if activation is None else activation.attrs["activation_type"]
        clip = conv.activation if kind in ("NO_ACTIVATION", *GATE_CODES) else kind
        shift, lo, hi = compiled_terms(None if bias is None else bias.data, conv.inputs[1].shape[0], clip,
                                       np.dtype(np.float32))
        if kind not in GATE_CODES:
            return weight, shift, lo, hi, IDENTITY, np.float32(1), np.float32(0)
        return weight, shift, lo, hi, GATE_CODES[kind], np.float32(activation.alpha), np.float32(activation.beta)

    def unfuse(self) -> None:
        """Nothing to give back: the parts keep their own state."""

    def execute(self) -> None:
        from lite.kernels.fast import gate

        x, out = self.inputs[0].data, self.outputs[0].data
        x = fast.taken(x.reshape(*x.shape[:2], -1))
        gate.gate(x, *self.terms, self.pooled, self.hidden, out.reshape(out.shape[:2]))


class TableChain(Kernel):
    """A DequantizeLinear of an 8-bit tensor, the element-wise float32 kernels after it (each alone
    reading the one before) and the QuantizeLinear that ends them, run as one lookup: each of the
    input type's 256 values goes through fresh copies of the parts once, at the first resize, and
    its byte is kept (a profile charges the time to the DequantizeLinear)."""

    def __init__(self, parts: list[NativeKernel]):
        constants = [t for part in parts for t in part.inputs if t is not None and t.is_const]
        super().__init__([parts[0].inputs[0]], list(parts[-1].outputs), name="+".join(k.name for k in parts),
                         constants=constants)
        self.parts = tuple(parts)
        self.lookup = None

    @property
    def type(self) -> str:
        return "+".join(k.type for k in self.parts)

    def resize(self) -> None:
        if self.lookup is None:
            self.lookup = byte_lookup(self._table())

    def _table(self) -> np.ndarray:
        """The output byte of each input byte (``byte_values``' order)."""
        x = self.inputs[0]
        values = byte_values(x.dtype)
        tensor = Tensor(x.name, x.dtype, values.shape, data=values)
        with np.errstate(all="ignore"):
            for part in self.parts:
                tensor = _run_on(part, tensor)
        return tensor.data.reshape(-1).view(np.uint8)

    def unfuse(self) -> None:
        """Nothing to give back: the parts keep their own state."""

    def execute(self) -> None:
        self.lookup(self.inputs[0].data, self.outputs[0].data.view(np.uint8))


def _run_on(part: NativeKernel, tensor: Tensor) -> Tensor:
    """The output of a fresh kernel of ``part``'s class and primitive that reads ``tensor`` where
    ``part`` reads its first input that is not a constant, and ``part``'s other inputs as they are."""
    chained = next(t for t in part.inputs if t is not None and not t.is_const)
    inputs = [tensor if t is chained else t for t in part.inputs]
    out = Tensor(part.outputs[0].name, part.outputs[0].dtype, (), quant_params=part.outputs[0].quant_params)
    kernel = type(part)(inputs, [out], part.primitive, part.name)
    out.shape = tuple(kernel.infer_shapes()[0])
    out.data = np.empty(out.shape, out.dtype)
    kernel.prepare()
    kernel.resize()
    kernel.execute()
    return out


class ScaledIntegerProduct(Kernel):
    """A MatMulInteger or a ConvInteger, the Cast of its int32 sums to float32, the Mul by ``scale``
    (x's scale times the weight's: one value, or one a column of the product or a channel of the
    convolution) and the Add of a ``bias`` (the same) that may follow, each alone reading the one
    before: a dynamically quantized linear layer (onnxruntime's MatMulIntegerToFloat) or
    convolution. On AMX tiles each block of a product's sums is scaled as it is summed
    (``IntegerProductPlan.scaled``); elsewhere the sums go into an array of their own, then one
    compiled pass (``int8_elementwise.scaled_sums``, ``scaled_rows`` for a convolution's rows of
    (image, channel), the Add's fused clip too) writes ``float32(sum) * scale + bias``. Each step is
    rounded as its part's kernel rounds it (a profile charges the time to the integer kernel)."""

    def __init__(self, parts: list[NativeKernel], scale: Tensor, bias: Tensor | None):
        integer = parts[0]
        constants = [t for t in (bias,) if t is not None]
        super().__init__([*integer.inputs, scale, *constants], list(parts[-1].outputs),
                         name="+".join(k.name for k in parts), constants=constants)
        self.parts, self.integer, self.scale, self.bias = tuple(parts), integer, scale, bias
        self.convolution = integer.type == "ConvInteger"
        shape = integer.outputs[0].shape
        self.columns = shape[1] if self.convolution else shape[-1]  # NOTE: the values a scale or bias may hold
        self.count = shape[0] * shape[1] if self.convolution else self.columns  # NOTE: the scale row's length
        self.bias_row = np.zeros(0, np.float32)
        self.scale_row = np.ones(self.count, np.float32)
        low, high = FUSED_CLIPS.get(parts[-1].attrs.get("activation_type", "NO_ACTIVATION"), (-np.inf, np.inf))
        self.bounds = (np.float32(low), np.float32(high))  # NOTE: a convolution's Add may clip (ReLU, ReLU6)

    @property
    def type(self) -> str:
        return "+".join(k.type for k in self.parts)

    def _row(self, values: np.ndarray) -> np.ndarray:
        """One value, or one a column or channel, as a row of ``count`` (a convolution's channels
        once an image)."""
        by_column = np.broadcast_to(np.asarray(values, np.float32).reshape(-1), (self.columns,))
        return np.ascontiguousarray(np.broadcast_to(by_column, (self.count // self.columns, self.columns)).reshape(-1))

    def resize(self) -> None:
        from lite.kernels.fast import int8_elementwise

        self.integer.resize()
        self.integer.outputs[0].data = None  # NOTE: an array of its own once the sums need one (not on tiles)
        if self.bias is not None:
            self.bias_row = self._row(self.bias.data)
        int8_elementwise.warm_scaled_sums()

    def unfuse(self) -> None:
        """Nothing to give back: the parts keep their own state."""

    def packed_constants(self) -> list[Tensor]:
        return self.integer.packed_constants()

    def execute(self) -> None:
        from lite.kernels.fast import int8_elementwise

        scale = np.asarray(self.scale.data, np.float32).reshape(-1)
        out = self.outputs[0].data
        plan = getattr(self.integer, "compiled", None)
        if not self.convolution and plan is not None and fast.takes(out) and plan.scaled(scale, self.bias_row, out):
            return  # NOTE: on tiles, each block scaled as it is summed
        sums = self.integer.outputs[0]
        if sums.data is None:
            sums.data = aligned_array(sums.shape, sums.dtype)
        self.integer.execute()
        if self.convolution:
            self.scale_row.reshape(-1, self.columns)[:] = scale
            int8_elementwise.scaled_rows(sums.data.reshape(self.count, -1), self.scale_row, self.bias_row,
                                         *self.bounds, out.reshape(self.count, -1))
            return
        self.scale_row[:] = scale
        int8_elementwise.scaled_sums(sums.data.reshape(-1, self.columns), self.scale_row, self.bias_row,
                                     out.reshape(-1, self.columns))


class ChannelNorm(Kernel):
    """timm's LayerNorm2d: a Transpose to channels last, a LayerNormFusion over the channels and the
    Transpose back, each alone reading the one before, run as one kernel on the channels-first image
    (``lite.kernels.fast.norm.channel_norm``), without the two transposed copies (onnxruntime's
    transpose optimizer removes them too). A profile charges the time to the LayerNormFusion."""

    def __init__(self, parts: list[NativeKernel]):
        before, norm, after = parts
        super().__init__([before.inputs[0], *norm.inputs[1:]], list(after.outputs),
                         name="+".join(k.name for k in parts))
        self.parts = (norm, before, after)
        self.norm, self.order = norm, tuple(parts)

    @property
    def type(self) -> str:
        return "+".join(k.type for k in self.order)

    def resize(self) -> None:
        from lite.kernels.fast import norm

        norm.warm_channel_norm()
        channels, (scale, bias) = self.inputs[0].shape[1], (*self.inputs[1:], None)[:2]
        self.scale, self.bias = (np.array(np.broadcast_to(0 if t is None else t.data, channels), np.float32)
                                 for t in (scale, bias))
        self.epsilon = np.float32(self.norm.epsilon)

    def unfuse(self) -> None:
        """Nothing to give back: the parts keep their own state."""

    def execute(self) -> None:
        from lite.kernels.fast import norm

        x, out = self.inputs[0].data, self.outputs[0].data
        x = fast.taken(x.reshape(*x.shape[:2], -1))
        norm.channel_norm(x, self.scale, self.bias, self.epsilon, out.reshape(x.shape))
