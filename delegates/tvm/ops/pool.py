"""MaxPoolFusion and AvgPoolFusion -> relax.op.nn.max_pool2d / avg_pool2d, or a global reduction.

Relax's pools follow ONNX: CEIL rounding drops a window that would start in the end pad,
and ``count_include_pad`` counts the pads (not what a CEIL window adds past them) in the
divisor; both checked against onnxruntime in tests/delegates/test_tvm.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from lite.delegates.tvm.ops import Node, emitter
from lite.kernel import Kernel
from lite.ops.geometry import ceil_rounds, per_axis, window_pads


def check_pool(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if len(kernel.inputs[0].shape) != 4:
        return f"{kernel.type} of a {len(kernel.inputs[0].shape)}-D input: only 2-D NCHW pools compile"
    return None


@emitter("MaxPoolFusion", "AvgPoolFusion", check=check_pool)
def pool(node: Node) -> relax.Expr:
    attrs, g, is_max = node.attrs, node.g, node.kernel.type == "MaxPoolFusion"
    x = node.x(0)
    if attrs["is_global"]:
        return (relax.op.max if is_max else relax.op.mean)(x, axis=[2, 3], keepdims=True)
    size = [g.static(d, "a pool's spatial size") for d in node.shape(0)[2:]]
    kernel_size = tuple(int(k) for k in attrs["kernel_size"])
    strides = per_axis(attrs.get("strides"))
    dilation = per_axis(attrs.get("dilation")) if is_max else (1, 1)
    mode = attrs["pad_mode"]
    begins, ends = window_pads(mode, attrs["pad_list"], size, kernel_size, strides, dilation)
    ceil = ceil_rounds(attrs["round_mode"], mode)
    op = relax.op.nn.max_pool2d if is_max else relax.op.nn.avg_pool2d
    return op(x, kernel_size, strides, (*begins, *ends), dilation, ceil_mode=ceil,
              count_include_pad=bool(attrs.get("count_include_pad", False)))
