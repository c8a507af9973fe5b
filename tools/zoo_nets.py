"""The zoo's networks, built with ``onnx.helper`` and numpy alone (no torch): a small graph builder
(``Net``) and one function per architecture, with torchvision's layouts and node names after
torchvision's module paths (``layer1.0.conv1``, ``features.3.block.1.0``, ``classifier.1``).

The graphs keep the op patterns of PyTorch's TorchScript exporter: bias-free Conv followed by its
own BatchNormalization (for the converter to fold), ReLU6 as Clip with min/max inputs, HardSwish
and HardSigmoid, SiLU as Sigmoid and Mul, Flatten and Gemm classifiers, and in the encoder Linear
as Transpose(weight), MatMul and Add, GELU from Erf, heads split and merged by Reshape and Transpose.

Weights are seeded numpy random numbers: He-normal convolution and linear weights, small biases.
Every CNN op is also evaluated in numpy, as it is added, on a calibration batch of random images
at the model's input size (two at 224 px, more for small images), and a BatchNormalization takes
its running mean and variance from the batch statistics of its input, with random scale and
offset: every layer's output stays normalised as in a trained network, so a deep net's output
keeps depending on its input.

Example:
    >>> net = Net(opset=17, seed=0)
    >>> x = net.image_input("input", ["batch", 3, 32, 32])
    >>> y = net.flatten(net.global_average_pool(net.conv_bn(x, "stem", 3, 8, 3, 2), "avgpool"), "flatten")
    >>> model = net.model("tiny", y, ["batch", 8])
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

MIN_OPSET = 11  # Clip takes min/max as inputs, MaxPool has ceil_mode
CALIBRATION_SAMPLES = 64  # the fewest values per channel a BatchNorm's statistics are measured on

Dims = Sequence[int | str]


class Net:
    """An ONNX graph under construction, with seeded random weights.

    Each layer method appends its nodes and initializers and returns its output tensor's name,
    which is also its (last) node's name; ``name`` follows torchvision's module paths. Where the
    input has a calibration value (see ``image_input``), the method also computes its output's.
    """

    def __init__(self, opset: int, seed: int) -> None:
        if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
            raise ValueError(f"the zoo builds ONNX opsets {MIN_OPSET} to {onnx.defs.onnx_opset_version()}, "
                             f"not {opset}")
        self.opset, self.rng = opset, np.random.default_rng([seed, 0])
        self.sample_rng = np.random.default_rng([seed, 1])
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.values: dict[str, np.ndarray] = {}
        self._node_names: set[str] = set()
        self._tensor_names: set[str] = set()

    # -- plumbing -------------------------------------------------------------------------------

    def input(self, name: str, dims: Dims, dtype: int = TensorProto.FLOAT) -> str:
        """A graph input of ``dtype`` (an onnx TensorProto type, float32 unless given); a str dim is dynamic
        (its dim_param)."""
        self._claim(self._tensor_names, name)
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(dims)))
        return name

    def image_input(self, name: str, dims: Dims, downsampling: int = 32) -> str:
        """An (N, C, H, W) input whose calibration value is random images of size (H, W): at least two, and
        enough that the net's coarsest feature map (``downsampling`` times smaller) has ``CALIBRATION_SAMPLES``
        pixels in all.

        # NOTE: calibrating on smaller images is faster but wrong: zero padding then covers much of
        # the last stages' few pixels, and the statistics measured there let MobileNetV3 and
        # EfficientNet-B0 grow to 1e3-1e5 at full size. Too few pixels (two 1x1 maps) make a
        # variance near 0 that amplifies rounding errors until a 1e-4 accuracy check fails.
        """
        self.input(name, dims)
        channels, height, width = (int(d) for d in dims[1:])
        coarsest = math.ceil(height / downsampling) * math.ceil(width / downsampling)
        images = max(2, math.ceil(CALIBRATION_SAMPLES / coarsest))
        self.values[name] = self.sample_rng.standard_normal((images, channels, height, width), dtype=np.float32)
        return name

    def param(self, name: str, value: np.ndarray) -> str:
        """A float32 initializer."""
        self._claim(self._tensor_names, name)
        self.values[name] = value.astype(np.float32)
        self.initializers.append(numpy_helper.from_array(self.values[name], name))
        return name

    def constant(self, name: str, value: float | Sequence[int]) -> str:
        """A Constant node: a float32 scalar, or an int64 vector (shapes, axes, split sizes)."""
        array = np.array(value, np.float32 if isinstance(value, float) else np.int64)
        return self.node("Constant", [], name, lambda: array, value=numpy_helper.from_array(array, name))

    def node(self, op: str, inputs: Sequence[str], name: str, compute: Callable[..., np.ndarray] | None = None,
             **attrs: object) -> str:
        """One ``op`` node whose single output is named ``name`` too; ``compute`` (the op in numpy,
        one argument per input) gives the output's calibration value when every input has one."""
        (output,) = self.multi_node(op, inputs, name, [name], **attrs)
        values = [self.values.get(i) for i in inputs]
        if compute is not None and all(v is not None for v in values):
            self.values[output] = compute(*values)
        return output

    def multi_node(self, op: str, inputs: Sequence[str], name: str, outputs: Sequence[str],
                   **attrs: object) -> list[str]:
        """One ``op`` node named ``name`` with the given outputs, without calibration values."""
        self._claim(self._node_names, name)
        for output in outputs:
            self._claim(self._tensor_names, output)
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), name=name, **attrs))
        return list(outputs)

    def model(self, graph_name: str, output: str, dims: Dims) -> onnx.ModelProto:
        """The finished model: tensor ``output`` becomes the graph output ``output`` of shape ``dims``."""
        for node in self.nodes:
            node.output[:] = ["output" if o == output else o for o in node.output]
        graph = helper.make_graph(self.nodes, graph_name, self.inputs,
                                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(dims))],
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="delite-zoo")
        model.ir_version = helper.find_min_ir_version_for(model.opset_import)
        return model

    @staticmethod
    def _claim(names: set[str], name: str) -> None:
        if name in names:
            raise ValueError(f"the name {name!r} is taken twice in this graph: give each layer its own")
        names.add(name)

    def _he_normal(self, shape: Sequence[int], fan_in: int) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32) * np.float32(math.sqrt(2.0 / fan_in))

    def _small_bias(self, size: int) -> np.ndarray:
        return self.rng.normal(0.0, 0.01, size)

    # -- convolutional layers -------------------------------------------------------------------

    def conv(self, x: str, name: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             padding: int | None = None, bias: bool = False) -> str:
        """Conv2d with He-normal weights, 'same' padding unless ``padding`` says otherwise."""
        pad = (kernel - 1) // 2 if padding is None else padding
        inputs = [x, self.param(f"{name}.weight", self._he_normal((cout, cin // groups, kernel, kernel),
                                                                  cin // groups * kernel * kernel))]
        if bias:
            inputs.append(self.param(f"{name}.bias", self._small_bias(cout)))
        return self.node("Conv", inputs, name, lambda v, w, b=None: _conv2d(v, w, b, stride, pad, groups),
                         dilations=[1, 1], group=groups, kernel_shape=[kernel, kernel], pads=[pad] * 4,
                         strides=[stride, stride])

    def batch_norm(self, x: str, name: str, eps: float = 1e-5) -> str:
        """BatchNormalization whose running statistics are those of ``x``'s calibration value, with a
        random scale in [0.5, 1.5) and offset around 0."""
        value = self.values.get(x)
        if value is None:
            raise ValueError(f"BatchNormalization {name!r} needs a calibration value of {x!r}: "
                             "start the graph with Net.image_input")
        channels = value.shape[1]
        inputs = [x, self.param(f"{name}.weight", self.rng.uniform(0.5, 1.5, channels)),
                  self.param(f"{name}.bias", self.rng.normal(0.0, 0.1, channels)),
                  self.param(f"{name}.running_mean", value.mean((0, 2, 3), dtype=np.float64)),
                  self.param(f"{name}.running_var", value.var((0, 2, 3), dtype=np.float64))]
        return self.node("BatchNormalization", inputs, name, lambda v, *p: _batch_norm(v, *p, eps), epsilon=eps)

    def conv_bn(self, x: str, name: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                act: str | None = "relu", eps: float = 1e-5, parts: Sequence[str] = ("0", "1", "2")) -> str:
        """torchvision's Conv2dNormActivation: bias-free Conv, BatchNorm, then the activation method
        named ``act`` (none for None); the nodes are named ``{name}.{part}``."""
        y = self.conv(x, f"{name}.{parts[0]}", cin, cout, kernel, stride, groups)
        y = self.batch_norm(y, f"{name}.{parts[1]}", eps)
        return getattr(self, act)(y, f"{name}.{parts[2]}") if act else y

    def max_pool(self, x: str, name: str, kernel: int, stride: int, padding: int = 0, ceil_mode: bool = False) -> str:
        """MaxPool2d; ``ceil_mode`` keeps a last partial window, as PyTorch does."""
        return self.node("MaxPool", [x], name, lambda v: _max_pool(v, kernel, stride, padding, ceil_mode),
                         ceil_mode=int(ceil_mode), dilations=[1, 1], kernel_shape=[kernel, kernel],
                         pads=[padding] * 4, strides=[stride, stride])

    def global_average_pool(self, x: str, name: str) -> str:
        """GlobalAveragePool: (N, C, H, W) -> (N, C, 1, 1)."""
        return self.node("GlobalAveragePool", [x], name, lambda v: v.mean((2, 3), keepdims=True))

    def flatten(self, x: str, name: str) -> str:
        """Flatten from axis 1."""
        return self.node("Flatten", [x], name, lambda v: v.reshape(len(v), -1), axis=1)

    def gemm(self, x: str, name: str, cin: int, cout: int) -> str:
        """nn.Linear on (N, cin) as the exporter writes it: Gemm with the (cout, cin) weight and transB."""
        inputs = [x, self.param(f"{name}.weight", self._he_normal((cout, cin), cin)),
                  self.param(f"{name}.bias", self._small_bias(cout))]
        return self.node("Gemm", inputs, name, lambda v, w, b: v @ w.T + b, alpha=1.0, beta=1.0, transB=1)

    def concat(self, xs: Sequence[str], name: str, axis: int = 1) -> str:
        """Concat along ``axis`` (channels by default)."""
        return self.node("Concat", xs, name, lambda *vs: np.concatenate(vs, axis), axis=axis)

    # -- element-wise ---------------------------------------------------------------------------

    def add(self, a: str, b: str, name: str) -> str:
        """Add (broadcasting)."""
        return self.node("Add", [a, b], name, np.add)

    def mul(self, a: str, b: str, name: str) -> str:
        """Mul (broadcasting)."""
        return self.node("Mul", [a, b], name, np.multiply)

    def relu(self, x: str, name: str) -> str:
        """Relu."""
        return self.node("Relu", [x], name, lambda v: np.maximum(v, 0))

    def relu6(self, x: str, name: str) -> str:
        """ReLU6 as the exporter writes it: Clip with Constant min 0 and max 6."""
        bounds = [self.constant(f"{name}.min", 0.0), self.constant(f"{name}.max", 6.0)]
        return self.node("Clip", [x, *bounds], name, np.clip)

    def sigmoid(self, x: str, name: str) -> str:
        """Sigmoid."""
        return self.node("Sigmoid", [x], name, _sigmoid)

    def silu(self, x: str, name: str) -> str:
        """SiLU as the exporter writes it: x * Sigmoid(x)."""
        return self.mul(x, self.sigmoid(x, f"{name}.sigmoid"), name)

    def hardsigmoid(self, x: str, name: str) -> str:
        """HardSigmoid with PyTorch's slope 1/6: clip(x / 6 + 0.5, 0, 1)."""
        return self.node("HardSigmoid", [x], name, _hardsigmoid, alpha=1 / 6)

    def hardswish(self, x: str, name: str) -> str:
        """HardSwish; before opset 14 (no HardSwish op), x * HardSigmoid(x)."""
        if self.opset < 14:
            return self.mul(x, self.hardsigmoid(x, f"{name}.hardsigmoid"), name)
        return self.node("HardSwish", [x], name, lambda v: v * _hardsigmoid(v))

    # -- transformer layers (no numpy values: nothing in the encoder is calibrated) -------------

    def linear(self, x: str, name: str, cin: int, cout: int) -> str:
        """nn.Linear on (..., cin) as the exporter writes it: Transpose of the (cout, cin) weight, MatMul,
        then Add of the bias."""
        weight = self.param(f"{name}.weight", self._he_normal((cout, cin), cin))
        y = self.matmul(x, self.transpose(weight, [1, 0], f"{name}.weight_t"), f"{name}.matmul")
        return self.add(self.param(f"{name}.bias", self._small_bias(cout)), y, name)

    def matmul(self, a: str, b: str, name: str) -> str:
        """MatMul."""
        return self.node("MatMul", [a, b], name)

    def div(self, x: str, divisor: float, name: str) -> str:
        """Div by a Constant scalar."""
        return self.node("Div", [x, self.constant(f"{name}.divisor", divisor)], name)

    def softmax(self, x: str, name: str) -> str:
        """Softmax over the last axis."""
        return self.node("Softmax", [x], name, axis=-1)

    def gelu(self, x: str, name: str) -> str:
        """Exact GELU as the exporter writes it: x * (Erf(x / sqrt(2)) + 1) * 0.5."""
        erf = self.node("Erf", [self.div(x, math.sqrt(2.0), f"{name}.div")], f"{name}.erf")
        y = self.mul(x, self.add(erf, self.constant(f"{name}.one", 1.0), f"{name}.add"), f"{name}.mul")
        return self.mul(y, self.constant(f"{name}.half", 0.5), name)

    def layer_norm(self, x: str, name: str, width: int, eps: float = 1e-5) -> str:
        """LayerNorm over the last axis with a random scale and offset; before opset 17 (no
        LayerNormalization op) decomposed as the exporter does."""
        scale = self.param(f"{name}.weight", self.rng.uniform(0.5, 1.5, width))
        bias = self.param(f"{name}.bias", self.rng.normal(0.0, 0.1, width))
        if self.opset < 17:
            return self._decomposed_layer_norm(x, name, scale, bias, eps)
        return self.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=eps)

    def _decomposed_layer_norm(self, x: str, name: str, scale: str, bias: str, eps: float) -> str:
        centred = self.node("Sub", [x, self.node("ReduceMean", [x], f"{name}.mean", axes=[-1])], f"{name}.sub")
        square = self.node("Pow", [centred, self.constant(f"{name}.two", 2.0)], f"{name}.pow")
        variance = self.node("ReduceMean", [square], f"{name}.variance", axes=[-1])
        std = self.node("Sqrt", [self.add(variance, self.constant(f"{name}.eps", eps), f"{name}.add_eps")],
                        f"{name}.sqrt")
        return self.add(self.mul(self.node("Div", [centred, std], f"{name}.div"), scale, f"{name}.scale"), bias, name)

    def reshape(self, x: str, shape: Sequence[int], name: str) -> str:
        """Reshape to a Constant ``shape`` (0 keeps the input's dim, so dynamic dims stay dynamic)."""
        return self.node("Reshape", [x, self.constant(f"{name}.shape", shape)], name)

    def transpose(self, x: str, perm: Sequence[int], name: str) -> str:
        """Transpose by ``perm``."""
        return self.node("Transpose", [x], name, perm=list(perm))

    def split(self, x: str, parts: int, name: str) -> list[str]:
        """Split axis 0 into ``parts`` pieces of size 1, named ``{name}.{k}``."""
        outputs = [f"{name}.{k}" for k in range(parts)]
        if self.opset < 13:
            return self.multi_node("Split", [x], name, outputs, axis=0, split=[1] * parts)
        return self.multi_node("Split", [x, self.constant(f"{name}.sizes", [1] * parts)], name, outputs, axis=0)

    def squeeze(self, x: str, axis: int, name: str) -> str:
        """Squeeze one axis."""
        if self.opset < 13:
            return self.node("Squeeze", [x], name, axes=[axis])
        return self.node("Squeeze", [x, self.constant(f"{name}.axes", [axis])], name)


def _conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, pad: int, groups: int) -> np.ndarray:
    """Conv2d in numpy: windows of the padded input against the weights (groups == 1 or depthwise-like)."""
    cout, cin_group, kernel, _ = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = sliding_window_view(padded, (kernel, kernel), axis=(2, 3))[:, :, ::stride, ::stride]
    if groups == 1:
        y = np.tensordot(windows, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)
    else:
        n, _, height, width = windows.shape[:4]
        grouped = windows.reshape(n, groups, cin_group, height, width, kernel, kernel)
        y = np.einsum("ngcyxij,gocij->ngoyx", grouped, w.reshape(groups, cout // groups, cin_group, kernel, kernel))
        y = y.reshape(n, cout, height, width)
    return np.ascontiguousarray(y if b is None else y + b[:, None, None])


def _batch_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
                eps: float) -> np.ndarray:
    def per_channel(v: np.ndarray) -> np.ndarray:
        return v[:, None, None]

    return per_channel(scale) * (x - per_channel(mean)) / np.sqrt(per_channel(var) + eps) + per_channel(bias)


def _max_pool(x: np.ndarray, kernel: int, stride: int, pad: int, ceil_mode: bool) -> np.ndarray:
    """MaxPool2d in numpy, padded with -inf; a ceil-mode window must start inside the input or the left pad."""
    sizes = [_pooled_size(n, kernel, stride, pad, ceil_mode) for n in x.shape[2:]]
    extra = [max(0, (out - 1) * stride + kernel - n - 2 * pad) for out, n in zip(sizes, x.shape[2:], strict=True)]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad + extra[0]), (pad, pad + extra[1])), constant_values=-np.inf)
    windows = sliding_window_view(padded, (kernel, kernel), axis=(2, 3))[:, :, ::stride, ::stride]
    return windows[:, :, :sizes[0], :sizes[1]].max(axis=(4, 5))


def _pooled_size(n: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    span = n + 2 * pad - kernel
    size = (-(-span // stride) if ceil_mode else span // stride) + 1
    return size - 1 if ceil_mode and (size - 1) * stride >= n + pad else size


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(x / 6 + 0.5, 0, 1)


# -- ResNet -----------------------------------------------------------------------------------------


def resnet(net: Net, x: str, bottleneck: bool, layers: Sequence[int], num_classes: int) -> str:
    """torchvision's ResNet: a 7x7 stem and max pool, four stages of basic (two 3x3 convs) or
    bottleneck (1x1, 3x3, 1x1 with 4x the channels) blocks, global average pool, ``fc``."""
    y = net.relu(net.batch_norm(net.conv(x, "conv1", 3, 64, 7, 2), "bn1"), "relu")
    y = net.max_pool(y, "maxpool", 3, 2, 1)
    cin, expansion = 64, 4 if bottleneck else 1
    for k, (planes, depth) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
        for j in range(depth):
            block = _bottleneck if bottleneck else _basic_block
            y = block(net, y, f"layer{k + 1}.{j}", cin, planes, 2 if j == 0 and k > 0 else 1)
            cin = planes * expansion
    return net.gemm(net.flatten(net.global_average_pool(y, "avgpool"), "flatten"), "fc", cin, num_classes)


def _basic_block(net: Net, x: str, name: str, cin: int, planes: int, stride: int) -> str:
    y = net.conv_bn(x, name, cin, planes, 3, stride, parts=("conv1", "bn1", "relu1"))
    y = net.conv_bn(y, name, planes, planes, 3, act=None, parts=("conv2", "bn2"))
    return _residual(net, x, y, name, cin, planes, stride)


def _bottleneck(net: Net, x: str, name: str, cin: int, planes: int, stride: int) -> str:
    y = net.conv_bn(x, name, cin, planes, 1, parts=("conv1", "bn1", "relu1"))
    y = net.conv_bn(y, name, planes, planes, 3, stride, parts=("conv2", "bn2", "relu2"))
    y = net.conv_bn(y, name, planes, 4 * planes, 1, act=None, parts=("conv3", "bn3"))
    return _residual(net, x, y, name, cin, 4 * planes, stride)


def _residual(net: Net, x: str, y: str, name: str, cin: int, cout: int, stride: int) -> str:
    """relu(y + shortcut): x itself, or a strided 1x1 conv and BatchNorm (``downsample``) where the shape changes."""
    if stride != 1 or cin != cout:
        x = net.conv_bn(x, f"{name}.downsample", cin, cout, 1, stride, act=None)
    return net.relu(net.add(y, x, f"{name}.add"), f"{name}.relu")


# -- MobileNetV2, MobileNetV3-Large, EfficientNet-B0 ----------------------------------------------------

# MobileNetV2: (expansion, output channels, repeats, first stride)
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))
# MobileNetV3-Large: (kernel, expanded channels, output channels, squeeze-and-excitation, hardswish (else ReLU),
# stride)
MOBILENET_V3_LARGE = ((3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
                      (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
                      (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
                      (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
                      (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1))
# EfficientNet-B0: (expansion, kernel, first stride, output channels, repeats)
EFFICIENTNET_B0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                   (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def mobilenet_v2(net: Net, x: str, num_classes: int) -> str:
    """torchvision's MobileNetV2: ReLU6 inverted residuals, a 1280-channel head, ``classifier.1``."""
    y, cin = net.conv_bn(x, "features.0", 3, 32, 3, 2, act="relu6"), 32
    index = 1
    for expand, cout, repeats, stride in MOBILENET_V2:
        for j in range(repeats):
            y = inverted_residual(net, y, f"features.{index}", cin, cin * expand, cout, stride if j == 0 else 1,
                                  act="relu6")
            cin, index = cout, index + 1
    y = net.conv_bn(y, f"features.{index}", cin, 1280, 1, act="relu6")
    return _pooled_classifier(net, y, 1280, num_classes)


def mobilenet_v3_large(net: Net, x: str, num_classes: int) -> str:
    """torchvision's MobileNetV3-Large: BatchNorm eps 1e-3, SE gates squeezing to hidden / 4 (rounded to
    8) with ReLU and HardSigmoid, a Linear-HardSwish-Linear classifier."""
    y, cin = net.conv_bn(x, "features.0", 3, 16, 3, 2, act="hardswish", eps=1e-3), 16
    for index, (kernel, hidden, cout, use_se, hardswish, stride) in enumerate(MOBILENET_V3_LARGE, 1):
        se = (_divisible_by_8(hidden / 4), "relu", "hardsigmoid") if use_se else None
        y = inverted_residual(net, y, f"features.{index}", cin, hidden, cout, stride, kernel,
                              "hardswish" if hardswish else "relu", se, eps=1e-3)
        cin = cout
    y = net.conv_bn(y, f"features.{len(MOBILENET_V3_LARGE) + 1}", cin, 6 * cin, 1, act="hardswish", eps=1e-3)
    y = net.flatten(net.global_average_pool(y, "avgpool"), "flatten")
    y = net.hardswish(net.gemm(y, "classifier.0", 6 * cin, 1280), "classifier.1")
    return net.gemm(y, "classifier.3", 1280, num_classes)


def efficientnet_b0(net: Net, x: str, num_classes: int) -> str:
    """torchvision's EfficientNet-B0: SiLU, MBConv blocks with SE gates squeezing to the block input / 4,
    a 1280-channel head, ``classifier.1`` (stochastic depth is the identity at inference)."""
    y, cin = net.conv_bn(x, "features.0", 3, 32, 3, 2, act="silu"), 32
    for stage, (expand, kernel, stride, cout, repeats) in enumerate(EFFICIENTNET_B0, 1):
        for j in range(repeats):
            se = (max(1, cin // 4), "silu", "sigmoid")
            y = inverted_residual(net, y, f"features.{stage}.{j}", cin, cin * expand, cout, stride if j == 0 else 1,
                                  kernel, "silu", se)
            cin = cout
    y = net.conv_bn(y, f"features.{len(EFFICIENTNET_B0) + 1}", cin, 1280, 1, act="silu")
    return _pooled_classifier(net, y, 1280, num_classes)


def inverted_residual(net: Net, x: str, name: str, cin: int, hidden: int, cout: int, stride: int, kernel: int = 3,
                      act: str = "relu6", se: tuple[int, str, str] | None = None, eps: float = 1e-5) -> str:
    """MobileNetV2's and V3's block, EfficientNet's MBConv: 1x1 expand (none when ``hidden == cin``),
    depthwise conv, optional squeeze-and-excitation ``se`` = (squeeze channels, activation, gate),
    1x1 project, and a residual add where the shape is kept. Layers are ``{name}.block.{k}``."""
    layers = (f"{name}.block.{k}" for k in itertools.count())
    y = x if hidden == cin else net.conv_bn(x, next(layers), cin, hidden, 1, act=act, eps=eps)
    y = net.conv_bn(y, next(layers), hidden, hidden, kernel, stride, groups=hidden, act=act, eps=eps)
    if se:
        y = squeeze_excitation(net, y, next(layers), hidden, *se)
    y = net.conv_bn(y, next(layers), hidden, cout, 1, act=None, eps=eps)
    return net.add(x, y, f"{name}.add") if stride == 1 and cin == cout else y


def squeeze_excitation(net: Net, x: str, name: str, channels: int, squeeze: int, act: str, gate: str) -> str:
    """Channel gates: global average pool, 1x1 conv, ``act``, 1x1 conv, ``gate``, times the input."""
    y = net.conv(net.global_average_pool(x, f"{name}.avgpool"), f"{name}.fc1", channels, squeeze, 1, bias=True)
    y = net.conv(getattr(net, act)(y, f"{name}.activation"), f"{name}.fc2", squeeze, channels, 1, bias=True)
    return net.mul(x, getattr(net, gate)(y, f"{name}.scale_activation"), f"{name}.mul")


def _pooled_classifier(net: Net, x: str, channels: int, num_classes: int) -> str:
    """Global average pool, Flatten, ``classifier.1`` (``classifier.0`` is a Dropout, gone at inference)."""
    return net.gemm(net.flatten(net.global_average_pool(x, "avgpool"), "flatten"), "classifier.1", channels,
                    num_classes)


def _divisible_by_8(v: float) -> int:
    """torchvision's ``_make_divisible(v, 8)``: v rounded to a multiple of 8, at least 8 and 0.9 v."""
    rounded = max(8, int(v + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * v else rounded


# -- SqueezeNet, Inception ------------------------------------------------------------------------------

# SqueezeNet 1.1 after its stem: a fire module's (input, squeeze, expand 1x1, expand 3x3) channels, or None for a
# ceil-mode max pool
SQUEEZENET_FIRES = ((64, 16, 64, 64), (128, 16, 64, 64), None, (128, 32, 128, 128), (256, 32, 128, 128), None,
                    (256, 48, 192, 192), (384, 48, 192, 192), (384, 64, 256, 256), (512, 64, 256, 256))


def squeezenet(net: Net, x: str, num_classes: int) -> str:
    """torchvision's SqueezeNet 1.1: fire modules between ceil-mode max pools (``None`` in
    ``SQUEEZENET_FIRES``), He-normal convs with biases and no BatchNorm, a conv classifier."""
    y = net.relu(net.conv(x, "features.0", 3, 64, 3, 2, padding=0, bias=True), "features.1")
    y = net.max_pool(y, "features.2", 3, 2, ceil_mode=True)
    for index, fire in enumerate(SQUEEZENET_FIRES, 3):
        y = _fire(net, y, f"features.{index}", *fire) if fire else net.max_pool(y, f"features.{index}", 3, 2,
                                                                                  ceil_mode=True)
    y = net.relu(net.conv(y, "classifier.1", 512, num_classes, 1, bias=True), "classifier.2")
    return net.flatten(net.global_average_pool(y, "classifier.3"), "flatten")


def _fire(net: Net, x: str, name: str, cin: int, squeeze: int, expand1: int, expand3: int) -> str:
    y = net.relu(net.conv(x, f"{name}.squeeze", cin, squeeze, 1, bias=True), f"{name}.squeeze_activation")
    left = net.relu(net.conv(y, f"{name}.expand1x1", squeeze, expand1, 1, bias=True), f"{name}.expand1x1_activation")
    right = net.relu(net.conv(y, f"{name}.expand3x3", squeeze, expand3, 3, bias=True),
                     f"{name}.expand3x3_activation")
    return net.concat([left, right], f"{name}.concat")


def inception_block(net: Net, x: str, cin: int) -> str:
    """GoogLeNet's inception (3a): 1x1 | 1x1 -> 3x3 | 1x1 -> 5x5 | 3x3 max pool -> 1x1, concatenated to 256
    channels; each conv is torchvision's BasicConv2d (conv, bn, relu)."""
    parts = ("conv", "bn", "relu")
    branches = [net.conv_bn(x, "branch1", cin, 64, 1, parts=parts),
                net.conv_bn(net.conv_bn(x, "branch2.0", cin, 96, 1, parts=parts), "branch2.1", 96, 128, 3,
                            parts=parts),
                net.conv_bn(net.conv_bn(x, "branch3.0", cin, 16, 1, parts=parts), "branch3.1", 16, 32, 5,
                            parts=parts),
                net.conv_bn(net.max_pool(x, "branch4.0", 3, 1, 1, ceil_mode=True), "branch4.1", cin, 32, 1,
                            parts=parts)]
    return net.concat(branches, "concat")


# -- BERT-style encoder ----------------------------------------------------------------------------------


def token_embedding(net: Net, ids: str, vocab_size: int, width: int) -> str:
    """BERT's word embeddings: int64 token ids (batch, seq) pick rows of a seeded (vocab_size, width) table
    (Gather), then LayerNorm: (batch, seq, width) out."""
    table = net.param("embeddings.word_embeddings", net.rng.normal(0.0, 1.0, (vocab_size, width)))
    return net.layer_norm(net.node("Gather", [table, ids], "embeddings.gather"), "embeddings.norm", width)


def transformer_encoder(net: Net, x: str, layers: int, width: int, heads: int, feed_forward: int) -> str:
    """A BERT-style encoder without embeddings: ``layers`` post-norm blocks, (batch, seq, width) in and out."""
    for k in range(layers):
        x = encoder_block(net, x, f"layer.{k}", width, heads, feed_forward)
    return x


def encoder_block(net: Net, x: str, name: str, width: int, heads: int, feed_forward: int) -> str:
    """Post-norm transformer block: LayerNorm(x + attention), then LayerNorm(x + GELU feed-forward)."""
    x = net.layer_norm(net.add(x, self_attention(net, x, f"{name}.attention", width, heads), f"{name}.add1"),
                       f"{name}.norm1", width)
    y = net.gelu(net.linear(x, f"{name}.intermediate", width, feed_forward), f"{name}.gelu")
    y = net.linear(y, f"{name}.output", feed_forward, width)
    return net.layer_norm(net.add(x, y, f"{name}.add2"), f"{name}.norm2", width)


def self_attention(net: Net, x: str, name: str, width: int, heads: int) -> str:
    """Multi-head self-attention over (batch, seq, width): one QKV projection, scaled dot product, out projection."""
    head = width // heads
    qkv = net.reshape(net.linear(x, f"{name}.qkv", width, 3 * width), [0, 0, 3, heads, head], f"{name}.split_heads")
    pieces = net.split(net.transpose(qkv, [2, 0, 3, 1, 4], f"{name}.heads_first"), 3, f"{name}.split")
    q, k, v = (net.squeeze(piece, 0, f"{name}.{role}") for piece, role in zip(pieces, "qkv", strict=True))
    scores = net.div(net.matmul(q, net.transpose(k, [0, 1, 3, 2], f"{name}.k_t"), f"{name}.scores"),
                     math.sqrt(head), f"{name}.scale")
    context = net.matmul(net.softmax(scores, f"{name}.softmax"), v, f"{name}.context")
    merged = net.reshape(net.transpose(context, [0, 2, 1, 3], f"{name}.heads_last"), [0, 0, width],
                         f"{name}.merge_heads")
    return net.linear(merged, f"{name}.out", width, width)
