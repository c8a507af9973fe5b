"""Transformer block fusions on the .lite graph, as ONNX Runtime's transformer optimizer and
MindSpore Lite's converter do them: exporters decompose these blocks into many small ops.

- ``fuse_layer_norm``: ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div
  [-> Mul(scale)] [-> Add(bias)] over the trailing axes becomes one LayerNormFusion.
- ``fuse_gelu``: an element-wise region of one input holding an Erf or a tanh (Add, Sub, Mul,
  Div, Pow with scalar constants) becomes Activation GELU or GELU_TANH when it computes that
  function: the region is evaluated on sample points, so operand orders and constant
  placement do not matter.
- ``fuse_attention``: MatMul -> [Mul or Div by a scalar] -> [Add a mask] -> Softmax over the
  last axis -> MatMul becomes one Attention.
- ``fuse_matmul_bias``: MatMulFusion followed by the Add of a constant vector becomes one
  MatMulFusion with a bias input.
- ``store_weights_untransposed``: a constant weight that a MatMulFusion transposes is stored
  transposed, so BLAS reads it contiguously.
- ``fuse_transposed_operands``: a Transpose of the last two axes that only a MatMulFusion reads
  becomes that operand's transpose flag (attention's K^T: BLAS reads the cache transposed in place).
- ``fuse_swish``: Mul(x, Sigmoid(x)) (SiLU, as exporters write EfficientNet's and many
  transformers' activation) becomes Activation SWISH with alpha 1.

Each pass rewrites ``GraphDef.nodes`` in place and records the fused nodes' names.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from lite.ops.activation import FUSED_CLIPS, GELU_TANH_CUBIC, SQRT_2_OVER_PI, SQRT_HALF
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.primitives import default_attrs

if TYPE_CHECKING:
    from lite.tools.converter.report import ConversionReport


class View:
    """Who produces and who reads each tensor of a graph, and its constant value."""

    def __init__(self, graph: GraphDef) -> None:
        self.graph = graph
        self.producer = {t: node for node in graph.nodes for t in node.outputs}
        self.readers: dict[int, list[NodeDef]] = {}
        for node in graph.nodes:
            for t in node.inputs:
                self.readers.setdefault(t, []).append(node)
        self.uses = Counter(t for node in graph.nodes for t in node.inputs)
        self.graph_outputs = set(graph.outputs)

    def const(self, tensor: int) -> np.ndarray | None:
        return self.graph.tensors[tensor].data if tensor >= 0 else None

    def scalar(self, tensor: int) -> float | None:
        value = self.const(tensor)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def private(self, tensor: int) -> bool:
        """Read by exactly one node and not a graph output."""
        return self.uses[tensor] == 1 and tensor not in self.graph_outputs

    def rank(self, tensor: int) -> int:
        return len(self.graph.tensors[tensor].shape)

    def node_of(self, tensor: int, op_type: str) -> NodeDef | None:
        """The plain (no fused activation) ``op_type`` node producing ``tensor``, if it is one."""
        node = self.producer.get(tensor)
        if node is None or node.op_type != op_type or not plain(node):
            return None
        return node


def plain(node: NodeDef) -> bool:
    """Whether the node has no fused activation."""
    return node.attrs.get("activation_type", "NO_ACTIVATION") == "NO_ACTIVATION"


def _replace(graph: GraphDef, end: NodeDef, fused: NodeDef, removed: Iterable[NodeDef]) -> None:
    """``fused`` takes ``end``'s place; the ``removed`` nodes go."""
    gone = {id(n) for n in removed} - {id(end)}
    graph.nodes[:] = [fused if n is end else n for n in graph.nodes if id(n) not in gone]


def _remove(graph: GraphDef, removed: Iterable[NodeDef]) -> None:
    """The ``removed`` nodes go."""
    gone = {id(n) for n in removed}
    graph.nodes[:] = [n for n in graph.nodes if id(n) not in gone]


def _other(node: NodeDef, tensor: int) -> int | None:
    """The other input of a binary node reading ``tensor``."""
    a, b = node.inputs[:2]
    return b if a == tensor else a if b == tensor else None


# ---- LayerNorm ---------------------------------------------------------------------------------


def fuse_layer_norm(graph: GraphDef, report: ConversionReport) -> None:
    """Every decomposed LayerNorm (see the module docstring) becomes one LayerNormFusion."""
    for div in [n for n in graph.nodes if n.op_type == "DivFusion"]:
        view = View(graph)
        if not any(n is div for n in graph.nodes):
            continue
        match = _layer_norm_at(view, div)
        if match is not None:
            fused, block = match
            _replace(graph, block[-1], fused, block[:-1])
            report.fused_blocks.append(f"LayerNorm {fused.name}")


def _layer_norm_at(view: View, div: NodeDef) -> tuple[NodeDef, list[NodeDef]] | None:
    """The LayerNormFusion whose normalising Div is ``div``, and the nodes it replaces (its last
    node last)."""
    sub, sqrt = view.node_of(div.inputs[0], "SubFusion"), view.node_of(div.inputs[1], "Sqrt")
    if sub is None or sqrt is None or div.attrs["activation_type"] != "NO_ACTIVATION":
        return None
    x, centered = sub.inputs[0], sub.outputs[0]
    mean, add_eps = view.node_of(sub.inputs[1], "ReduceFusion"), view.node_of(sqrt.inputs[0], "AddFusion")
    if mean is None or add_eps is None or mean.inputs[0] != x:
        return None
    var, epsilon = view.node_of(add_eps.inputs[0], "ReduceFusion"), view.scalar(add_eps.inputs[1])
    square = var and (view.node_of(var.inputs[0], "PowFusion") or view.node_of(var.inputs[0], "MulFusion"))
    if square is None or epsilon is None or not _is_square_of(view, square, centered):
        return None
    axis = _trailing_axis(view, x, mean, var)
    inner = [mean, square, var, add_eps, sqrt]
    if axis is None or not all(view.private(n.outputs[0]) for n in inner):
        return None
    if view.uses[centered] != 2 + (square.op_type == "MulFusion") or centered in view.graph_outputs:
        return None  # NOTE: only the square and the Div may read x - mean
    tail, scale, bias = _affine_tail(view, div, view.rank(x) - axis)
    last = (tail or [div])[-1]
    inputs = [x, scale if scale is not None else _ones_like_norm(view, x, axis)] + ([bias] if bias is not None else [])
    fused = NodeDef(last.name, "LayerNormFusion", {"begin_norm_axis": axis - view.rank(x), "epsilon": epsilon},
                    inputs, list(last.outputs))
    return fused, [mean, sub, *inner[1:], div, *tail]


def _is_square_of(view: View, node: NodeDef, tensor: int) -> bool:
    if node.op_type == "MulFusion":
        return node.inputs[:2] == [tensor, tensor]
    return node.inputs[0] == tensor and view.scalar(node.inputs[1]) == 2.0


def _trailing_axis(view: View, x: int, *reductions: NodeDef) -> int | None:
    """The first axis when both reductions average the same trailing axes of ``x`` and keep them."""
    rank = view.rank(x)
    found = set()
    for node in reductions:
        attrs = node.attrs
        if attrs["reduce_mode"] != "MEAN" or not attrs["keep_dims"] or len(node.inputs) > 1 or not attrs["axes"]:
            return None
        axes = sorted(a % rank for a in attrs["axes"])
        if axes != list(range(rank - len(axes), rank)):
            return None
        found.add(axes[0])
    return found.pop() if len(found) == 1 else None


def _affine_tail(view: View, div: NodeDef, norm_rank: int) -> tuple[list[NodeDef], int | None, int | None]:
    """(the Mul and Add that follow alone, scale, bias): constants broadcasting over the normalised
    axes only."""
    tail, scale, bias, last = [], None, None, div
    for op_type in ("MulFusion", "AddFusion"):
        readers = view.readers.get(last.outputs[0], [])
        if not view.private(last.outputs[0]) or readers[0].op_type != op_type:
            continue
        node = readers[0]
        other = _other(node, last.outputs[0])
        value = view.const(other) if other is not None else None
        if value is None or value.ndim > norm_rank or node.attrs["activation_type"] != "NO_ACTIVATION":
            continue
        if op_type == "MulFusion":
            scale = other
        else:
            bias = other
        tail.append(node)
        last = node
    return tail, scale, bias


def _ones_like_norm(view: View, x: int, axis: int) -> int:
    """A new constant scale of ones for a LayerNorm without one; returns its tensor index."""
    tensor = view.graph.tensors[x]
    shape = tuple(d if d > 0 else 1 for d in tensor.shape[axis:])
    view.graph.tensors.append(TensorDef(f"{tensor.name}_ln_scale", tensor.dtype, shape,
                                        data=np.ones(shape, tensor.dtype)))
    return len(view.graph.tensors) - 1


# ---- GELU --------------------------------------------------------------------------------------

# The element-wise ops a GELU region may hold, as numpy on float64 samples.
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "AddFusion": np.add, "SubFusion": np.subtract, "MulFusion": np.multiply, "DivFusion": np.divide,
    "PowFusion": np.power,
}
_ERF = np.vectorize(math.erf)
_SAMPLES = np.linspace(-6.0, 6.0, 97)
GELU_FORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "GELU": lambda x: 0.5 * x * (1.0 + _ERF(x * SQRT_HALF)),
    "GELU_TANH": lambda x: 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x**3))),
}


def fuse_gelu(graph: GraphDef, report: ConversionReport) -> None:
    """Every element-wise region computing GELU (exact or tanh form) becomes one Activation."""
    view = View(graph)
    for core in [n for n in graph.nodes if _is_gelu_core(n)]:
        if not any(n is core for n in graph.nodes):
            continue
        for x in _region_inputs(view, core):
            match = _gelu_region(view, x)
            if match is not None:
                kind, end, region = match
                fused = NodeDef(end.name, "Activation", {**default_attrs("Activation"), "activation_type": kind},
                                [x], list(end.outputs))
                _replace(graph, end, fused, [n for n in region if n is not end])
                report.fused_blocks.append(f"{kind} {end.name}")
                view = View(graph)
                break


def _is_gelu_core(node: NodeDef) -> bool:
    return node.op_type == "Erf" or (node.op_type == "Activation" and node.attrs["activation_type"] == "TANH")


def _is_region_op(view: View, node: NodeDef) -> bool:
    if _is_gelu_core(node):
        return True
    return node.op_type in _BINARY and len(node.inputs) == 2 and plain(node)


def _region_inputs(view: View, core: NodeDef) -> list[int]:
    """Candidate region inputs: non-constant tensors that the core's ancestors within 4 steps read."""
    seen, frontier, found = set(), [core], []
    for _ in range(4):
        step = []
        for node in frontier:
            for t in node.inputs:
                producer = view.producer.get(t)
                if view.const(t) is None and t not in seen:
                    seen.add(t)
                    found.append(t)
                    if producer is not None and _is_region_op(view, producer):
                        step.append(producer)
        frontier = step
    return found


def _gelu_region(view: View, x: int) -> tuple[str, NodeDef, list[NodeDef]] | None:
    """The region of element-wise ops computed from ``x`` and scalar constants alone, if it has one
    output tensor read outside it and computes a GELU form."""
    members, known = set(), {x}
    grew = True
    while grew:
        grew = False
        for node in view.graph.nodes:
            if id(node) in members or not _is_region_op(view, node):
                continue
            reads = [t in known for t in node.inputs]
            if any(reads) and all(r or view.scalar(t) is not None for r, t in zip(reads, node.inputs, strict=True)):
                members.add(id(node))
                known.update(node.outputs)
                grew = True
    region = [n for n in view.graph.nodes if id(n) in members]  # topological order
    escaping = [t for n in region for t in n.outputs if t in view.graph_outputs
                or any(id(r) not in members for r in view.readers.get(t, []))]
    if len(escaping) != 1 or not any(_is_gelu_core(n) for n in region):
        return None
    values = _evaluate(view, region, x, escaping[0])
    for kind, form in GELU_FORMS.items():
        if values is not None and np.allclose(values, form(_SAMPLES), rtol=1e-5, atol=1e-6):
            return kind, view.producer[escaping[0]], region
    return None


def _evaluate(view: View, region: list[NodeDef], x: int, output: int) -> np.ndarray | None:
    values = {x: _SAMPLES}
    with np.errstate(all="ignore"):
        for node in region:
            args = [values[t] if t in values else view.scalar(t) for t in node.inputs]
            if node.op_type == "Erf":
                values[node.outputs[0]] = _ERF(args[0])
            elif node.op_type == "Activation":
                values[node.outputs[0]] = np.tanh(args[0])
            else:
                values[node.outputs[0]] = _BINARY[node.op_type](*args)
    return values.get(output)


# ---- attention -----------------------------------------------------------------------------------


def fuse_attention(graph: GraphDef, report: ConversionReport) -> None:
    """Every MatMul -> scale -> mask -> Softmax [-> Where(IsNaN(p), 0, p)] -> MatMul chain becomes
    one Attention (the zeroing of NaN weights, as PyTorch's dynamo exporter writes
    scaled_dot_product_attention, is its ``nan_to_zero``); a constant mask of zeros that does not
    broadcast the scores is dropped."""
    for softmax in [n for n in graph.nodes if n.op_type == "Softmax"]:
        match = _attention_at(View(graph), softmax)
        if match is not None:
            fused, block = match
            _replace(graph, block[-1], fused, block[:-1])
            report.fused_blocks.append(f"Attention {fused.name}")


def _attention_at(view: View, softmax: NodeDef) -> tuple[NodeDef, list[NodeDef]] | None:
    rank = view.rank(softmax.inputs[0])
    if rank < 2 or [a % rank for a in softmax.attrs["axis"]] != [rank - 1]:
        return None
    zeroing = _nan_zeroing(view, softmax.outputs[0])
    weights = zeroing[-1].outputs[0] if zeroing else softmax.outputs[0]
    if not view.private(weights):
        return None
    product = view.readers[weights][0]
    if not _plain_matmul(view, product) or product.inputs[0] != weights:
        return None
    masked, mask, masking = _unmasked(view, softmax.inputs[0])
    if mask is not None and not _same_shape(view, masked, softmax.inputs[0]):
        return None  # NOTE: a mask that broadcasts the scores to more dims: the primitive's mask does not
    if mask is not None and _zeros(view.const(mask)):
        mask = None
    scores, scale, scaling = _unscaled(view, masked)
    first = view.node_of(scores, "MatMulFusion")
    if first is None or not _plain_matmul(view, first) or not view.private(scores):
        return None
    inputs = [*first.inputs, product.inputs[1]] + ([mask] if mask is not None else [])
    fused = NodeDef(product.name, "Attention", {"scale": scale, "nan_to_zero": bool(zeroing)}, inputs,
                    list(product.outputs))
    return fused, [first, *scaling, *masking, softmax, *zeroing, product]


def _nan_zeroing(view: View, weights: int) -> list[NodeDef]:
    """[IsNaN(weights), Where(that, 0, weights)] where exactly those two read ``weights`` (and only the
    Where reads the IsNaN), or []."""
    readers = view.readers.get(weights, [])
    if len(readers) != 2 or weights in view.graph_outputs:
        return []
    isnan = next((r for r in readers if r.op_type == "IsNaN"), None)
    where = next((r for r in readers if r.op_type == "Where"), None)
    if isnan is None or where is None or not view.private(isnan.outputs[0]):
        return []
    condition, zero, kept = where.inputs
    if (condition != isnan.outputs[0] or kept != weights or not _zeros(view.const(zero))
            or view.const(zero).size != 1 or not _same_shape(view, weights, where.outputs[0])):
        return []
    return [isnan, where]


def _zeros(value: np.ndarray | None) -> bool:
    """A float constant of zeros."""
    return value is not None and value.dtype.kind == "f" and not np.any(value)


def _same_shape(view: View, a: int, b: int) -> bool:
    return view.graph.tensors[a].shape == view.graph.tensors[b].shape


def _plain_matmul(view: View, node: NodeDef) -> bool:
    """A MatMulFusion of two operands of rank 2 or more, without transposes, bias or activation."""
    return (node.op_type == "MatMulFusion" and len(node.inputs) == 2 and plain(node)
            and not node.attrs["transpose_a"] and not node.attrs["transpose_b"]
            and min(view.rank(t) for t in node.inputs) >= 2)


def _unmasked(view: View, tensor: int) -> tuple[int, int | None, list[NodeDef]]:
    """(the scores before an Add of a mask, the mask, [the Add]), or (tensor, None, [])."""
    add = view.node_of(tensor, "AddFusion")
    if add is None or not view.private(tensor):
        return tensor, None, []
    for scores, mask in (add.inputs, reversed(add.inputs)):
        producer = view.producer.get(scores)
        if producer is not None and producer.op_type in ("MatMulFusion", "MulFusion", "DivFusion"):
            return scores, mask, [add]
    return tensor, None, []


def _unscaled(view: View, tensor: int) -> tuple[int, float, list[NodeDef]]:
    """(the scores before a Mul or Div by a scalar constant, the scale, [that node]), or (tensor, 1, [])."""
    node = view.producer.get(tensor)
    if node is None or not plain(node) or not view.private(tensor) or node.op_type not in ("MulFusion", "DivFusion"):
        return tensor, 1.0, []
    a, b = node.inputs
    if view.scalar(b) is not None and view.scalar(b) != 0.0:
        return a, view.scalar(b) if node.op_type == "MulFusion" else 1.0 / view.scalar(b), [node]
    if node.op_type == "MulFusion" and view.scalar(a) is not None:
        return b, view.scalar(a), [node]
    return tensor, 1.0, []


# ---- MatMul + bias -------------------------------------------------------------------------------


def fuse_matmul_bias(graph: GraphDef, report: ConversionReport) -> None:
    """MatMulFusion without a bias, read only by an Add of a constant vector, takes it as its bias."""
    view = View(graph)
    removed = []
    for add in graph.nodes:
        if add.op_type != "AddFusion" or add.attrs["activation_type"] not in ("NO_ACTIVATION", *FUSED_CLIPS):
            continue
        for position in (0, 1):
            matmul = view.node_of(add.inputs[position], "MatMulFusion")
            bias = add.inputs[1 - position]
            value = view.const(bias)
            if matmul is None or len(matmul.inputs) > 2 or value is None or value.ndim != 1:
                continue
            if not view.private(matmul.outputs[0]) or view.graph.tensors[matmul.inputs[1]].shape[-1:] != value.shape:
                continue
            matmul.inputs.append(bias)
            matmul.attrs["activation_type"] = add.attrs["activation_type"]
            matmul.outputs = list(add.outputs)
            removed.append(add)
            report.fused_blocks.append(f"MatMul+bias {add.name}")
            break
    _remove(graph, removed)


# ---- weights stored as BLAS reads them fastest --------------------------------------------------


def store_weights_untransposed(graph: GraphDef) -> None:
    """A MatMulFusion that transposes a constant weight (Gemm's transB, PyTorch's Linear) gets the
    weight stored transposed instead: (..., K, N), contiguous, and ``transpose_b`` off.

    Measured with OpenBLAS on one thread: the classifier GEMV 1x1280 by 1280x1000 0.20 ms against
    0.28 through the transposed view (cold caches), BERT's 128x768 by 768x3072 6.5 against 7.1.
    Only a weight this node alone reads is rewritten. A layout change, not a fusion: the report's
    fused blocks do not list it.
    """
    view = View(graph)
    for node in graph.nodes:
        if node.op_type != "MatMulFusion" or not node.attrs["transpose_b"]:
            continue
        weight = node.inputs[1]
        value = view.const(weight)
        if value is None or value.ndim < 2 or not view.private(weight):
            continue
        tensor = graph.tensors[weight]
        tensor.data = np.ascontiguousarray(value.swapaxes(-1, -2))
        tensor.shape = tensor.data.shape
        node.attrs["transpose_b"] = False


# ---- transposed operands ------------------------------------------------------------------------


def fuse_transposed_operands(graph: GraphDef, report: ConversionReport) -> None:
    """A Transpose swapping the last two axes (rank 2 or more), read only by a MatMulFusion, goes: the
    MatMulFusion reads its input with that operand's transpose flag flipped."""
    view = View(graph)
    removed = []
    for node in graph.nodes:
        if node.op_type != "MatMulFusion":
            continue
        for position, flag in ((0, "transpose_a"), (1, "transpose_b")):
            operand = node.inputs[position]
            transpose = view.producer.get(operand)
            if transpose is None or transpose.op_type != "Transpose" or not view.private(operand) \
                    or _dequantized(view, node):
                continue
            rank = view.rank(operand)
            perm = list(transpose.attrs.get("perm") or range(rank)[::-1])
            if rank < 2 or perm != [*range(rank - 2), rank - 1, rank - 2] or view.rank(transpose.inputs[0]) != rank:
                continue
            node.inputs[position] = transpose.inputs[0]
            node.attrs[flag] = not node.attrs[flag]
            removed.append(transpose)
            report.fused_blocks.append(f"Transpose+MatMul {node.name}")
    _remove(graph, removed)


def _dequantized(view: View, node: NodeDef) -> bool:
    """Whether an input of ``node`` (or of the Transpose before it) comes from a DequantizeLinear: the quantized
    grouping pass that follows makes such a product an integer one, whose operands stay as the file has them."""
    producers = [view.producer.get(t) for t in node.inputs]
    producers += [view.producer.get(p.inputs[0]) for p in producers if p is not None and p.op_type == "Transpose"]
    return any(p is not None and p.op_type == "DequantizeLinear" for p in producers)


# ---- Swish ---------------------------------------------------------------------------------------


def fuse_swish(graph: GraphDef, report: ConversionReport) -> None:
    """Every Mul of a tensor by its own sigmoid (read by that Mul alone) becomes Activation SWISH."""
    view = View(graph)
    removed = []
    for mul in graph.nodes:
        if mul.op_type != "MulFusion" or len(mul.inputs) != 2 or not plain(mul):
            continue
        for position in (0, 1):
            sigmoid = view.producer.get(mul.inputs[position])
            x = mul.inputs[1 - position]
            if (sigmoid is None or sigmoid.op_type != "Activation" or sigmoid.attrs["activation_type"] != "SIGMOID"
                    or sigmoid.inputs[0] != x or not view.private(mul.inputs[position])):
                continue
            mul.op_type, mul.inputs = "Activation", [x]
            mul.attrs = {**default_attrs("Activation"), "activation_type": "SWISH", "alpha": 1.0}
            removed.append(sigmoid)
            report.fused_blocks.append(f"SWISH {mul.name}")
            break
    _remove(graph, removed)
