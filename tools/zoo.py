"""Deterministic test and benchmark models with seeded random weights, as ``onnx.ModelProto``.

Built with numpy and ``onnx.helper`` alone, in about a second at most (ResNet-50), so they need
neither PyTorch nor a cache: ``pip install .`` then ``lite-benchmark zoo:resnet18``. The CNNs
(``resnet18``, ``resnet50``, ``mobilenet_v2``, ``mobilenet_v3_large``, ``efficientnet_b0``,
``squeezenet``, ``inception_block``) and the ``bert_encoder`` come from ``lite.tools.zoo_nets``:
torchvision's layouts with the op patterns of PyTorch's TorchScript exporter (bias-free Conv and
a separate BatchNormalization for the converter to fold, ReLU6 as Clip, HardSwish, SiLU as Sigmoid
and Mul, LayerNormalization and Erf-based GELU), BatchNorm statistics measured on a random
calibration batch so that activations stay normalised through every layer. ``old_style_opset9``
and ``add_chain`` are small hand-written graphs.

Those eight take ``opset`` (default 17, from 11) and ``dynamic_batch`` (the batch dim becomes
``"batch"``; the encoder's sequence dim ``"seq"`` too). The same arguments give the same bytes.

Example:
    >>> from lite.tools import zoo
    >>> model = zoo.resnet18(batch_size=1, dynamic_batch=True)
    >>> [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    ['batch', 3, 224, 224]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.tools import zoo_nets

SEED = 0


def resnet18(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 224,
             num_classes: int = 1000, opset: int = 17) -> onnx.ModelProto:
    """ResNet-18 (basic blocks [2, 2, 2, 2]); input ``input`` (N, 3, H, W), output ``output`` (N, num_classes)."""
    return _image_model("resnet18", locals(), lambda net, x: zoo_nets.resnet(net, x, False, [2, 2, 2, 2], num_classes),
                        [num_classes])


def resnet50(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 224,
             num_classes: int = 1000, opset: int = 17) -> onnx.ModelProto:
    """ResNet-50 (bottleneck blocks [3, 4, 6, 3]); input ``input`` (N, 3, H, W), output ``output`` (N, num_classes)."""
    return _image_model("resnet50", locals(), lambda net, x: zoo_nets.resnet(net, x, True, [3, 4, 6, 3], num_classes),
                        [num_classes])


def mobilenet_v2(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 224,
                 num_classes: int = 1000, opset: int = 17) -> onnx.ModelProto:
    """MobileNetV2 (ReLU6 as Clip(0, 6), depthwise convs); input ``input`` (N, 3, H, W)."""
    return _image_model("mobilenet_v2", locals(), lambda net, x: zoo_nets.mobilenet_v2(net, x, num_classes),
                        [num_classes])


def mobilenet_v3_large(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 224,
                       num_classes: int = 1000, opset: int = 17) -> onnx.ModelProto:
    """MobileNetV3-Large (HardSwish, SE gates with HardSigmoid, 3x3/5x5 depthwise); input ``input`` (N, 3, H, W)."""
    return _image_model("mobilenet_v3_large", locals(),
                        lambda net, x: zoo_nets.mobilenet_v3_large(net, x, num_classes), [num_classes])


def efficientnet_b0(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 224,
                    num_classes: int = 1000, opset: int = 17) -> onnx.ModelProto:
    """EfficientNet-B0 (SiLU as Sigmoid * x, MBConv with SE gates, 3x3/5x5 depthwise); input ``input`` (N, 3, H, W)."""
    return _image_model("efficientnet_b0", locals(), lambda net, x: zoo_nets.efficientnet_b0(net, x, num_classes),
                        [num_classes])


def squeezenet(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 224,
               num_classes: int = 1000, opset: int = 17) -> onnx.ModelProto:
    """SqueezeNet 1.1 (fire modules: Concat of 1x1 and 3x3 expands, ceil-mode max pools)."""
    return _image_model("squeezenet", locals(), lambda net, x: zoo_nets.squeezenet(net, x, num_classes),
                        [num_classes])


def inception_block(batch_size: int = 1, dynamic_batch: bool = False, image_size: int = 28,
                    in_channels: int = 192, opset: int = 17) -> onnx.ModelProto:
    """One Inception-v1 block: 1x1 / 3x3 / 5x5 / pool branches concatenated to 256 channels."""
    return _image_model("inception_block", locals(), lambda net, x: zoo_nets.inception_block(net, x, in_channels),
                        [256, image_size, image_size], channels=in_channels, downsampling=1)


def bert_encoder(batch_size: int = 1, dynamic_batch: bool = False, seq_len: int = 128, layers: int = 4,
                 width: int = 768, heads: int = 12, feed_forward: int = 3072, opset: int = 17,
                 vocab_size: int | None = None) -> onnx.ModelProto:
    """BERT-style encoder: post-norm blocks (self-attention, LayerNorm, GELU feed-forward).

    Input ``x`` (N, seq_len, width) float32, output ``output`` of the same shape; ``dynamic_batch`` makes
    both N and seq_len dynamic ("batch", "seq"). With ``vocab_size``, word embeddings come first
    (``zoo_nets.token_embedding``): the input is then ``input_ids``, (N, seq_len) int64 token ids below
    ``vocab_size``.
    """
    dims = ["batch", "seq"] if dynamic_batch else [batch_size, seq_len]
    net = zoo_nets.Net(opset, SEED)
    if vocab_size:
        x = zoo_nets.token_embedding(net, net.input("input_ids", dims, TensorProto.INT64), vocab_size, width)
    else:
        x = net.input("x", [*dims, width])
    y = zoo_nets.transformer_encoder(net, x, layers, width, heads, feed_forward)
    return net.model("bert_encoder", y, [*dims, width])


def _image_model(name: str, args: dict[str, Any], build: Callable[[zoo_nets.Net, str], str], output_dims: list[int],
                 channels: int = 3, downsampling: int = 32) -> onnx.ModelProto:
    """``build`` on an (N, channels, image_size, image_size) input ``input``; ``args`` are the public builder's
    arguments, ``output_dims`` the output's dims after N, ``downsampling`` the net's (see ``Net.image_input``)."""
    batch = "batch" if args["dynamic_batch"] else args["batch_size"]
    net = zoo_nets.Net(args["opset"], SEED)
    x = net.image_input("input", [batch, channels, args["image_size"], args["image_size"]], downsampling)
    return net.model(name, build(net, x), [batch, *output_dims])


def old_style_opset9(seed: int = SEED) -> onnx.ModelProto:
    """An IR-3, opset-9 CNN as old converters wrote them.

    Weights come from Constant and ConstantOfShape nodes as well as initializers, and every
    initializer is also listed as a graph input. Input ``data`` (1, 3, 32, 32) -> Conv, Relu,
    LRN, three branches (1x1 conv, 3x3 conv, Mul by a ConstantOfShape scale) joined by Sum,
    Relu, MaxPool, Reshape, Gemm, Dropout, Softmax -> ``prob`` (1, 10).
    """
    rng = np.random.default_rng(seed)
    weights = {
        "conv1_w": rng.normal(0, 0.2, (8, 3, 3, 3)), "conv2_w": rng.normal(0, 0.3, (8, 8, 1, 1)),
        "fc_w": rng.normal(0, 0.05, (10, 8 * 16 * 16)), "fc_b": rng.normal(0, 0.1, 10),
    }
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    nodes = _opset9_constants(rng) + [
        helper.make_node("Conv", ["data", "conv1_w", "conv1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("LRN", ["r1"], ["n1"], name="lrn1", size=3, alpha=1e-3, beta=0.75, bias=1.0),
        helper.make_node("Conv", ["n1", "conv2_w"], ["a"], name="branch_1x1"),
        helper.make_node("Conv", ["n1", "conv3_w", "conv3_b"], ["b"], name="branch_3x3", pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["n1", "scale"], ["c"], name="branch_scale"),
        helper.make_node("Sum", ["a", "b", "c"], ["s"], name="sum"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "flat_shape"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"], name="fc", transB=1),
        helper.make_node("Dropout", ["g"], ["d"], name="dropout", ratio=0.5),
        helper.make_node("Softmax", ["d"], ["prob"], name="softmax"),
    ]
    inputs = [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 32, 32])]
    inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits]
    graph = helper.make_graph(nodes, "old_style_opset9", inputs,
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], producer_name="delite-zoo")
    model.ir_version = 3
    return model


def _opset9_constants(rng: np.random.Generator) -> list[onnx.NodeProto]:
    def const(name: str, value: np.ndarray) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], name=f"{name}_const",
                                value=numpy_helper.from_array(np.asarray(value), name))

    return [
        const("conv1_b", rng.normal(0, 0.1, 8).astype(np.float32)),
        const("conv3_w", rng.normal(0, 0.1, (8, 8, 3, 3)).astype(np.float32)),
        const("conv3_b_shape", np.array([8], np.int64)),
        helper.make_node("ConstantOfShape", ["conv3_b_shape"], ["conv3_b"], name="conv3_b_fill",
                         value=numpy_helper.from_array(np.array([0.05], np.float32))),
        const("scale_shape", np.array([1, 8, 1, 1], np.int64)),
        helper.make_node("ConstantOfShape", ["scale_shape"], ["scale"], name="scale_fill",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        const("flat_shape", np.array([1, -1], np.int64)),
    ]


def add_chain(n: int = 500, seed: int = SEED) -> onnx.ModelProto:
    """``n`` tiny Adds in a chain: x (1, 16) + c_0 + c_1 + ... -> ``y`` (a per-node overhead benchmark)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, 1, (1, 16)).astype(np.float32), f"c{k}") for k in range(n)]
    names = ["x"] + [f"t{k}" for k in range(n - 1)] + ["y"]
    nodes = [helper.make_node("Add", [names[k], f"c{k}"], [names[k + 1]], name=f"add{k}") for k in range(n)]
    graph = helper.make_graph(nodes, "add_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="delite-zoo")
    model.ir_version = 8
    return model


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_large": mobilenet_v3_large, "efficientnet_b0": efficientnet_b0, "squeezenet": squeezenet,
    "inception_block": inception_block, "bert_encoder": bert_encoder, "old_style_opset9": old_style_opset9,
    "add_chain": add_chain,
}
