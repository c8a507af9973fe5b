"""Conv2DFusion and Conv2dTransposeFusion -> relax.op.nn.conv2d / conv2d_transpose (NCHW).

Pads are ``lite.ops.geometry``'s: ``pad_list`` is [top, left, bottom, right], SAME_* pads are
computed from the static spatial size; Relax takes the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from lite.delegates.tvm.ops import Node, activate, emitter, fused_activation
from lite.kernel import Kernel
from lite.ops.geometry import per_axis, transposed_pads, window_pads


def check_conv(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if len(kernel.inputs[0].shape) != 4:
        return f"{kernel.type} of a {len(kernel.inputs[0].shape)}-D input: only 2-D NCHW convolutions compile"
    return fused_activation(kernel, attrs)


def with_bias(node: Node, y: relax.Expr) -> relax.Expr:
    """y + bias per output channel (when the kernel has a bias), then the fused activation."""
    if node.has(2):
        y = relax.op.add(y, relax.op.reshape(node.x(2), (1, -1, 1, 1)))
    return activate(y, node.attrs["activation_type"])


def geometry(node: Node) -> tuple[list[int], list[int], tuple[int, int], tuple[int, int]]:
    """A convolution's static spatial input size, weight shape, strides and dilation."""
    size = [node.g.static(d, "a convolution's spatial size") for d in node.shape(0)[2:]]
    weight = [node.g.static(d, "a convolution weight's shape") for d in node.shape(1)]
    return size, weight, per_axis(node.attrs.get("stride")), per_axis(node.attrs.get("dilation"))


@emitter("Conv2DFusion", check=check_conv)
def conv2d(node: Node) -> relax.Expr:
    """Grouped and depthwise convolutions are conv2d with ``groups``; bias and activation follow."""
    attrs = node.attrs
    size, weight, strides, dilation = geometry(node)
    begins, ends = window_pads(attrs["pad_mode"], attrs["pad_list"], size, weight[2:], strides, dilation)
    y = relax.op.nn.conv2d(node.x(0), node.x(1), strides=strides, padding=(*begins, *ends), dilation=dilation,
                           groups=int(attrs["group"]))
    return with_bias(node, y)


@emitter("Conv2dTransposeFusion", check=check_conv)
def conv2d_transpose(node: Node) -> relax.Expr:
    """Weight (C, O/group, KH, KW) is Relax's IOHW layout."""
    attrs = node.attrs
    size, weight, strides, dilation = geometry(node)
    output_padding = tuple(int(v) for v in attrs.get("output_paddings") or ()) or (0, 0)
    begins, ends = transposed_pads(attrs["pad_mode"], attrs["pad_list"], size, weight[2:], strides, dilation,
                                   output_padding)
    y = relax.op.nn.conv2d_transpose(node.x(0), node.x(1), strides=strides, padding=(*begins, *ends),
                                     output_padding=output_padding, dilation=dilation,
                                     groups=int(attrs["group"]), kernel_layout="IOHW")
    return with_bias(node, y)


@emitter("MatMulFusion", check=fused_activation)
def matmul(node: Node) -> relax.Expr:
    """op(a) @ op(b) + bias: Relax matmul broadcasts batch dims and handles 1-D operands as numpy does."""
    a, b = node.x(0), node.x(1)
    if node.attrs["transpose_a"] and len(node.shape(0)) >= 2:
        a = swap_last(a, len(node.shape(0)))
    if node.attrs["transpose_b"] and len(node.shape(1)) >= 2:
        b = swap_last(b, len(node.shape(1)))
    y = relax.op.matmul(a, b)
    if node.has(2):
        y = relax.op.add(y, node.x(2))
    return activate(y, node.attrs["activation_type"])


def swap_last(x: relax.Expr, rank: int) -> relax.Expr:
    """``x`` with its last two axes swapped."""
    return relax.op.permute_dims(x, [*range(rank - 2), rank - 1, rank - 2])
