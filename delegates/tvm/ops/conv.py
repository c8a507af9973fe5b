"""Conv2DFusion and Conv2dTransposeFusion -> relax.op.nn.conv1d / conv2d / conv3d, conv1d_transpose /
conv2d_transpose (NC + spatial layouts), chosen by the number of spatial axes.

Pads are ``lite.ops.geometry``'s: ``pad_list`` is [begins..., ends...], SAME_* pads are
computed from the static spatial size; Relax takes the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from lite.delegates.tvm.ops.common import Node, activate, emitter, fused_activation
from lite.kernel import Kernel
from lite.ops.geometry import per_axis, transposed_pads, window_pads

SPATIAL = {1: "W", 2: "HW", 3: "DHW"}  # layout letters of each number of spatial axes
CONVS = {1: relax.op.nn.conv1d, 2: relax.op.nn.conv2d, 3: relax.op.nn.conv3d}
TRANSPOSED = {1: relax.op.nn.conv1d_transpose, 2: relax.op.nn.conv2d_transpose}


def check_conv(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    rank = len(kernel.inputs[0].shape) - 2
    ops = TRANSPOSED if kernel.type == "Conv2dTransposeFusion" else CONVS
    if rank not in ops:
        return (f"{kernel.type} with {rank} spatial axes: Relax has "
                f"{' / '.join(op.__name__ for op in ops.values())} only")
    return fused_activation(kernel, attrs)


def with_bias(node: Node, y: relax.Expr, rank: int) -> relax.Expr:
    """y + bias per output channel (when the kernel has a bias), then the fused activation."""
    if node.has(2):
        y = relax.op.add(y, relax.op.reshape(node.x(2), (1, -1, *(1,) * rank)))
    return activate(y, node.attrs["activation_type"])


def geometry(node: Node) -> tuple[list[int], list[int], tuple[int, ...], tuple[int, ...]]:
    """A convolution's static spatial input size, weight shape, strides and dilation."""
    size = [node.g.static(d, "a convolution's spatial size") for d in node.shape(0)[2:]]
    weight = [node.g.static(d, "a convolution weight's shape") for d in node.shape(1)]
    rank = len(size)
    return size, weight, per_axis(node.attrs.get("stride"), rank), per_axis(node.attrs.get("dilation"), rank)


@emitter("Conv2DFusion", check=check_conv)
def conv(node: Node) -> relax.Expr:
    """Grouped and depthwise convolutions are convNd with ``groups``; bias and activation follow."""
    attrs = node.attrs
    size, weight, strides, dilation = geometry(node)
    begins, ends = window_pads(attrs["pad_mode"], attrs["pad_list"], size, weight[2:], strides, dilation)
    letters = SPATIAL[len(size)]
    y = CONVS[len(size)](node.x(0), node.x(1), strides=strides, padding=(*begins, *ends), dilation=dilation,
                         groups=int(attrs["group"]), data_layout=f"NC{letters}", kernel_layout=f"OI{letters}")
    return with_bias(node, y, len(size))


@emitter("Conv2dTransposeFusion", check=check_conv)
def conv_transpose(node: Node) -> relax.Expr:
    """Weight (C, O/group, kernel...) is Relax's IO + spatial layout."""
    attrs = node.attrs
    size, weight, strides, dilation = geometry(node)
    rank = len(size)
    output_padding = tuple(int(v) for v in attrs.get("output_paddings") or ()) or (0,) * rank
    begins, ends = transposed_pads(attrs["pad_mode"], attrs["pad_list"], size, weight[2:], strides, dilation,
                                   output_padding)
    letters = SPATIAL[rank]
    y = TRANSPOSED[rank](node.x(0), node.x(1), strides=strides, padding=(*begins, *ends),
                         output_padding=output_padding, dilation=dilation, groups=int(attrs["group"]),
                         data_layout=f"NC{letters}", kernel_layout=f"IO{letters}")
    return with_bias(node, y, rank)


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
