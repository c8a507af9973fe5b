"""MaxPoolFusion and AvgPoolFusion -> relax.op.nn.max_pool1d/2d/3d / avg_pool1d/2d/3d, or a global reduction.

Relax's pools follow ONNX: CEIL rounding drops a window that would start in the end pad,
and ``count_include_pad`` counts the pads (not what a CEIL window adds past them) in the
divisor; both checked against onnxruntime in tests/delegates/test_tvm.py and test_tvm_spatial.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

from lite.delegates.tvm.ops.common import Node, emitter
from lite.kernel import Kernel
from lite.ops.geometry import ceil_rounds, per_axis, window_pads

LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
MAX_POOLS = {1: relax.op.nn.max_pool1d, 2: relax.op.nn.max_pool2d, 3: relax.op.nn.max_pool3d}
AVG_POOLS = {1: relax.op.nn.avg_pool1d, 2: relax.op.nn.avg_pool2d, 3: relax.op.nn.avg_pool3d}


def check_pool(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    rank = len(kernel.inputs[0].shape) - 2
    if len(kernel.outputs) > 1:
        return f"{kernel.type} with an Indices output: Relax pools give the values only"
    if rank not in LAYOUTS and not attrs["is_global"]:
        return f"{kernel.type} with {rank} spatial axes: Relax pools have 1, 2 or 3"
    return None


@emitter("MaxPoolFusion", "AvgPoolFusion", check=check_pool)
def pool(node: Node) -> relax.Expr:
    attrs, g, is_max = node.attrs, node.g, node.kernel.type == "MaxPoolFusion"
    x, rank = node.x(0), len(node.shape(0)) - 2
    if attrs["is_global"]:
        return (relax.op.max if is_max else relax.op.mean)(x, axis=list(range(2, rank + 2)), keepdims=True)
    size = [g.static(d, "a pool's spatial size") for d in node.shape(0)[2:]]
    kernel_size = tuple(int(k) for k in attrs["kernel_size"])
    strides = per_axis(attrs.get("strides"), rank)
    dilation = per_axis(attrs.get("dilation"), rank)
    mode = attrs["pad_mode"]
    begins, ends = window_pads(mode, attrs["pad_list"], size, kernel_size, strides, dilation)
    ceil = ceil_rounds(attrs["round_mode"], mode)
    op = (MAX_POOLS if is_max else AVG_POOLS)[rank]
    return op(x, kernel_size, strides, (*begins, *ends), dilation, ceil_mode=ceil,
              count_include_pad=bool(attrs.get("count_include_pad", False)), layout=LAYOUTS[rank])
