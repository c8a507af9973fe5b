"""QOperator forms -> DequantizeLinear, the float op, QuantizeLinear (before shape inference).

onnxruntime's quantizer writes a quantized op either as a QDQ group (DequantizeLinear nodes
before a float op, a QuantizeLinear after) or as one operator that takes the scales and zero
points as inputs: ONNX's QLinearConv and QLinearMatMul, and ``com.microsoft``'s QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearAveragePool,
QLinearGlobalAveragePool, QLinearConcat and QGemm. Each of those is rewritten into its QDQ
group here, so both forms reach the converter's one QDQ grouping (``qdq.group_quantized_ops``)
and end as the same quantized op. ``com.microsoft``'s MatMulNBits (weight-only 4- or 8-bit block
quantization) becomes a DequantizeLinear of its constant weight, as the QDQ form writes it,
before a float MatMul.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from lite.tools.converter.context import Unsupported
from lite.tools.converter.onnx_graph import OnnxGraph

if TYPE_CHECKING:
    from lite.tools.converter.report import ConversionReport

MICROSOFT = "com.microsoft"


class _Rewrite:
    """The nodes that replace one QOperator node, built with fresh tensor names."""

    def __init__(self, g: OnnxGraph, node: onnx.NodeProto):
        self.g, self.node, self.nodes = g, node, []

    def input(self, i: int) -> str:
        return self.node.input[i] if i < len(self.node.input) else ""

    def attrs(self, *drop: str) -> dict:
        return {a.name: helper.get_attribute_value(a) for a in self.node.attribute if a.name not in drop}

    def dequantize(self, x: str, scale: str, zero_point: str, axis: int | None = None) -> str:
        """A DequantizeLinear of ``x``; ``axis`` where the scale may be per axis."""
        out = self.g.unique_name(f"{x}_dequantized")
        inputs = [x, scale, zero_point] if zero_point else [x, scale]
        attrs = {}
        if axis is not None and self._per_axis(scale):
            attrs["axis"] = axis  # NOTE: before opset 13 only this expansion writes it (see quant.py's mapper)
        self.add("DequantizeLinear", inputs, [out], **attrs)
        return out

    def quantize(self, y: str, scale: str, zero_point: str, out: str) -> None:
        self.add("QuantizeLinear", [y, scale, zero_point] if zero_point else [y, scale], [out])

    def float_out(self) -> str:
        return self.g.unique_name(f"{self.node.output[0]}_float")

    def add(self, op_type: str, inputs: list[str], outputs: list[str], **attrs) -> None:
        name = self.g.unique_name(f"{self.node.name}/{op_type}")
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))

    def product_scale(self, a: str, b: str) -> str:
        """The bias scale ``a * b`` (a constant where both are)."""
        va, vb = self.g.consts.get(a), self.g.consts.get(b)
        name = self.g.unique_name(f"{self.node.name}_bias_scale")
        if va is not None and vb is not None:
            self.g.consts[name] = (va.astype(np.float32) * vb.astype(np.float32)).astype(np.float32)
        else:
            self.add("Mul", [a, b], [name])
        return name

    def _per_axis(self, scale: str) -> bool:
        value = self.g.consts.get(scale)
        return value is None or value.size > 1


def _unary(op_type: str, *drop: str) -> Callable[[_Rewrite], None]:
    """X, X_scale, X_zp, Y_scale, Y_zp -> Q(op(DQ(X)))."""

    def rewrite(r: _Rewrite) -> None:
        x = r.dequantize(r.input(0), r.input(1), r.input(2))
        y = r.float_out()
        r.add(op_type, [x], [y], **r.attrs(*drop))
        r.quantize(y, r.input(3), r.input(4), r.node.output[0])

    return rewrite


def _binary(op_type: str) -> Callable[[_Rewrite], None]:
    """A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp -> Q(op(DQ(A), DQ(B)))."""

    def rewrite(r: _Rewrite) -> None:
        a = r.dequantize(r.input(0), r.input(1), r.input(2))
        b = r.dequantize(r.input(3), r.input(4), r.input(5))
        y = r.float_out()
        r.add(op_type, [a, b], [y])
        r.quantize(y, r.input(6), r.input(7), r.node.output[0])

    return rewrite


def _qlinear_conv(r: _Rewrite) -> None:
    """x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32, scale x_scale * w_scale)."""
    x = r.dequantize(r.input(0), r.input(1), r.input(2))
    w = r.dequantize(r.input(3), r.input(4), r.input(5), axis=0)
    inputs = [x, w]
    if r.input(8):
        inputs.append(r.dequantize(r.input(8), r.product_scale(r.input(1), r.input(4)), "", axis=0))
    y = r.float_out()
    r.add("Conv", inputs, [y], **r.attrs())
    r.quantize(y, r.input(6), r.input(7), r.node.output[0])


def _qlinear_matmul(r: _Rewrite) -> None:
    """a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp; b's scale may be per column."""
    a = r.dequantize(r.input(0), r.input(1), r.input(2))
    b = r.dequantize(r.input(3), r.input(4), r.input(5), axis=-1)
    y = r.float_out()
    r.add("MatMul", [a, b], [y])
    r.quantize(y, r.input(6), r.input(7), r.node.output[0])


def _qgemm(r: _Rewrite) -> None:
    """com.microsoft QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp; a float
    output where y_scale is absent."""
    trans_b = int(r.attrs().get("transB", 0))
    a = r.dequantize(r.input(0), r.input(1), r.input(2))
    b = r.dequantize(r.input(3), r.input(4), r.input(5), axis=0 if trans_b else 1)
    inputs = [a, b]
    if r.input(6):
        inputs.append(r.dequantize(r.input(6), r.product_scale(r.input(1), r.input(4)), "", axis=-1))
    attrs = r.attrs()
    if not r.input(7):
        r.add("Gemm", inputs, [r.node.output[0]], **attrs)
        return
    y = r.float_out()
    r.add("Gemm", inputs, [y], **attrs)
    r.quantize(y, r.input(7), r.input(8), r.node.output[0])


def _qlinear_concat(r: _Rewrite) -> None:
    """Y_scale, Y_zp, then (X, X_scale, X_zp) per input."""
    parts = [r.dequantize(r.input(i), r.input(i + 1), r.input(i + 2)) for i in range(2, len(r.node.input), 3)]
    y = r.float_out()
    r.add("Concat", parts, [y], **r.attrs())
    r.quantize(y, r.input(0), r.input(1), r.node.output[0])


def _qlinear_softmax(r: _Rewrite) -> None:
    """The ``opset`` attribute says whose Softmax it is; a last-axis softmax means the same in all,
    and so does one over one other axis where both that attribute and the model's opset are 13 or
    later (onnxruntime moves the axis last; before 13 an axis flattens every axis after it)."""
    attrs = r.attrs("opset")
    node_opset = int(r.attrs().get("opset", 13))
    axis = int(attrs.get("axis", -1 if node_opset >= 13 else 1))
    shape = r.g.tensor_info(r.input(0)).shape
    rank = None if shape is None else len(shape)
    last = axis == -1 or (rank is not None and axis % max(rank, 1) == rank - 1)
    if not last and (node_opset < 13 or r.g.opset < 13):
        raise Unsupported(f"QLinearSoftmax over axis {axis} before opset 13 (opset attribute {node_opset}, model "
                          f"opset {r.g.opset}): only the last axis is supported")
    x = r.dequantize(r.input(0), r.input(1), r.input(2))
    y = r.float_out()
    r.add("Softmax", [x], [y], axis=-1 if last else axis)
    r.quantize(y, r.input(3), r.input(4), r.node.output[0])


def _matmul_nbits(r: _Rewrite) -> None:
    """com.microsoft MatMulNBits (onnxruntime's weight-only block quantization): Y = A @ W^T + bias.

    Inputs: A (float, [..., K]); B (uint8 [N, n_blocks, blob_size], constant: each column's
    ``bits``-bit codes along K, packed low bits first, blob_size = block_size * bits / 8); scales
    ([N * n_blocks] or [N, n_blocks], A's type); zero_points optional (uint8: for 4 bits packed two
    per byte, [N * ceil(n_blocks / 2)]; default 2^(bits - 1)); g_idx (refused); bias ([N]).
    Becomes MatMul(A, DequantizeLinear(W)) (+ Add bias), W the constant [K, N] uint4 (uint8 for
    8 bits) with blocked scales and zero points along axis 0: the same weights, exactly.
    """
    spec = _nbits_spec(r)
    weight, scale, zero_point = _nbits_weight(r, spec)
    names = [r.g.unique_name(f"{r.node.name}_{part}") for part in ("weight", "scale", "zero_point")]
    for name, value in zip(names, (weight, scale, zero_point), strict=True):
        r.g.consts[name] = value
    w = r.g.unique_name(f"{r.node.name}_weight_dequantized")
    r.add("DequantizeLinear", names, [w], axis=0, block_size=spec["block_size"])
    if not r.input(5):
        r.add("MatMul", [r.input(0), w], [r.node.output[0]])
        return
    y = r.float_out()
    r.add("MatMul", [r.input(0), w], [y])
    r.add("Add", [y, r.input(5)], [r.node.output[0]])


def _nbits_spec(r: _Rewrite) -> dict[str, int]:
    """MatMulNBits' attributes, checked: K, N, bits (4 or 8), block_size (a power of 2, >= 16)."""
    attrs = r.attrs()
    missing = [name for name in ("K", "N", "block_size") if name not in attrs]
    if missing:
        raise Unsupported(f"MatMulNBits lacks the attributes {missing}")
    spec = {name: int(attrs[name]) for name in ("K", "N", "block_size")} | {"bits": int(attrs.get("bits", 4))}
    if spec["bits"] not in (4, 8):
        raise Unsupported(f"MatMulNBits with bits={spec['bits']}: only 4 and 8 bits are supported")
    block = spec["block_size"]
    if block < 16 or block & (block - 1) or spec["K"] < 1 or spec["N"] < 1:
        raise Unsupported(f"MatMulNBits with K={spec['K']}, N={spec['N']}, block_size={block}: K and N must be "
                          "positive and block_size a power of 2 of at least 16")
    if r.input(4):
        raise Unsupported("MatMulNBits with g_idx (act-order column groups) is not supported; quantize without it")
    return spec


def _nbits_weight(r: _Rewrite, spec: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(W [K, N] uint4 or uint8, scales [n_blocks, N], zero points [n_blocks, N] of W's type)."""
    k, n, bits, block = spec["K"], spec["N"], spec["bits"], spec["block_size"]
    blocks = -(-k // block)
    b, scale = r.g.consts.get(r.input(1)), r.g.consts.get(r.input(2))
    if b is None or scale is None:
        raise Unsupported("MatMulNBits with a B or scales that is not a constant: only constant weights convert")
    if b.dtype != np.uint8 or b.shape != (n, blocks, block * bits // 8):
        raise Unsupported(f"MatMulNBits B is {b.dtype} {list(b.shape)}; for K={k}, N={n}, bits={bits}, "
                          f"block_size={block} the layout is uint8 {[n, blocks, block * bits // 8]}")
    if scale.dtype.kind != "f" or scale.size != n * blocks:
        raise Unsupported(f"MatMulNBits scales are {scale.dtype} {list(scale.shape)}; expected {n * blocks} floats "
                          f"([N * n_blocks] or [N, n_blocks])")
    codes = _unpack_codes(b.reshape(n, -1), bits)[:, :k]
    zero_point = _nbits_zero_point(r, n, blocks, bits)
    dtype = np.dtype(ml_dtypes.uint4) if bits == 4 else np.dtype(np.uint8)
    return (np.ascontiguousarray(codes.T).astype(dtype), np.ascontiguousarray(scale.reshape(n, blocks).T),
            np.ascontiguousarray(zero_point.T).astype(dtype))


def _unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 rows of ``bits``-bit codes packed low bits first -> one code per byte."""
    if bits == 8:
        return packed
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(packed.shape[0], -1)


def _nbits_zero_point(r: _Rewrite, n: int, blocks: int, bits: int) -> np.ndarray:
    """Zero points [N, n_blocks]: the default 2^(bits - 1), or unpacked from zero_points."""
    if not r.input(3):
        return np.full((n, blocks), 1 << (bits - 1), np.uint8)
    zero_point = r.g.consts.get(r.input(3))
    per_row = -(-blocks * bits // 8)
    if zero_point is None or zero_point.dtype != np.uint8 or zero_point.size != n * per_row:
        found = "not a constant" if zero_point is None else f"{zero_point.dtype} {list(zero_point.shape)}"
        raise Unsupported(f"MatMulNBits zero_points are {found}; only constant uint8 zero points, {n * per_row} "
                          "of them (packed as B), are supported")
    return _unpack_codes(zero_point.reshape(n, per_row), bits)[:, :blocks]


def _channels_first(rewrite: Callable[[_Rewrite], None]) -> Callable[[_Rewrite], None]:
    def checked(r: _Rewrite) -> None:
        if int(r.attrs().get("channels_last", 0)):
            raise Unsupported("channels_last=1 (NHWC) is not supported; the converter takes NCHW pooling")
        rewrite(r)

    return checked


_STANDARD: dict[str, Callable[[_Rewrite], None]] = {"QLinearConv": _qlinear_conv, "QLinearMatMul": _qlinear_matmul}
# The QOperator op types expanded here, by domain (the standard domain as "").
EXPANDED_OPS: dict[str, frozenset[str]] = {}

_MICROSOFT: dict[str, Callable[[_Rewrite], None]] = {
    "QLinearAdd": _binary("Add"),
    "QLinearMul": _binary("Mul"),
    "QLinearSigmoid": _unary("Sigmoid"),
    "QLinearLeakyRelu": _unary("LeakyRelu"),
    "QLinearSoftmax": _qlinear_softmax,
    "QLinearAveragePool": _channels_first(_unary("AveragePool", "channels_last")),
    "QLinearGlobalAveragePool": _channels_first(_unary("GlobalAveragePool", "channels_last")),
    "QLinearConcat": _qlinear_concat,
    "QGemm": _qgemm,
    "MatMulNBits": _matmul_nbits,
}
EXPANDED_OPS.update({"": frozenset(_STANDARD), MICROSOFT: frozenset(_MICROSOFT)})


def expand_quantized_operators(g: OnnxGraph, report: ConversionReport) -> list[tuple[str, str, str]]:
    """Rewrites every QOperator node into its QDQ group, in place; returns (op type, node name,
    reason) for the ones that cannot be (the converter reports them with the other problems)."""
    nodes, problems = [], []
    for node in g.nodes:
        rewrite = _rewrite_of(node)
        if rewrite is None:
            nodes.append(node)
            continue
        r = _Rewrite(g, node)
        try:
            rewrite(r)
        except Unsupported as exc:
            problems.append((node.op_type, node.name, exc.reason))
            nodes.append(node)
            continue
        nodes.extend(r.nodes)
        report.expanded_quantized_ops += 1
    g.nodes[:] = nodes
    return problems


def _rewrite_of(node: onnx.NodeProto) -> Callable[[_Rewrite], None] | None:
    if node.domain in ("", "ai.onnx"):
        return _STANDARD.get(node.op_type)
    return _MICROSOFT.get(node.op_type) if node.domain == MICROSOFT else None
