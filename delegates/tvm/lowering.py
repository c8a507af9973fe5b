"""One partition -> one Relax function: subgraph inputs as parameters, weights as constants.

The batch dim (dim 0 of every parameter) is a symbolic ``tirx.Var`` when the partition's ops
allow it, so one compiled module serves every batch size. ``Lowered.serves()`` says whether
a module still computes what the partition's tensors now call for: every tensor's shape
follows the module's shapes at the new batch, and no value baked in at compile time changed.
"""

from __future__ import annotations

import hashlib
import logging
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax, tirx

from lite.delegates.tvm.ops import EMITTERS, Dim, Graph, NeedsStaticShapes, Node, shape_of
from lite.kernel import Kernel
from lite.tensor import Tensor

logger = logging.getLogger("lite")

WEIGHT_ELEMENTS = 64  # smaller constants stay compiled in, even with weights_as_params

_ARITHMETIC: dict[type, Callable[[int, int], int]] = {
    tirx.Add: operator.add, tirx.Sub: operator.sub, tirx.Mul: operator.mul, tirx.FloorDiv: operator.floordiv,
    tirx.FloorMod: operator.mod, tirx.Max: max, tirx.Min: min,
}


def evaluate(dim: Dim, env: dict[tirx.Var, int]) -> int:
    """The value of a shape expression (ints, the batch var and integer arithmetic on them).

    Raises:
        KeyError: the expression has a form this evaluator does not know.
    """
    if isinstance(dim, int):
        return dim
    if isinstance(dim, tirx.IntImm):
        return int(dim.value)
    if isinstance(dim, tirx.Var):
        for var, value in env.items():
            if var.same_as(dim):
                return value
        raise KeyError(f"unbound shape variable {dim}")
    fn = _ARITHMETIC.get(type(dim))
    if fn is None:
        raise KeyError(f"shape expression {dim} ({type(dim).__name__})")
    return fn(evaluate(dim.a, env), evaluate(dim.b, env))


@dataclass
class Lowered:
    """A partition as a Relax module, and what it was built for.

    Attributes:
        mod: the IRModule with one function, ``main``.
        params: the tensors passed to ``main``, in order.
        outputs: the tensors ``main`` returns, in order (a tuple when more than one).
        batch: the symbolic batch var (None: static shapes).
        dims: the Relax shape of every parameter and every tensor the partition computes.
        baked: values computed by the runtime and compiled in as constants (they can change
            on resize; ``serves`` compares them).
        constants: every array compiled in (weights and baked values), for the cache key.
        weights: with ``weights_as_params``, the model's constants passed to ``main`` after
            ``params`` (a ``main_transform_params`` function prepares them once; see ``lower``).
    """

    mod: tvm.IRModule
    params: list[Tensor]
    outputs: list[Tensor]
    batch: tirx.Var | None
    dims: dict[Tensor, list[Dim]]
    baked: dict[Tensor, np.ndarray] = field(default_factory=dict)
    constants: list[np.ndarray] = field(default_factory=list)
    weights: list[Tensor] = field(default_factory=list)

    @property
    def symbolic(self) -> bool:
        return self.batch is not None

    def batch_value(self) -> int | None:
        """The batch size the parameters have now (None when static or they disagree)."""
        if self.batch is None or not self.params:
            return None
        sizes = {t.shape[0] for t in self.params if t.shape}
        return sizes.pop() if len(sizes) == 1 else None

    def serves(self) -> bool:
        """True when this module computes the partition at the tensors' current shapes and values."""
        env = {}
        if self.batch is not None:
            value = self.batch_value()
            if value is None or value < 1:
                return False
            env[self.batch] = value
        try:
            for tensor, dims in self.dims.items():
                if len(tensor.shape) != len(dims) or any(
                        evaluate(d, env) != s for d, s in zip(dims, tensor.shape, strict=True)):
                    return False
        except KeyError:
            return False
        return all(t.data is not None and t.data.shape == v.shape and np.array_equal(t.data, v)
                   for t, v in self.baked.items())

    def digest(self) -> str:
        """A hash of every constant's dtype, shape and bytes (part of the cache key)."""
        h = hashlib.blake2b(digest_size=16)
        for array in self.constants:
            h.update(f"{array.dtype.str}{array.shape}".encode())
            h.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
        return h.hexdigest()


def lower(kernels: list[Kernel], inputs: list[Tensor], outputs: list[Tensor], symbolic_batch: bool = True,
          weights_as_params: bool = False) -> Lowered:
    """The partition as one Relax function; the batch dim symbolic when the ops allow it.

    With ``weights_as_params`` the model's float constants (weights) are parameters of ``main``
    after the inputs instead of constants compiled in, and ``relax.transform.LiftTransformParams``
    moves what is computed from them alone (transposes, folded scales) into
    ``main_transform_params``, run once at load: the library then holds code only, and the
    weights come from the ``.lite`` file (partitions saved ahead of time).

    Raises:
        ValueError: the Relax shapes disagree with the runtime's (a bug in an emitter), or
            an emitter cannot lower its op.
    """
    params = [t for t in inputs if not t.value_known]
    batches = {t.shape[0] if t.shape else None for t in params}
    if symbolic_batch and len(batches) == 1 and None not in batches:
        try:
            lowered = _build(kernels, params, outputs, tirx.Var("batch", "int64"), batches.pop(), weights_as_params)
            if lowered.serves():
                return lowered
            logger.debug("TVM: symbolic batch shapes disagree with the runtime's; lowering with static shapes")
        except NeedsStaticShapes as exc:
            logger.debug("TVM: static shapes needed: %s", exc)
        except Exception as exc:  # NOTE: Relax's shape inference may refuse a symbolic form; static is the fallback
            logger.debug("TVM: symbolic batch failed (%s: %s); lowering with static shapes", type(exc).__name__, exc)
    lowered = _build(kernels, params, outputs, None, None, weights_as_params)
    if not lowered.serves():
        wrong = {t.name: (list(t.shape), d) for t, d in lowered.dims.items() if tuple(d) != t.shape}
        raise ValueError(f"Relax shapes disagree with the runtime's: {wrong}")
    return lowered


def _identifier(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return name if name and not name[0].isdigit() else f"t_{name}"


def _build(kernels: list[Kernel], params: list[Tensor], outputs: list[Tensor], batch: tirx.Var | None,
           batch_value: int | None, weights_as_params: bool = False) -> Lowered:
    variables = []
    for tensor in params:
        dims = [batch if batch is not None and i == 0 else d for i, d in enumerate(tensor.shape)]
        variables.append(relax.Var(_identifier(tensor.name), relax.TensorType(dims, tensor.dtype.name)))
    exprs: dict[Tensor, relax.Expr] = dict(zip(params, variables, strict=True))
    weights = _weights(kernels) if weights_as_params else []
    for k, tensor in enumerate(weights):
        exprs[tensor] = relax.Var(f"weight_{k}", relax.TensorType(list(tensor.shape), tensor.dtype.name))
    lowered = Lowered(tvm.IRModule(), list(params), list(outputs), batch, {}, weights=weights)
    bb = relax.BlockBuilder()
    attrs = {"num_input": len(params)} if weights else None
    with bb.function("main", [*variables, *(exprs[t] for t in weights)], attrs=attrs):
        with bb.dataflow():
            g = Graph(bb, batch, batch_value)
            for kernel in kernels:
                _emit_kernel(kernel, g, exprs, lowered)
            values = [exprs[t] for t in outputs]
            out = bb.emit_output(values[0] if len(values) == 1 else relax.Tuple(values))
        bb.emit_func_output(out)
    lowered.mod = relax.transform.LiftTransformParams()(bb.get()) if weights else bb.get()
    computed = [t for k in kernels for t in k.outputs]
    lowered.dims = {t: shape_of(exprs[t]) for t in [*params, *computed]}
    return lowered


def _weights(kernels: list[Kernel]) -> list[Tensor]:
    """The float constants the partition's kernels read as data (not as values an emitter bakes in)."""
    found: dict[Tensor, None] = {}
    for kernel in kernels:
        baked = EMITTERS[kernel.type].values
        for index, tensor in enumerate(kernel.inputs):
            if (tensor is not None and index not in baked and tensor.is_const and tensor.data is not None
                    and tensor.dtype.kind == "f" and tensor.data.size >= WEIGHT_ELEMENTS):
                found[tensor] = None
    return list(found)


def _emit_kernel(kernel: Kernel, g: Graph, exprs: dict[Tensor, relax.Expr], lowered: Lowered) -> None:
    """Emits one kernel's Relax and binds its output tensors."""
    emitter = EMITTERS[kernel.type]
    operands = [_operand(t, exprs, lowered) for t in kernel.inputs]
    for index, tensor in enumerate(kernel.inputs):
        if tensor is not None and tensor.value_known and not tensor.is_const and index not in emitter.shapes:
            lowered.baked[tensor] = tensor.data.copy()
    result = emitter.emit(Node(kernel, operands, g))
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(results) != len(kernel.outputs):
        raise ValueError(f"{kernel.type} emitter gave {len(results)} results for {len(kernel.outputs)} outputs")
    for tensor, expr in zip(kernel.outputs, results, strict=True):
        exprs[tensor] = expr if isinstance(expr, relax.Var) else g.bb.emit(expr, _identifier(tensor.name))


def _operand(tensor: Tensor | None, exprs: dict[Tensor, relax.Expr], lowered: Lowered) -> relax.Expr | None:
    """A kernel input as Relax: a parameter, an earlier result, or a constant compiled in."""
    if tensor is None:
        return None
    if tensor in exprs:
        return exprs[tensor]
    if not (tensor.is_const or tensor.value_known) or tensor.data is None:
        raise ValueError(f"tensor {tensor.name!r} is neither a parameter, a result nor a known value")
    data = np.ascontiguousarray(tensor.data)
    lowered.constants.append(data)
    exprs[tensor] = relax.const(data)
    return exprs[tensor]
