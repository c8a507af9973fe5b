"""BatchNorm (inference form) and LRN over channel axis 1; LayerNorm over the trailing axes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tvm import relax

from lite.delegates.tvm.ops.common import Node, emitter
from lite.kernel import Kernel
from lite.ops.norm import batchnorm_affine, lrn_window, norm_axis


def check_channels(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if len(kernel.inputs[0].shape) < 2:
        return f"{kernel.type} of a {len(kernel.inputs[0].shape)}-D input: needs (N, C, ...)"
    return None


@emitter("BatchNorm", check=check_channels)
def batch_norm(node: Node) -> relax.Expr:
    """x * multiplier + offset per channel; constant statistics fold in float64 as the native kernel does."""
    rank, eps = len(node.shape(0)), float(node.attrs["epsilon"])
    channel = (1, -1) + (1,) * (rank - 2)
    if all(t.is_const for t in node.kernel.inputs[1:]):
        multiplier, offset = batchnorm_affine(*(node.value(i) for i in range(1, 5)), eps)
        mul, off = node.g.const(multiplier.reshape(channel)), node.g.const(offset.reshape(channel))
    else:
        scale, bias, mean, var = (relax.op.reshape(node.x(i), channel) for i in range(1, 5))
        mul = relax.op.divide(scale, relax.op.sqrt(relax.op.add(var, node.g.const(eps))))
        off = relax.op.subtract(bias, relax.op.multiply(mean, mul))
    return relax.op.add(relax.op.multiply(node.x(0), mul), off)


@emitter("LRN", check=check_channels)
def lrn(node: Node) -> relax.Expr:
    """x / (bias + alpha / size * window sum of x^2) ** beta, the window sum as an average pool.

    The squares are viewed as (N, 1, C, rest) and pooled over C with a (size, 1) window padded
    as ``lrn_window`` reaches before and after; counting the pads, the average is sum / size.
    """
    g, attrs = node.g, node.attrs
    shape = node.shape(0)
    channels = g.static(shape[1], "LRN's channel count")
    rest = math.prod(g.static(d, "LRN's spatial size") for d in shape[2:])
    size = int(attrs["size"])
    x = node.x(0)
    squares = relax.op.reshape(relax.op.multiply(x, x), (shape[0], 1, channels, rest))
    before, after = lrn_window(size)
    window = relax.op.nn.avg_pool2d(squares, (size, 1), (1, 1), (before, 0, after, 0),
                                    count_include_pad=True)
    window = relax.op.reshape(window, shape)
    base = relax.op.add(relax.op.multiply(window, g.const(float(attrs["alpha"]))), g.const(float(attrs["bias"])))
    return relax.op.multiply(x, relax.op.power(base, g.const(-float(attrs["beta"]))))


def check_layer_norm(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if len(kernel.outputs) > 1:
        return "LayerNormFusion with mean / inverse std dev outputs: Relax's layer_norm gives y only"
    return None


@emitter("LayerNormFusion", check=check_layer_norm)
def layer_norm(node: Node) -> relax.Expr:
    """relax.op.nn.layer_norm over the trailing axes; scale and bias broadcast to their shape first."""
    shape = node.shape(0)
    axis = norm_axis(len(shape), int(node.attrs["begin_norm_axis"]))
    normalised = shape[axis:]
    scale = relax.op.broadcast_to(node.x(1), normalised)
    bias = relax.op.broadcast_to(node.x(2), normalised) if node.has(2) else relax.op.zeros(normalised, "float32")
    return relax.op.nn.layer_norm(node.x(0), scale, bias, list(range(axis, len(shape))),
                                  epsilon=float(node.attrs["epsilon"]))


@emitter("InstanceNorm", "GroupNorm", check=check_channels)
def channel_group_norm(node: Node) -> relax.Expr:
    """relax.op.nn.group_norm over the spatial axes (InstanceNorm: one group per channel)."""
    shape = node.shape(0)
    groups = int(node.attrs["num_groups"]) if node.kernel.type == "GroupNorm" else node.g.static(shape[1], "channels")
    return relax.op.nn.group_norm(node.x(0), node.x(1), node.x(2), groups, 1, list(range(2, len(shape))),
                                  epsilon=float(node.attrs["epsilon"]))
